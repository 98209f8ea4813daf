"""The policy registry and mode strings: every policy a comparison can run, and how one is named.

`POLICIES` maps a policy's name to its `PolicyKind`: its class (policies.py), its settings
(`Setting`), title, blurb and colour, and what a run must measure first. A request names its
policies with `ModeSpec`s, parsed and formatted as a mode string
("static:5,heuristic:5,dynamic:0.4,oracle"); `make_policy` makes a fresh policy for one run. The
page, the command line, the API, the study and the draft registry (drafts.py, for `Setting`) read
it. Importing it imports no torch.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..errors import SpecVizError
from .policies import (
    MAX_LOOKAHEAD,
    Adaptive,
    CostAware,
    Dynamic,
    Entropy,
    Heuristic,
    Oracle,
    PassCosts,
    Policy,
    Static,
    cost_aware_label,
)

# ---- the registry: every policy a comparison can run --------------------------------------


@dataclass(frozen=True)
class Setting:
    """One setting of a policy: its keyword argument, default and bounds (`high` None: none)."""

    key: str
    default: int | float
    low: float
    high: float | None
    whole: bool = False  # a count, read as an int
    label: str | None = None  # its name on the page ("static k"); None: not on the page
    short: str = ""  # its page widget's id after the policy's name: "k" in "static-k"

    def read(self, text: str) -> int | float:
        return int(text) if self.whole else float(text)


@dataclass(frozen=True)
class PolicyKind:
    """What the page, the CLI, the API and the study know of a policy, in one place.

    `make` builds it from its settings (the policy's own checks refuse bad values); `needs` names
    what a run must measure first: "prices" (the pair's pass prices, the cost-aware rule) or
    "reference" (the oracle's ideal line, from a greedy answer). `describe` gives the run's label
    from its settings where the policy cannot be made before that. `optional` kinds get a column
    only when ticked; `confidence`: it stops on what the draft says of its own guesses (a draft
    model's probabilities, or a lookup's count-based ones); `replayed`: the what-if replays it
    from a run's record."""

    name: str
    make: Callable[..., Policy]
    settings: tuple[Setting, ...]
    title: str
    blurb: str
    color: str
    optional: bool = False
    needs: str | None = None
    describe: Callable[..., str] | None = None
    confidence: bool = False
    replayed: bool = True

    def defaults(self) -> dict[str, Any]:
        return {s.key: s.default for s in self.settings}

    def setting(self, key: str) -> Setting:
        return next(s for s in self.settings if s.key == key)

    def label(self, params: dict[str, Any]) -> str:
        """The label a run will carry; checks the settings, before any model work."""
        if self.describe is not None:
            return self.describe(**params)
        return self.make(**params).label




def _tokens(label: str | None = None) -> Setting:
    return Setting("max_tokens", 20, 1, MAX_LOOKAHEAD, whole=True, label=label, short="max")


def _k(label: str) -> Setting:
    return Setting("num_assistant_tokens", 5, 1, MAX_LOOKAHEAD, whole=True, label=label, short="k")


def _threshold(label: str, short: str = "threshold") -> Setting:
    return Setting("assistant_confidence_threshold", 0.4, 0.0, 1.0, label=label, short=short)


# Okabe-Ito colours, which stay distinguishable with the common forms of colour blindness (yellow
# is left out: unreadable on white). The order is the page's column order.
POLICIES: dict[str, PolicyKind] = {kind.name: kind for kind in [
    PolicyKind("static", Static, (_k("static k"),), "Static", "k draft tokens every round", "#0072B2"),
    PolicyKind("heuristic", Heuristic, (_k("heuristic starting k"),), "Heuristic",
               "+2 after a fully accepted round, else -1", "#E69F00"),
    PolicyKind("dynamic", Dynamic, (_threshold("dynamic threshold"), _tokens("dynamic max tokens")),
               "Dynamic (confidence)", "stop drafting when draft confidence < threshold", "#009E73",
               confidence=True),
    PolicyKind("oracle", Oracle, (), "Oracle", "drafts exactly until the draft disagrees", "#CC79A7",
               needs="reference", replayed=False),
    PolicyKind("adaptive", Adaptive, (_threshold("adaptive start threshold", "t0"), _tokens()), "Adaptive (confidence)",
               "dynamic threshold re-fitted after every round", "#D55E00", optional=True, confidence=True),
    PolicyKind("entropy", Entropy,
               (Setting("max_entropy", 1.0, 0.0, None, label="entropy bound (nats)", short="h"), _tokens()),
               "Entropy", "stop drafting when the draft's entropy > bound", "#56B4E9", optional=True,
               confidence=True),
    PolicyKind("costaware", CostAware, (_tokens("cost-aware max tokens"),), "Cost-aware",
               "draft while one more token is worth its price on this machine", "#000000", optional=True,
               needs="prices", describe=cost_aware_label, confidence=True),
]}
POLICY_NAMES = tuple(POLICIES)


# ---- mode strings: "static:5,heuristic:5,dynamic:0.4,oracle" --------------------------------


@dataclass(frozen=True)
class ModeSpec:
    """A policy to run, as named on the command line or in the UI."""

    policy: str
    params: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def of(cls, name: str, **params: Any) -> ModeSpec:
        """The mode with `params`, its other settings at their defaults."""
        return cls(name, {**POLICIES[name].defaults(), **params})


def format_modes(specs: Sequence[ModeSpec]) -> str:
    """The mode string `parse_modes` reads back into `specs`."""
    return ",".join(":".join([s.policy, *(f"{s.params.get(k.key, k.default):g}" for k in POLICIES[s.policy].settings)])
                    for s in specs)


def mode_grammar() -> str:
    """How a mode string is written, for help texts: "static[:K], ..., costaware[:MAX]"."""
    return ", ".join(name + "".join(f"[:{(s.short or s.key).upper()}]" for s in kind.settings)
                     for name, kind in POLICIES.items())


# The page's four columns at their defaults, written the short way (later settings at defaults).
DEFAULT_MODES = ",".join(":".join([k.name, *(f"{s.default:g}" for s in k.settings[:1])])
                         for k in POLICIES.values() if not k.optional)
# One request's modes: as many as the page has columns for, and a few more. Each mode is a whole
# decoding run with the models held, so a request naming hundreds would hold them for everyone.
MAX_MODES = 8


def parse_modes(text: str, max_modes: int = MAX_MODES) -> list[ModeSpec]:
    """Parse `static:5,heuristic:5,dynamic:0.4[:20],oracle,adaptive:0.4[:20],entropy:1.0[:20],costaware[:20]`
    (each mode's settings in `POLICIES`' order, missing ones at their defaults): at most
    `max_modes` modes, none twice."""
    parts = [p.strip() for p in (text or "").split(",") if p.strip()]
    if len(parts) > max_modes:  # before parsing: a refusal in microseconds, whatever the length
        raise SpecVizError(f"{len(parts)} modes given; at most {max_modes} can run in one comparison.")
    specs = []
    for part in parts:
        name, _, arg = part.partition(":")
        name = name.strip().lower()
        if name not in POLICIES:
            raise SpecVizError(f"Unknown mode {name!r}: choose from {', '.join(POLICY_NAMES)}.")
        kind = POLICIES[name]
        args = [a for a in arg.split(":") if a] if arg else []
        try:
            params = {s.key: s.read(a) for s, a in zip(kind.settings, args)}
        except ValueError:
            raise SpecVizError(f"Cannot read the settings in mode {part!r}.") from None
        spec = ModeSpec.of(name, **params)
        kind.label(spec.params)  # checks the numbers now, before any model work
        specs.append(spec)
    if not specs:
        raise SpecVizError("No modes given: use e.g. " + DEFAULT_MODES)
    check_modes(specs, max_modes)
    return specs


def check_modes(specs: Sequence[ModeSpec], max_modes: int = MAX_MODES) -> None:
    """Refuse more than `max_modes` modes, or one mode twice: its run would only repeat the first
    (greedy decoding gives the same rounds), and two runs under one label cannot be told apart in
    the columns, the exports or the API's answer."""
    if len(specs) > max_modes:
        raise SpecVizError(f"{len(specs)} modes given; at most {max_modes} can run in one comparison.")
    seen: set[str] = set()
    for spec in specs:
        label = mode_label(spec)
        if label in seen:
            raise SpecVizError(f"The mode {label!r} is named twice: name each mode once.")
        seen.add(label)


def mode_label(spec: ModeSpec) -> str:
    """The label a mode's run will carry, without what its policy needs from a pair."""
    if spec.policy not in POLICIES:
        raise SpecVizError(f"Unknown policy {spec.policy!r}.")
    return POLICIES[spec.policy].label(spec.params)


def make_policy(spec: ModeSpec, oracle: Oracle | None = None, prices: PassCosts | None = None) -> Policy:
    """A fresh policy for one run (policies carry state, so never share one across runs). The oracle
    needs its ideal line, the cost-aware rule the pair's pass prices."""
    kind = POLICIES.get(spec.policy)
    if kind is None:
        raise SpecVizError(f"Unknown policy {spec.policy!r}.")
    if kind.needs == "reference":
        if oracle is None:
            raise SpecVizError("The oracle needs a greedy reference run.")
        return oracle
    if kind.needs == "prices":
        if prices is None:
            raise SpecVizError("The cost-aware rule needs the pair's measured pass prices.")
        return kind.make(prices, **spec.params)
    return kind.make(**spec.params)

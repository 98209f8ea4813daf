"""Draft sources: what proposes a round's tokens, in one registry, as modes.py has the policies.

`DRAFTS` maps a draft's name to its `DraftKind`: its settings (`DraftSetting`: keyword, default,
bounds, the page's label, the command line's help), its title and blurb, whether its calls are
draft passes, what the cost-aware rule is told a step costs, how a run makes its drafter
(`make`), how the oracle's ideal is found for it (`oracle`) and how the what-if replays it
(`from_text`). A request names its draft with a `DraftSpec(name, params)`, parsed and formatted
as a mode is: "model", "lookup", "lookup:3:16" (settings in the registry's order, missing ones at
their defaults).

Three families of drafts so far:

- `ModelDraft`, the pair's draft model ("model"): the engine's `ModelDrafter`, fed so that its
  guess at a position is a function of the text; the oracle reads the answer with it once
  (`oracle.oracle_search`) and the what-if replays any policy from that table.
- `TextDraft`, a draft whose proposal is a function of the text before the round, made by a
  proposal rule in a module of its own ("lookup": lookup.py): the engine's `TextDrafter`; the
  oracle recomputes the proposal at every position and plans the fewest rounds over it
  (`oracle.text_oracle_search`: where a round starts changes what it proposes); the what-if
  recomputes each round's proposal from the prompt kept with the comparison.
- `HybridDraft`, lookup where the context matches and the draft model where it does not or after
  the copy ("hybrid": hybrid.py): the engine's `hybrid.HybridDrafter`; the oracle reads the answer
  with the model once and recomputes the copy at every position, planning the fewest rounds over
  them; the what-if recomputes each round from the prompt and the model's table, both kept with the
  comparison (`keeps_prompt`), by the kind's own `replay`.

The page (its Draft menu and each setting's box), the API, MCP, the command line (`--draft`, and
`--NAME-SETTING` for each setting), the study and the records (a comparison's JSON keeps a
draft's settings under its name) read this registry. Importing it imports no torch.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Generator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from ..errors import SpecVizError
from . import hybrid, lookup
from .modes import Setting
from .oracle import DraftAlongReference, TextProposer, draft_along, fewest_rounds, oracle_search, text_oracle_search
from .policies import Oracle, PassCosts, Policy

if TYPE_CHECKING:
    from ..pair.models import ModelPair
    from .drafters import MakeDrafter

OracleFound = tuple[Oracle, list[int], DraftAlongReference | None]  # the oracle, its ideal line, the draft's table
Replayed = tuple[int, int, int]  # a what-if replay's target passes, draft passes, plain passes
DraftView = tuple[int, float, float]  # a drafted token, its probability and entropy


@dataclass(frozen=True)
class DraftSetting(Setting):
    """One setting of a draft: a policy's `Setting` (keyword, default, bounds, the page's label,
    `short`: its page widget's id after the draft's name, "ngram" in "lookup-ngram", which also
    names its command-line option, `--lookup-ngram`, and its API parameter, `lookup_ngram`), and:"""

    tag: str = ""  # its letter in a studied pair's name: "n" in "smollm2-135m-int8+lookup-n3-k16"
    help: str = ""  # the command line's help: "the longest n-gram to match"
    info: str = ""  # the line under its box on the page: "the longest n-gram matched"


@dataclass(frozen=True)
class DraftKind:
    """What the pipeline, the page, the CLI, the API and the study know of a draft source.

    `title` is its entry in the page's Draft menu, `blurb` what it is (the API's and the CLI's
    help), `details` its settings in words (a format string over them, for labels and messages).
    `counts_passes`: its calls are draft passes (a model); False: it makes none. `step_ms`: what
    the cost-aware rule is told one draft step costs; None: the pair's measured draft call.
    How the oracle's ideal is found for it is its `oracle`; how the what-if replays it, its
    `from_text` (and `proposer`), or its own `replay`."""

    name: str
    title: str
    blurb: str
    settings: tuple[DraftSetting, ...] = ()
    details: str = ""
    counts_passes: bool = True
    step_ms: float | None = None

    @property
    def from_text(self) -> bool:
        """Its proposal is a function of the text before the round: the comparison keeps the
        prompt, and the what-if recomputes each round's proposal with `proposer` (else it replays
        from the table of the draft's guesses along the answer that the oracle search made)."""
        return False

    @property
    def keeps_prompt(self) -> bool:
        """A comparison run with it keeps the prompt's token ids (`Comparison.prompt_ids`): its
        what-if recomputes proposals from the text."""
        return self.from_text

    def replay(self, policy: Policy, params: dict[str, Any], *, prompt_ids: list[int] | None, reference: list[int],
               along: DraftAlongReference | None, max_new_tokens: int, eos_ids: frozenset[int],
               row_exact: bool, observed: Mapping[int, Sequence[DraftView]] | None = None) -> Replayed | None:
        """Its own what-if replay of `policy` on a greedy answer `reference`, from what the
        comparison keeps (the prompt if `keeps_prompt`, the draft's table `along` from its oracle)
        and what its real rounds proposed (`observed`: by the answer position they started at):
        target, draft and plain passes. None: the what-if's own replays (explain/sweep.py: from the
        draft's table, or, `from_text`, from the text)."""
        return None

    def proposer(self, params: dict[str, Any]) -> TextProposer:
        """Its proposal rule with these settings (the text so far, the EOS ids -> a proposal),
        for a draft read from the text."""
        raise NotImplementedError(f"the draft {self.name!r} does not read its proposal from the text")

    def defaults(self) -> dict[str, Any]:
        return {s.key: s.default for s in self.settings}

    def check(self, params: dict[str, Any]) -> None:
        """Refuse unknown or bad settings with a one-line SpecVizError, before any model work."""
        unknown = set(params) - {s.key for s in self.settings}
        if unknown:
            raise SpecVizError(f"The draft {self.name!r} has no setting {min(unknown)!r}.")

    def described(self, params: dict[str, Any]) -> str:
        """Its settings in words: "n-gram 2, 10 tokens" ("" for a draft without settings)."""
        return self.details.format(**{**self.defaults(), **params})

    def label(self, params: dict[str, Any]) -> str:
        """How runs, logs and set-up lines name it: "model", "lookup (n-gram 2, 10 tokens)"."""
        described = self.described(params)
        return f"{self.name} ({described})" if described else self.name

    def prices(self, measured: PassCosts) -> PassCosts:
        """The prices a cost-aware run with this draft decides with, from the pair's measured ones."""
        return measured if self.step_ms is None else PassCosts(self.step_ms, measured.target_ms)

    def make(self, params: dict[str, Any]) -> MakeDrafter:
        """What `engine.speculate` calls to make a run's drafter."""
        raise NotImplementedError

    def oracle(self, pair: ModelPair, prompt_ids: list[int], reference: list[int],
               params: dict[str, Any]) -> Generator[int, None, OracleFound]:
        """The oracle for a greedy run whose answer is `reference`, the ideal lookahead at every
        position, and the draft's guesses along the answer where the what-if replays from them
        (None where it recomputes them), as the return value; yields the position reached."""
        raise NotImplementedError


@dataclass(frozen=True)
class ModelDraft(DraftKind):
    """The pair's draft model, fed for exact guesses (drafters.ModelDrafter)."""

    def make(self, params: dict[str, Any]) -> MakeDrafter:
        from .drafters import ModelDrafter

        return ModelDrafter.for_pair

    def oracle(self, pair: ModelPair, prompt_ids: list[int], reference: list[int],
               params: dict[str, Any]) -> Generator[int, None, OracleFound]:
        return (yield from oracle_search(pair, prompt_ids, reference))


@dataclass(frozen=True, kw_only=True)
class TextDraft(DraftKind):
    """A draft read from the text so far: `propose(text, settings_of(**params), eos_ids)` gives
    its proposal after `text` (a lookup.Lookup: tokens, a probability and an entropy for each,
    where they were copied from), `settings_of` checks its settings (its own one-line errors)."""

    settings_of: Callable[..., Any]
    propose: Callable[[list[int], Any, frozenset[int]], lookup.Lookup]
    counts_passes: bool = False

    @property
    def from_text(self) -> bool:
        return True

    def check(self, params: dict[str, Any]) -> None:
        super().check(params)
        self.settings_of(**{**self.defaults(), **params})

    def proposer(self, params: dict[str, Any]) -> TextProposer:
        settings = self.settings_of(**{**self.defaults(), **params})
        return lambda text, eos_ids: self.propose(text, settings, eos_ids)

    def make(self, params: dict[str, Any]) -> MakeDrafter:
        from .drafters import TextDrafter

        return TextDrafter.using(self.proposer(params))

    def oracle(self, pair: ModelPair, prompt_ids: list[int], reference: list[int],
               params: dict[str, Any]) -> Generator[int, None, OracleFound]:
        found, ideal = yield from text_oracle_search(prompt_ids, reference, self.proposer(params),
                                                     pair.eos_token_ids)
        return found, ideal, None


@dataclass(frozen=True)
class HybridDraft(DraftKind):
    """Prompt lookup where the context matches, the pair's draft model where it does not or after
    the copy (hybrid.py). Its settings are lookup's and the shortest match it copies
    (`hybrid.HybridSettings`); its calls are the model's draft passes, priced as the model's, and a
    copied token at lookup's step."""

    @property
    def keeps_prompt(self) -> bool:
        return True

    def prices(self, measured: PassCosts) -> PassCosts:
        return replace(measured, copy_ms=lookup.STEP_MS)

    def settings_of(self, params: dict[str, Any]) -> hybrid.HybridSettings:
        return hybrid.HybridSettings(**{**self.defaults(), **params})

    def check(self, params: dict[str, Any]) -> None:
        super().check(params)
        self.settings_of(params)

    def make(self, params: dict[str, Any]) -> MakeDrafter:
        return hybrid.HybridDrafter.using(self.settings_of(params))

    def oracle(self, pair: ModelPair, prompt_ids: list[int], reference: list[int],
               params: dict[str, Any]) -> Generator[int, None, OracleFound]:
        """The model draft's guesses along the answer (`oracle.draft_along`, the table the what-if
        keeps), the copy recomputed at every position (`hybrid.ideal_along`), and the fewest rounds
        over that ideal (`oracle.fewest_rounds`: where a round starts changes the copy)."""
        along = yield from draft_along(pair, prompt_ids, reference)
        ideal = hybrid.ideal_along(prompt_ids, reference, along, self.settings_of(params), pair.eos_token_ids)
        return Oracle(fewest_rounds(ideal)), ideal, along

    def replay(self, policy: Policy, params: dict[str, Any], *, prompt_ids: list[int] | None, reference: list[int],
               along: DraftAlongReference | None, max_new_tokens: int, eos_ids: frozenset[int],
               row_exact: bool, observed: Mapping[int, Sequence[DraftView]] | None = None) -> Replayed | None:
        if prompt_ids is None or along is None:
            raise ValueError("the hybrid draft's what-if needs the comparison's prompt and the draft's table")
        return hybrid.replay_passes(policy, prompt_ids, reference, along, self.settings_of(params), max_new_tokens,
                                    eos_ids, row_exact, observed)


def lookup_settings(draft: str, defaults: Any = lookup.LookupSettings) -> tuple[DraftSetting, ...]:
    """Prompt lookup's two settings, as a draft named `draft` offers them on the page ("lookup n-gram"),
    at the `defaults` of its settings' class."""
    return (DraftSetting("max_ngram", defaults.max_ngram, 1, lookup.MAX_NGRAM, whole=True,
                         label=f"{draft} n-gram", short="ngram", tag="n", help="the longest n-gram to match",
                         info="the longest n-gram matched"),
            DraftSetting("max_tokens", defaults.max_tokens, 1, lookup.MAX_TOKENS, whole=True,
                         label=f"{draft} tokens", short="tokens", tag="k", help="the most tokens one lookup copies",
                         info="the most tokens copied"))


HYBRID_SETTINGS = (*lookup_settings("hybrid", hybrid.HybridSettings),
                   DraftSetting("min_ngram", hybrid.HybridSettings.min_ngram, 1, lookup.MAX_NGRAM, whole=True,
                                label="hybrid shortest n-gram", short="shortest", tag="m",
                                help="the shortest n-gram whose match is copied (else the draft model drafts)",
                                info="shorter matches: the draft model drafts"))


# ---- the registry: every draft a comparison can run with ------------------------------------

DRAFTS: dict[str, DraftKind] = {kind.name: kind for kind in [
    ModelDraft("model", "draft model", "the pair's draft model"),
    TextDraft("lookup", "prompt lookup",
              "prompt lookup: copies what followed the last n-gram's first earlier occurrence in the prompt and "
              "answer; no draft model runs",
              lookup_settings("lookup"), "n-gram {max_ngram}, {max_tokens} tokens", step_ms=lookup.STEP_MS,
              settings_of=lookup.LookupSettings, propose=lookup.propose),
    HybridDraft("hybrid", "lookup, then the draft model",
                "prompt lookup where the context matches (no draft pass), the pair's draft model where it does "
                "not or after the copied span", HYBRID_SETTINGS, "n-gram {min_ngram}-{max_ngram}, {max_tokens} tokens"),
]}


# ---- draft strings: "model", "lookup", "lookup:3:16" ----------------------------------------


@dataclass(frozen=True)
class DraftSpec:
    """A draft to run with, as named on the command line, the page or the API: its name in
    `DRAFTS` and its settings."""

    name: str
    params: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def of(cls, name: str, **params: Any) -> DraftSpec:
        """The draft with `params`, its other settings at their defaults."""
        return cls(name, {**DRAFTS[name].defaults(), **params})

    @property
    def kind(self) -> DraftKind:
        return draft_kind(self.name)

    @property
    def label(self) -> str:
        return self.kind.label(self.params)


DEFAULT_DRAFT = DraftSpec("model")  # the pair's own draft model: what every request drafts with unless told


def draft_kind(name: str) -> DraftKind:
    """The registered draft of this name, or a one-line SpecVizError naming every one."""
    if name not in DRAFTS:
        listed = " or ".join(f'"{n}"' for n in DRAFTS)
        raise SpecVizError(f"The draft must be {listed}, got {str(name)[:40]!r}.")
    return DRAFTS[name]


def read_draft(text: str | None) -> tuple[str, dict[str, Any]]:
    """A draft string's name and the settings it gives ("lookup:3" -> "lookup", {"max_ngram": 3});
    empty: the default draft."""
    name, _, arg = (text or "").strip().partition(":")
    name = name.strip().lower() or DEFAULT_DRAFT.name
    kind = draft_kind(name)
    args = [a for a in arg.split(":") if a.strip()] if arg else []
    if len(args) > len(kind.settings):
        raise SpecVizError(f"The draft {name!r} takes at most {len(kind.settings)} settings, got {str(text)[:60]!r}.")
    try:
        return name, {s.key: s.read(a) for s, a in zip(kind.settings, args)}
    except ValueError:
        raise SpecVizError(f"Cannot read the settings in the draft {str(text)[:60]!r}.") from None


def make_draft(name: str, **params: Any) -> DraftSpec:
    """The draft of this name with `params`, the rest at their defaults, checked."""
    draft_kind(name)  # an unknown name: the error naming every draft, before `of` looks it up
    return check_draft(DraftSpec.of(name, **params))


def check_draft(spec: DraftSpec) -> DraftSpec:
    """`spec`, after its kind has checked its settings (a one-line SpecVizError if not right)."""
    draft_kind(spec.name).check(spec.params)
    return spec


def parse_draft(text: str | None) -> DraftSpec:
    """Parse "model", "lookup" or "lookup:3:16" (settings in `DRAFTS`' order, missing ones at
    their defaults; empty: the default draft), checked."""
    name, params = read_draft(text)
    return make_draft(name, **params)


def format_draft(spec: DraftSpec) -> str:
    """The draft string `parse_draft` reads back into `spec`."""
    return ":".join([spec.name, *(f"{spec.params.get(s.key, s.default):g}" for s in DRAFTS[spec.name].settings)])


def draft_choices() -> str:
    """Every draft, for help texts: '"model" (the pair's draft model) or "lookup" (prompt lookup: ...)'."""
    return " or ".join(f'"{name}" ({kind.blurb})' for name, kind in DRAFTS.items())


def pair_setup(setup: str, spec: DraftSpec) -> str:
    """A pair's set-up line as a run with `spec` used it: the pair's own with its draft model,
    else the target's part and the draft's label ("target ...; draft lookup (n-gram 2, 10 tokens)"); a
    draft that runs the pair's draft model too keeps the model's part ("...; draft int8; hybrid (...)")."""
    if spec.name == DEFAULT_DRAFT.name:
        return setup
    if spec.kind.counts_passes:
        return f"{setup}; {spec.label}"
    return f"{setup.split('; draft')[0]}; draft {spec.label}"


# ---- asked for on a command line (compare, study) -------------------------------------------


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """`--draft NAME`, and `--NAME-SHORT` for each setting of each draft (`--lookup-ngram`)."""
    parser.add_argument("--draft", choices=tuple(DRAFTS), default=DEFAULT_DRAFT.name,
                        help=f"what proposes the tokens (default {DEFAULT_DRAFT.name}): {draft_choices()}")
    for name, kind in DRAFTS.items():
        for s in kind.settings:
            parser.add_argument(f"--{name}-{s.short}", type=int if s.whole else float, default=s.default,
                                help=f"with --draft {name}: {s.help} (default {s.default:g})")


def from_arguments(args: argparse.Namespace) -> DraftSpec:
    """The draft `--draft` and its settings' options ask for, checked."""
    kind = draft_kind(args.draft)
    return make_draft(kind.name, **{s.key: getattr(args, f"{kind.name}_{s.short}".replace("-", "_"))
                                    for s in kind.settings})

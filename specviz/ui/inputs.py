"""The app's input widgets turned into checked values, and the server's own options.

Every check raises SpecVizError with a message the page shows as it is.
"""

from __future__ import annotations

import argparse
import math
import os
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import NamedTuple

from ..decoding.drafts import DEFAULT_DRAFT, DRAFTS, DraftSetting, DraftSpec, make_draft, read_draft
from ..decoding.modes import POLICIES, ModeSpec, Setting, format_modes
from ..errors import SpecVizError

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 7860


# ---- settings -> modes ---------------------------------------------------------------------


def _finite(value: object, what: str, kind: str = "a number") -> float:
    """A finite number from a widget value, or SpecVizError naming `what` and the `kind` expected."""
    if value is None or value == "":  # Gradio sends None for a number box the user cleared
        raise SpecVizError(f"{what} is empty: enter {kind}.")
    message = f"{what} must be {kind}, got {value!r}."
    if isinstance(value, bool):
        raise SpecVizError(message)
    try:
        number = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise SpecVizError(message) from None
    if not math.isfinite(number):
        raise SpecVizError(message)
    return number


def _whole(value: object, what: str) -> int:
    """A whole number from a widget value (sliders and number boxes give floats)."""
    number = _finite(value, what, "a whole number")
    if number != int(number):
        raise SpecVizError(f"{what} must be a whole number, got {value!r}.")
    return int(number)


def _number(value: object, what: str) -> float:
    return _finite(value, what)


def setting_value(value: object, setting: Setting) -> int | float:
    """A page widget's value for a policy setting, checked against the registry's bounds."""
    name = setting.label or setting.key
    what = name[0].upper() + name[1:] if setting.whole else f"The {name}"  # "Static k", "The dynamic threshold"
    number = _whole(value, what) if setting.whole else _number(value, what)
    if setting.high is None and number < setting.low:
        raise SpecVizError(f"{what} must be {setting.low:g} or more, got {number:g}.")
    if setting.high is not None and not setting.low <= number <= setting.high:
        raise SpecVizError(f"{what} must be between {setting.low:g} and {setting.high:g}, got {number:g}.")
    return number


def page_modes(values: Mapping[str, Mapping[str, object]], ticked: Collection[str] = ()) -> list[ModeSpec]:
    """The modes a Run on the page compares: every policy with a column of its own and each
    optional one in `ticked`, in the registry's order, at its defaults but for the settings the
    page has a widget for (`values`: widget values by policy, then setting)."""
    specs = []
    for name, kind in POLICIES.items():
        if kind.optional and name not in ticked:
            continue
        given = values.get(name, {})
        specs.append(ModeSpec.of(name, **{s.key: setting_value(given[s.key], s) for s in kind.settings
                                          if s.key in given}))
    return specs


@dataclass(frozen=True)
class PageWidget:
    """One of the page's settings widgets: an optional policy's column checkbox (`setting` None),
    or a box for one of a policy's settings (every setting the registry gives a page label)."""

    policy: str
    setting: Setting | None = None

    @property
    def elem_id(self) -> str:
        return f"{self.policy}-{self.setting.short if self.setting else 'on'}"


# The page builds, and a Run reads, these widgets in this order: a new policy's settings and
# column checkbox appear on the page from its registry entry alone.
PAGE_WIDGETS: tuple[PageWidget, ...] = tuple(
    widget for name, kind in POLICIES.items()
    for widget in [*([PageWidget(name)] if kind.optional else []),
                   *(PageWidget(name, s) for s in kind.settings if s.label)])


def ticked_columns(*values: object) -> list[str]:
    """The optional policies whose column checkbox is ticked, from widget values in PAGE_WIDGETS order."""
    return [w.policy for w, value in zip(PAGE_WIDGETS, values) if w.setting is None and value]


def widget_modes(*values: object) -> list[ModeSpec]:
    """The modes a Run compares, from the settings widgets' values in PAGE_WIDGETS order (an
    empty box is an error; widgets left out keep their defaults, their columns unticked)."""
    given: dict[str, dict[str, object]] = {}
    for widget, value in zip(PAGE_WIDGETS, values):
        if widget.setting is not None:
            given.setdefault(widget.policy, {})[widget.setting.key] = value
    return page_modes(given, ticked_columns(*values))


def modes_string(*values: object) -> str:
    """`widget_modes` as the mode string the CLI and the API take (and the run's log line shows)."""
    return format_modes(widget_modes(*values))


# ---- settings -> the draft -------------------------------------------------------------------


@dataclass(frozen=True)
class DraftWidget:
    """A box on the page for one setting of a draft (every setting the registry gives a page
    label). Its id ("lookup-ngram") and its keyword ("lookup_ngram", as the API's parameter and
    the command line's option `--lookup-ngram` are named) both come from the draft's name and the
    setting's `short`."""

    draft: str
    setting: DraftSetting

    @property
    def elem_id(self) -> str:
        return f"{self.draft}-{self.setting.short}"

    @property
    def keyword(self) -> str:
        return f"{self.draft}_{self.setting.short}"


# The page builds, and a Run reads, these boxes in this order: a new draft's settings appear on
# the page from its registry entry alone (and the draft itself in the Draft menu).
DRAFT_WIDGETS: tuple[DraftWidget, ...] = tuple(
    DraftWidget(name, s) for name, kind in DRAFTS.items() for s in kind.settings if s.label)


def draft_setting_value(value: object, setting: DraftSetting) -> int | float:
    """A box's (or an API parameter's) value for a draft's setting: a number, whole if the
    setting is; its bounds are the draft's own check (its message says them)."""
    what = f"The {setting.label or setting.key}"  # "The lookup n-gram"
    return _whole(value, what) if setting.whole else _number(value, what)


def draft_value(draft: object, **given: object) -> DraftSpec:
    """The draft a Run or an API call asks for, checked: `draft` names it ("lookup"; empty: the
    pair's draft model) or gives its settings too ("lookup:3:16"); the settings it leaves out are
    taken from `given` by keyword ("lookup_ngram": a box's or an API parameter's value), the
    rest at their defaults. Only the chosen draft's settings are read."""
    if draft is None or draft == "":
        return DEFAULT_DRAFT
    name, params = read_draft(str(draft))
    for s in DRAFTS[name].settings:
        keyword = f"{name}_{s.short}"
        if s.key not in params and keyword in given:
            params[s.key] = draft_setting_value(given[keyword], s)
    return make_draft(name, **params)


def widget_draft(draft: object, *values: object) -> DraftSpec:
    """`draft_value` from the Draft menu and the draft settings boxes' values in DRAFT_WIDGETS order."""
    return draft_value(draft, **{w.keyword: value for w, value in zip(DRAFT_WIDGETS, values)})


def temperature_value(value: object, limit: float = 2.0) -> float:
    """The temperature box as a float: 0 (or empty) is greedy."""
    if value is None or value == "":
        return 0.0
    temperature = _number(value, "The temperature")
    if not 0.0 <= temperature <= limit:
        raise SpecVizError(f"The temperature must be between 0 (greedy) and {limit:g}, got {temperature:g}.")
    return temperature


def seed_value(value: object) -> int | None:
    """The seed box as an int, or None when empty."""
    if value is None or value == "":
        return None
    seed = _whole(value, "The seed")
    if seed < 0:
        raise SpecVizError(f"The seed must be 0 or more, got {seed}.")
    return seed


def max_new_tokens_value(value: object, limit: int) -> int:
    """The slider's value as an int, checked against the server's limit."""
    tokens = _whole(value, "Max new tokens")
    if not 1 <= tokens <= limit:
        raise SpecVizError(f"Max new tokens must be between 1 and {limit}, got {tokens}.")
    return tokens


# ---- server options ------------------------------------------------------------------------


class ServerOptions(NamedTuple):
    host: str
    port: int
    share: bool


def server_options(argv: Sequence[str] | None = None, env: Mapping[str, str] | None = None) -> ServerOptions:
    """Host, port and share: flags override GRADIO_SERVER_NAME/GRADIO_SERVER_PORT, which override defaults."""
    env = os.environ if env is None else env
    parser = argparse.ArgumentParser(description="SpecViz: speculative decoding lookahead policies side by side.")
    parser.add_argument("--host", help=f"interface to listen on (default $GRADIO_SERVER_NAME or {DEFAULT_HOST})")
    parser.add_argument("--port", type=int, help=f"port (default $GRADIO_SERVER_PORT or {DEFAULT_PORT})")
    parser.add_argument("--share", action="store_true", help="create a public gradio.live link")
    args = parser.parse_args(list(argv) if argv is not None else None)
    host = args.host or env.get("GRADIO_SERVER_NAME") or DEFAULT_HOST
    if args.port is not None:
        port = args.port
    elif env.get("GRADIO_SERVER_PORT"):
        try:
            port = int(env["GRADIO_SERVER_PORT"])
        except ValueError:
            parser.error(f"GRADIO_SERVER_PORT must be a port number, got {env['GRADIO_SERVER_PORT']!r}")
    else:
        port = DEFAULT_PORT
    if not 0 < port < 65536:
        parser.error(f"the port must be between 1 and 65535, got {port}")
    return ServerOptions(host=host, port=port, share=bool(args.share))

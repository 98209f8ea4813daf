"""The app's input widgets turned into checked values, and the server's own options.

Every check raises SpecVizError with a message the page shows as it is.
"""

from __future__ import annotations

import argparse
import math
import os
from collections.abc import Mapping, Sequence
from typing import NamedTuple

from ..core.lookup import LookupSettings
from ..core.policies import MAX_LOOKAHEAD
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


def _lookahead(value: object, what: str) -> int:
    k = _whole(value, what)
    if not 1 <= k <= MAX_LOOKAHEAD:
        raise SpecVizError(f"{what} must be between 1 and {MAX_LOOKAHEAD}, got {k}.")
    return k


def modes_string(static_k: object = 5, heuristic_k: object = 5, threshold: object = 0.4,
                 dynamic_max: object = 20, adaptive: object = None, entropy: object = None,
                 costaware: object = None) -> str:
    """The `parse_modes` string for the columns, e.g. "static:5,heuristic:5,dynamic:0.4:20,oracle".

    `adaptive` (a start threshold), `entropy` (a bound in nats) and `costaware` (its most draft
    tokens a round) add the optional columns when not None: "…,oracle,adaptive:0.4,entropy:1,costaware:20".
    """
    static = _lookahead(static_k, "Static k")
    heuristic = _lookahead(heuristic_k, "Heuristic starting k")
    confidence = _number(threshold, "The dynamic threshold")
    if not 0.0 <= confidence <= 1.0:
        raise SpecVizError(f"The dynamic threshold must be between 0 and 1, got {confidence:g}.")
    most = _lookahead(dynamic_max, "Dynamic max tokens")
    text = f"static:{static},heuristic:{heuristic},dynamic:{confidence:g}:{most},oracle"
    if adaptive is not None:
        start = _number(adaptive, "The adaptive start threshold")
        if not 0.0 <= start <= 1.0:
            raise SpecVizError(f"The adaptive start threshold must be between 0 and 1, got {start:g}.")
        text += f",adaptive:{start:g}"
    if entropy is not None:
        bound = _number(entropy, "The entropy bound")
        if bound < 0:
            raise SpecVizError(f"The entropy bound must be 0 or more (nats), got {bound:g}.")
        text += f",entropy:{bound:g}"
    if costaware is not None:
        text += f",costaware:{_lookahead(costaware, 'Cost-aware max tokens')}"
    return text


def lookup_value(draft: object, ngram: object, tokens: object) -> LookupSettings | None:
    """The lookup draft's settings when the draft chosen is "lookup"; None for the draft model."""
    if draft in (None, "", "model"):
        return None
    if draft != "lookup":
        raise SpecVizError(f'The draft must be "model" or "lookup", got {str(draft)[:40]!r}.')
    return LookupSettings(max_ngram=_whole(ngram, "The lookup n-gram"), max_tokens=_whole(tokens, "Lookup tokens"))


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

"""Every SPECVIZ_ environment variable, read here and nowhere else.

A server's operator sets these (docs/SETUP.md's table says what each does); the code asks
`read(name)` where it needs one, at that moment, so a test or a study that sets a variable sees
it take effect. A name not listed here is a mistake in the code, not a setting.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager

# Each variable, with where its default and meaning live (docs/SETUP.md's table, in this order).
VARIABLES: dict[str, str] = {
    "SPECVIZ_MAX_NEW_TOKENS": "decoding/pipeline.py Limits",
    "SPECVIZ_MAX_PROMPT_TOKENS": "decoding/pipeline.py Limits",
    "SPECVIZ_TIME_BUDGET_S": "decoding/pipeline.py Limits (the CLI: only when set)",
    "SPECVIZ_QUEUE_SIZE": "decoding/pipeline.py Limits",
    "SPECVIZ_MCP": "ui/page.py mcp_enabled",
    "SPECVIZ_ALLOW_HUB_MODELS": "pair/presets.py get_preset",
    "SPECVIZ_DEFAULT_PRESET": "pair/presets.py default_preset",
    "SPECVIZ_PRELOAD": "ui/server_state.py preloading",
    "SPECVIZ_CACHE": "pair/weights.py cache_root",
    "SPECVIZ_WHEELS_FROM": "pair/setup_job.py wheels_source",
    "SPECVIZ_SET_UP_AT_START": "ui/server_state.py setting_up_at_start",
    "SPECVIZ_TARGET_SETUP": "pair/setups/__init__.py asked (a name in SETUPS, or auto)",
    "SPECVIZ_DRAFT_SETUP": "pair/setups/__init__.py asked (a name in SETUPS, or auto)",
    "SPECVIZ_DRAFT_VOCAB": "pair/vocab.py asked (full, or a number of tokens)",
}


def read(name: str, environ: Mapping[str, str] | None = None) -> str:
    """The variable's value, stripped ("" where unset: the reader then uses its default)."""
    if name not in VARIABLES:
        raise KeyError(f"{name} is not a SpecViz setting (specviz/settings.py lists them)")
    return (os.environ if environ is None else environ).get(name, "").strip()


@contextmanager
def overriding(values: Mapping[str, str]) -> Iterator[None]:
    """These variables set for the length of a `with` block (the pass-cost study loads one pair per
    CPU set-up this way), then put back as they were."""
    for name in values:
        read(name)
    saved = {name: os.environ.get(name) for name in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value

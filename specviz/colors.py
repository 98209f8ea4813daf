"""One colour per policy, the same in every view: the page's charts, the downloads and the
benchmark plots. Each policy's colour is in its registry entry (decoding/modes.py, `POLICIES`).
"""

from __future__ import annotations

from .decoding.modes import POLICIES

POLICY_COLORS: dict[str, str] = {name: kind.color for name, kind in POLICIES.items()}
_FALLBACK_COLORS = ["#8C564B", "#7F7F7F", "#17BECF", "#BCBD22"]  # for policies not listed above


def policy_color(policy: str, index: int = 0) -> str:
    """The colour for a policy name; unknown names get a fallback picked by their index."""
    return POLICY_COLORS.get(policy, _FALLBACK_COLORS[index % len(_FALLBACK_COLORS)])

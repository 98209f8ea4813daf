"""One colour per policy, the same in every view: the page's charts, the downloads and the
benchmark plots.

From the Okabe-Ito palette, which stays distinguishable with the common forms of colour
blindness.
"""

from __future__ import annotations

# Okabe-Ito colours. Yellow (#F0E442) is left out: it is unreadable on a white background.
POLICY_COLORS: dict[str, str] = {
    "static": "#0072B2",  # blue
    "heuristic": "#E69F00",  # orange
    "dynamic": "#009E73",  # bluish green
    "oracle": "#CC79A7",  # reddish purple
    "adaptive": "#D55E00",  # vermillion
    "entropy": "#56B4E9",  # sky blue
    "costaware": "#000000",  # black
}
_FALLBACK_COLORS = ["#8C564B", "#7F7F7F", "#17BECF", "#BCBD22"]  # for policies not listed above


def policy_color(policy: str, index: int = 0) -> str:
    """The colour for a policy name; unknown names get a fallback picked by their index."""
    return POLICY_COLORS.get(policy, _FALLBACK_COLORS[index % len(_FALLBACK_COLORS)])

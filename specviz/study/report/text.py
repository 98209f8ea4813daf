"""How the report writes a figure: speedups, ratios, shares, milliseconds, counts and durations,
"n/a" where there is none."""

from __future__ import annotations


def _x(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2f}x"


def _f(value: float | None, digits: int = 2) -> str:
    return "n/a" if value is None else f"{value:.{digits}f}"


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.0%}"


def _ms(value: float | None) -> str:
    return "n/a" if value is None else f"{value * 1000:.1f} ms"


def _change(ours: int, base: int) -> str:
    return f"{(ours - base) / base:+.0%}" if base else "n/a"


def _n(count: int, noun: str) -> str:
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"


def duration(seconds: float) -> str:
    """"1 h 04 min" or "3 min 07 s"."""
    minutes, secs = divmod(round(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes:02d} min" if hours else f"{minutes} min {secs:02d} s"

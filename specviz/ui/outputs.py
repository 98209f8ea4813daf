"""The outputs of the page's events by name, each event's listed once.

Gradio takes a handler's answer as a tuple in the order of its event's outputs; a tuple counted
by hand (`(skip,) * (14 + len(EXTRA_COLUMNS))`) goes wrong silently when an output is added
(Gradio only logs a warning, and a chart stays unfilled). So each event's outputs are named here
once: page.py wires the event to the components of those names (`components`), and its handler
builds its answer from names and values (`answer`), gr.skip() (leave it as it is) for every name
left out. A name is the page's attribute for its component (`p.status`); a group is one name for
a run of components of a kind (the policy columns), its value a list in their order. The handlers
still return plain tuples, so a test calls them without a page and reads them back by name
(`read`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import gradio as gr

from .columns import ALL_COLUMNS, EXTRA_COLUMNS


@dataclass(frozen=True)
class Group:
    """`size` outputs of a kind under one name, in order (the policy columns)."""

    name: str
    size: int


class Outputs:
    """One event's outputs in the order they are wired: names, and groups."""

    def __init__(self, *entries: str | Group):
        self.entries = entries
        self.names = tuple(e if isinstance(e, str) else e.name for e in entries)
        if len(set(self.names)) != len(self.names):
            raise ValueError(f"an output named twice: {self.names}")

    def __len__(self) -> int:
        return sum(1 if isinstance(e, str) else e.size for e in self.entries)

    def answer(self, **values: Any) -> tuple:
        """The handler's answer: each value in its output's place (a group's as a list of its
        size), gr.skip() for each name not given. A value of None is sent as None (it clears a
        chart or a state)."""
        unknown = set(values) - set(self.names)
        if unknown:
            raise TypeError(f"not an output of this event: {sorted(unknown)}")
        answer = []
        for entry in self.entries:
            if isinstance(entry, str):
                answer.append(values.get(entry, gr.skip()))
            elif entry.name not in values:
                answer.extend(gr.skip() for _ in range(entry.size))
            else:
                answer.extend(self._group(entry, values[entry.name]))
        return tuple(answer)

    def read(self, answer: Sequence) -> dict[str, Any]:
        """An answer by name (a group's values as a list): what a test checks."""
        if len(answer) != len(self):
            raise ValueError(f"{len(answer)} values for {len(self)} outputs")
        values = iter(answer)
        read: dict[str, Any] = {}
        for entry in self.entries:
            if isinstance(entry, str):
                read[entry] = next(values)
            else:
                read[entry.name] = [next(values) for _ in range(entry.size)]
        return read

    def components(self, page: object) -> list:
        """The page's components for these outputs, in order: its attribute of each name (a list
        for a group)."""
        components = []
        for entry in self.entries:
            if isinstance(entry, str):
                components.append(getattr(page, entry))
            else:
                components.extend(self._group(entry, getattr(page, entry.name)))
        return components

    @staticmethod
    def _group(group: Group, items: Sequence) -> list:
        items = list(items)
        if len(items) != group.size:
            raise ValueError(f"{group.name}: {len(items)} values for {group.size} outputs")
        return items


COLUMNS = Group("columns", len(ALL_COLUMNS))  # the policy columns' HTML, in ALL_COLUMNS order

# What puts a comparison on the page: Run (streamed), an imported file.
COMPARISON_OUTPUTS = Outputs("status", COLUMNS, "lookahead_plot", "progress_plot", "summary", "last", "eos_state")
# An example button: its prompt, pair and draft into the settings, then the same as a comparison.
EXAMPLE_OUTPUTS = Outputs("prompt", "preset", "draft", *COMPARISON_OUTPUTS.entries)
# Stop: the status line and the columns.
STOP_OUTPUTS = Outputs("status", COLUMNS)
# The views of a comparison on the page (events.views), then the extra columns' boxes shown or hidden.
VIEW_OUTPUTS = Outputs("sweep_plot", "sweep_table", "sweep_note", "draft_cost", "calibration_plot", "positions_plot",
                       "work_plot", "pass_cost_plot", "rule_round", "rule_plot", "threshold_plot", "replay_policy",
                       "replay_round", "replay_panel", Group("extra_boxes", len(EXTRA_COLUMNS)))

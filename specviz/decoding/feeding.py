"""The feeding protocol: how the draft model reads the committed tokens, written once.

The engine's draft (drafters.ModelDrafter) reads them so that its guess at an answer position is a
function of the text before it alone:

- the prompt but its last token, in one call, the first time the draft runs (`prefill_calls`);
- at a round's start, the committed tokens its cache lacks: the round's backlog (`Feeding.backlog`),
  in calls of at most `rows_per_call` tokens: CATCH_UP_ROWS for a row-exact draft, one otherwise
  (`catch_up_calls`, `calls`); the last call gives the first draft token's logits;
- then a call per further draft token. After a round that drafted, the draft has read the answer up
  to the round's start plus its accepted tokens, but never its own last draft token
  (`fed_after`).

The drafter, the what-if replay (explain/sweep.py), the cost-aware rule's prices
(policies.CostAware, PassCosts.catch_up) and the live pass costs (costcurve.py) all count the
draft's calls with these functions. Pure: no torch.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TypeVar

from ..pair.rows import CATCH_UP_ROWS

T = TypeVar("T")

__all__ = ["CATCH_UP_ROWS", "Feeding", "calls", "catch_up_calls", "fed_after", "full_calls", "prefill_calls",
           "rows_per_call"]


def rows_per_call(row_exact: bool) -> int:
    """The most committed tokens one catch-up call reads: CATCH_UP_ROWS for a draft whose rows are
    bitwise the same in such a call as alone (`row_exact`), else one."""
    return CATCH_UP_ROWS if row_exact else 1


def prefill_calls(prompt_tokens: int) -> int:
    """The draft's calls over the prompt (but its last token) before its first round: one, unless
    the prompt is a single token."""
    return 1 if prompt_tokens > 1 else 0


def catch_up_calls(backlog: int, per_call: int) -> int:
    """The calls that read a backlog of `backlog` committed tokens, at most `per_call` a call."""
    return -(-backlog // per_call)


def full_calls(backlog: int, per_call: int) -> tuple[int, int]:
    """A backlog's catch-up as (calls of `per_call` tokens, the tokens of the last, shorter call; 0: none)."""
    return divmod(backlog, per_call)


def calls(tokens: Sequence[T], per_call: int) -> list[Sequence[T]]:
    """`tokens` (a round's backlog) in the calls that read them, in order: `per_call` tokens each
    but the last, which holds the rest (and gives the first draft token's logits)."""
    out = []
    while len(tokens) > per_call:
        out.append(tokens[:per_call])
        tokens = tokens[per_call:]
    return [*out, tokens]


def fed_after(position: int, drafted: int, accepted: int) -> int:
    """The last answer position the draft has read after a round that started at `position` and
    drafted `drafted` tokens (at least one), `accepted` of them kept: its own last draft token is
    never read, and neither is anything after its first rejected one."""
    return position + min(accepted, drafted - 1)


@dataclass
class Feeding:
    """How far the draft has read along the answer, as drafters.ModelDrafter fills its cache: the
    answer up to position `fed` (-1: the prompt but its last token)."""

    fed: int = -1

    def backlog(self, position: int) -> int:
        """The committed tokens a round starting at `position` reads first (its first call's
        tokens when the draft reads them in one)."""
        return position - self.fed

    def after_round(self, position: int, drafted: int, accepted: int) -> None:
        """What the draft has read once a round at `position` is over (a round that drafted
        nothing reads nothing: its backlog grows)."""
        if drafted:
            self.fed = fed_after(position, drafted, accepted)

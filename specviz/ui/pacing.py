"""When a streaming view sends its next frame: often enough to follow a run, seldom enough to
keep the page responsive, and on a frame worth seeing.

The engine reports far more often than a page can redraw (a round takes 0.1-0.3 s, half of it
the draft step), so the app sends a column update about every `every_s`. Which of the engine's
frames it sends matters for teaching: a frame taken just after a draft step shows the round's
tokens as *pending*, and the next update shows them judged. So once `every_s` has passed the
pacer waits for such a frame (up to `every_s` more), and a policy's first judged round goes out
at once, so the first coloured token is not held back.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass
class Pacer:
    every_s: float
    last_s: float = -math.inf

    def due(self, now_s: float, *, pending: bool = False, must: bool = False) -> bool:
        """Whether to send the frame at hand (and if so, count it as sent at `now_s`).
        `pending`: the frame shows a drafted round awaiting its verdict; `must`: send it anyway."""
        waited = now_s - self.last_s
        if must or waited >= 2 * self.every_s or (pending and waited >= self.every_s):
            self.last_s = now_s
            return True
        return False

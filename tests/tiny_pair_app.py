"""`python tests/tiny_pair_app.py --port N`: the app as app.py starts it, with the real pair's preset
pointed at tiny files (tests/tiny_gguf.py) described in the JSON file $TINY_PAIR_SPEC, so that a
browser test can set the real pair up from the page against small wheel parts in a local folder
(SPECVIZ_WHEELS_FROM) and then run it. Each stage of the set-up is held for a second once reported, so
that a polling page sees every one (the tiny set-up would otherwise be over between two polls).

The JSON: {"requirements": path, "target": JoinedFile fields, "draft": JoinedFile fields}.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

# Run as a script from the repository, Python puts tests/ first on the path, not the repository.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from specviz.pair import presets, setup_job, weights
from specviz.pair.wheel_parts import JoinedFile

STAGE_HOLD_S = 1.0


def point_the_real_pair_at_tiny_files(spec: dict) -> None:
    preset = presets.PRESETS[presets.REAL_PAIR_PRESET]
    for hub_id, role in ((preset.target, "target"), (preset.draft, "draft")):
        name = f"tiny-{role}-fp32"
        weights.SET_UP_MODELS[hub_id] = weights.SetUpModel(hub_id, name, JoinedFile(**spec[role]), name)
    weights.REAL_PAIR_REQUIREMENTS = Path(spec["requirements"])


def hold_each_stage() -> None:
    report = setup_job.SetUpJob._report
    last: dict[str, str] = {}

    def held(self, preset: str, stage: str, done: int, total: int) -> None:
        report(self, preset, stage, done, total)
        if last.get(preset) != stage:  # the new stage is on record: let a poll or two see it
            last[preset] = stage
            time.sleep(STAGE_HOLD_S)

    setup_job.SetUpJob._report = held


if __name__ == "__main__":
    point_the_real_pair_at_tiny_files(json.loads(Path(os.environ["TINY_PAIR_SPEC"]).read_text(encoding="utf-8")))
    hold_each_stage()
    from specviz.ui.page import build_demo, launch

    launch(build_demo(), sys.argv[1:])

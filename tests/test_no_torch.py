"""The study's report and the page's explainers load no model library: a report is rebuilt from
`results.jsonl` and a what-if replayed from a saved comparison on a machine without torch
(docs/DESIGN.md, Layout). Each check imports in a fresh interpreter, since this one has torch
loaded already."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
HEAVY = ("torch", "transformers", "gradio")


def loaded_after(modules: tuple[str, ...]) -> set[str]:
    """The heavy libraries in sys.modules once `modules` are imported, in a fresh interpreter."""
    code = "\n".join([
        "import importlib, sys",
        *(f"importlib.import_module({name!r})" for name in modules),
        f"print(','.join(sorted(m for m in {HEAVY!r} if m in sys.modules)))",
    ])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    done = subprocess.run([sys.executable, "-c", code], check=False, cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    printed = done.stdout.splitlines()
    return set(filter(None, printed[-1].split(","))) if printed else set()


@pytest.mark.parametrize("modules", [
    ("specviz.study.report",),  # the report, with its records, the cost model and the hindsight replays
    ("specviz.explain.sweep",),  # the what-if replay
    ("specviz.explain", "specviz.explain.analysis", "specviz.explain.costs", "specviz.explain.hindsight",
     "specviz.decoding.feeding"),  # every explainer, and the feeding protocol they count with
    ("specviz.pair.vocab",),  # which rows a smaller draft output layer keeps, and their coverage of an answer
], ids=["report", "what-if", "explainers", "draft-vocabulary"])
def test_imports_no_torch(modules):
    assert loaded_after(modules) == set()


@pytest.mark.slow
def test_the_check_sees_torch():
    """The same check flags a module that does load torch (the pair's CPU set-up)."""
    pytest.importorskip("torch")
    assert "torch" in loaded_after(("specviz.pair.cpu",))

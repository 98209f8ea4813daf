"""scripts/whatif_costaware.py on the bundled pairs' kept study comparisons: its replay of the rule as
shipped gives the passes the rule's real runs made (issue 29: the what-if reproduces the rule's
target and draft passes exactly on the bundled pairs' study prompts), and its count of plain rounds
is the cost model's, so the variants' modeled times compare with the reports'. No models run."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from specviz.decoding.policies import CostAware
from specviz.study.costs import plain_passes

ROOT = Path(__file__).resolve().parents[1]


def _script():
    spec = importlib.util.spec_from_file_location("whatif_costaware", ROOT / "scripts" / "whatif_costaware.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def test_the_shipped_rule_replays_to_its_recorded_passes_on_the_bundled_pairs():
    whatif = _script()
    suites = [s for s in whatif.load(ROOT / "docs") if s.study.startswith("study-bundled")]
    assert {s.preset for s in suites} == {"smollm2-135m-int8", "smollm2-135m-bf16"}
    prompts = 0
    for suite in suites:
        for prompt in suite.prompts:
            counted = whatif.PlainCounter(CostAware(prompt.prices, 20))
            c = prompt.comparison
            passes = whatif.replay_passes(counted, c.reference_ids(), c.draft_along_reference, c.max_new_tokens,
                                          prompt.eos_ids, prompt.seen, c.prompt_tokens)
            recorded = next(t for t in c.traces if t.policy == "costaware")
            assert passes == prompt.recorded_passes, (suite.study, suite.preset, prompt.record.prompt_id)
            assert counted.plain == plain_passes([r.lookahead for r in recorded.rounds])
            prompts += 1
    assert prompts >= 90  # two studies, two pairs, three suites of 8 prompts: every kept one


def test_a_variant_name_it_does_not_know_is_refused(capsys, monkeypatch):
    whatif = _script()
    monkeypatch.setattr("sys.argv", ["whatif_costaware.py", "no-such-variant"])
    with pytest.raises(SystemExit) as stop:
        whatif.main()
    assert stop.value.code == 2
    assert "unknown variant 'no-such-variant'" in capsys.readouterr().err

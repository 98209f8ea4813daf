"""The cost-aware rule's variants (study/variants.py, `python -m specviz costaware-variants`) on the
bundled pairs' kept study comparisons (the runs results/index.json lists for it): its replay of the rule as
shipped gives the passes the rule's real runs made (issue 29: the what-if reproduces the rule's
target and draft passes exactly on the bundled pairs' study prompts), and its count of plain rounds
is the cost model's, so the variants' modeled times compare with the reports'. No models run."""

from __future__ import annotations

from specviz.decoding.policies import CostAware
from specviz.explain.costs import plain_passes
from specviz.study import variants as whatif
from specviz.study.folders import parse_run

BUNDLED = {"smollm2-135m-int8", "smollm2-135m-bf16"}


def test_the_shipped_rule_replays_to_its_recorded_passes_on_the_bundled_pairs():
    suites = [s for s in whatif.load() if set(parse_run(s.study).presets) <= BUNDLED]
    assert {s.preset for s in suites} == BUNDLED
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


def test_a_variant_name_it_does_not_know_is_refused(capsys):
    from specviz.cli import main

    assert main(["costaware-variants", "no-such-variant"]) == 2
    assert "unknown variant 'no-such-variant'" in capsys.readouterr().err

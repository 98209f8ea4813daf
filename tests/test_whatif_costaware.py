"""The cost-aware rule's variants (study/variants.py, `python -m specviz costaware-variants`) on the
bundled pairs' kept study comparisons (the runs results/index.json lists for it): its replay of the rule a
run was made with gives the passes that run's cost-aware column made (issue 29: the what-if reproduces
the rule's target and draft passes exactly on the bundled pairs' study prompts), and its count of
plain rounds is the cost model's, so the variants' modeled times compare with the reports'. The runs
before 2026-12-07 were made with the first-token start test (issue 60 replaced it; its variant
`first-token` keeps it), the later ones with the rule as shipped. No models run."""

from __future__ import annotations

import pytest

from specviz.decoding.policies import CostAware
from specviz.explain.costs import plain_passes
from specviz.study import variants as whatif
from specviz.study.folders import parse_run

BUNDLED = {"smollm2-135m-int8", "smollm2-135m-bf16"}


SHIPPED_SINCE = "2026-12-07"  # the day the round's start test replaced the first token's (issue 60)


@pytest.mark.slow
def test_the_rule_each_run_was_made_with_replays_to_its_recorded_passes_on_the_bundled_pairs():
    suites = [s for s in whatif.load() if set(parse_run(s.study).presets) <= BUNDLED]
    assert {s.preset for s in suites} == BUNDLED
    assert {parse_run(s.study).date >= SHIPPED_SINCE for s in suites} == {False, True}  # both rules checked
    prompts = 0
    for suite in suites:
        rule = CostAware if parse_run(suite.study).date >= SHIPPED_SINCE else whatif.FirstToken
        for prompt in suite.prompts:
            counted = whatif.PlainCounter(rule(prompt.prices, 20))
            c = prompt.comparison
            passes = whatif.replay_passes(counted, c.reference_ids(), c.draft_along_reference, c.max_new_tokens,
                                          prompt.eos_ids, prompt.seen, c.prompt_tokens, c.draft_row_exact)
            recorded = next(t for t in c.traces if t.policy == "costaware")
            assert passes == prompt.recorded_passes, (suite.study, suite.preset, prompt.record.prompt_id)
            assert counted.plain == plain_passes([r.lookahead for r in recorded.rounds])
            prompts += 1
    assert prompts >= 120  # two studies of two pairs, three suites of 8 prompts, and one of int8, four of 6


def test_a_variant_name_it_does_not_know_is_refused(capsys):
    from specviz.cli import main

    assert main(["costaware-variants", "no-such-variant"]) == 2
    assert "unknown variant 'no-such-variant'" in capsys.readouterr().err

"""The real pair offline (Qwen2.5-Coder-1.5B-Instruct, draft Qwen2.5-Coder-0.5B-Instruct, in the set-up
pair/setups/ chooses for this CPU), when it is set up in the model cache: short prompts through every
policy, with the model draft and with the lookup draft (on prompts whose answer copies the prompt).
Skipped, naming the command that installs it, where it is not set up (it needs a 1.6 GB download and
up to 11 GB of RAM while it loads)."""

import pytest

from specviz.decoding.drafts import DEFAULT_DRAFT, DraftSpec
from specviz.decoding.pipeline import compare, make_request
from specviz.pair import cpu, kquant, models, presets, weights
from specviz.pair.wheel_parts import SETUP_COMMAND

pytestmark = pytest.mark.slow

# Quantized models turn ulp-level differences into other guesses: the invariants on a few prompts.
PROMPTS = ["Write a Python function that returns the n-th Fibonacci number.",
           "Explain in two sentences what a Python dictionary comprehension is.",
           "Write a SQL query that lists the ten customers with the largest total order amount."]
COPYING_PROMPTS = [("Rename the variable `n` to `count` and return the whole function:\n\n"
                    "def repeat(word, n):\n    out = []\n    for _ in range(n):\n        out.append(word)\n"
                    "    return ' '.join(out)\n"),
                   ("Add a docstring to this function and return it unchanged otherwise:\n\n"
                    "def area(width, height):\n    if width < 0 or height < 0:\n        raise ValueError('negative')\n"
                    "    return width * height\n")]
CASES = ([(prompt, DEFAULT_DRAFT) for prompt in PROMPTS]
         + [(prompt, DraftSpec.of("lookup")) for prompt in COPYING_PROMPTS])
MODES = "static:5,heuristic:5,dynamic:0.4,oracle"
MAX_NEW_TOKENS = 32


@pytest.fixture(scope="module", params=CASES,
                ids=[f"prompt{i}" for i in range(len(PROMPTS))] + [f"lookup{i}" for i in range(len(COPYING_PROMPTS))])
def comparison(request):
    preset = presets.PRESETS[presets.REAL_PAIR_PRESET]
    missing = [weights.set_up_folder(weights.SET_UP_MODELS[hub_id]) for hub_id in (preset.target, preset.draft)
               if not (weights.set_up_folder(weights.SET_UP_MODELS[hub_id]) / "config.json").is_file()]
    if missing:
        pytest.skip(f"the real pair is not set up ({', '.join(str(m) for m in missing)} missing): "
                    f"install it with `{SETUP_COMMAND}`")
    pair = models.get_pair(presets.REAL_PAIR_PRESET)
    assert pair.vocab_size == 151936
    assert pair.setup.startswith("target ") and "; draft " in pair.setup  # the model line says what runs
    if kquant.cpu_can(cpu.machine().flags):  # where the CPU can, this is the K-quant target under test
        assert pair.setup.startswith("target Q4_K/Q6_K weights of its GGUF"), pair.setup
    prompt, draft = request.param
    return compare(pair, make_request(prompt, MODES, MAX_NEW_TOKENS, draft=draft))


def test_every_policy_is_lossless(comparison):
    assert comparison.baseline is not None and 0 < len(comparison.baseline.token_ids) <= MAX_NEW_TOKENS
    assert [t.label for t in comparison.traces] == ["static k=5", "heuristic k0=5", "dynamic t=0.4", "oracle"]
    for trace in comparison.traces:
        assert trace.lossless, (trace.label, trace.first_difference)


def test_the_oracle_needs_the_fewest_target_passes(comparison):
    oracle = comparison.trace("oracle")
    for trace in comparison.traces:
        assert oracle.target_passes <= trace.target_passes, trace.label


def test_every_round_meets_the_ideal_line(comparison):
    for trace in comparison.traces:
        for r in trace.rounds:
            assert r.accepted == min(r.lookahead, comparison.oracle_ideal[r.position]), (trace.label, r)


def test_a_lookup_draft_costs_no_draft_pass_and_its_copies_are_kept(comparison):
    if comparison.draft == DEFAULT_DRAFT:
        pytest.skip("a model-draft case")
    assert all(trace.draft_passes == 0 for trace in comparison.traces)
    assert sum(r.accepted for r in comparison.trace("oracle").rounds) > 0  # the answer copies the prompt

"""The target's and draft's set-up for the CPU (pair/cpu.py, pair/setups/) on tiny models built here: the choice per
capability, row-exact attention, the bf16 set-up lossless and close to fp32, and the cost curve."""

from __future__ import annotations

import copy

import pytest
import torch
from conftest import noisy_copy, tiny_llama

from specviz.decoding.costcurve import TIMED_ENOUGH, LivePassCosts, PassCostCurve, measure, table
from specviz.decoding.engine import decode_target_only, generate, target_only
from specviz.decoding.policies import Dynamic, Heuristic, PassCosts, Static
from specviz.decoding.trace import Baseline, Round, Trace
from specviz.pair import cpu, forward, setups
from specviz.pair.models import build_pair
from specviz.pair.setups import bf16, fp32, int4, packing

needs_bf16 = pytest.mark.skipif(not cpu.machine().native_bf16, reason="this CPU has no native bf16")

WITH_BF16 = cpu.Machine("a CPU with AMX", True, frozenset({"amx_bf16", "avx512f"}))
WITHOUT_BF16 = cpu.Machine("a CPU without bf16", False, frozenset({"avx2"}))


def wide_llama(seed: int):
    """A tiny Llama with grouped-query attention (4 query heads share 2 key/value heads), as the
    real pair's models have, and widths a oneDNN kernel blocks on."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    config = LlamaConfig(vocab_size=64, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                         tie_word_embeddings=False, bos_token_id=None, eos_token_id=None, pad_token_id=None)
    model = LlamaForCausalLM(config).eval()
    with torch.no_grad():
        model.lm_head.weight.mul_(4.0)
    model.generation_config.eos_token_id = None
    return model


def logits(model, ids: list[int]) -> torch.Tensor:
    with torch.inference_mode():
        return model(input_ids=torch.tensor([ids])).logits[0].float()


def accepted_losslessly(pair, same_answer_as=None) -> int:
    """Greedy speculation on 12 random prompts with three policies, each answer checked against
    target-only decoding's (and that against `same_answer_as`'s, where given); the draft tokens
    accepted in all."""
    accepted = 0
    for seed in range(12):
        prompt = torch.randint(0, 64, (6 + seed,), generator=torch.Generator().manual_seed(seed)).tolist()
        baseline = target_only(pair, prompt, 24).token_ids
        if same_answer_as is not None:
            assert baseline == target_only(same_answer_as, prompt, 24).token_ids, seed
        for policy in (Static(5), Heuristic(3), Dynamic(0.3, 12)):
            trace = generate(pair, prompt, policy, 24)
            assert trace.token_ids == baseline, (seed, policy.label)
            accepted += trace.accepted
    return accepted


# ---- the choice, per capability ------------------------------------------------------------


def test_the_target_is_bf16_only_where_the_cpu_has_native_bf16_and_it_is_row_exact(monkeypatch):
    model = tiny_llama(0)
    monkeypatch.setattr(packing, "exact_row_sizes", lambda m, dtype=torch.bfloat16: (16,))
    # timings on a tiny model, which a busy machine can tip either way: the next tests cover them
    monkeypatch.setattr(fp32, "window_products_pay", lambda m: False)
    monkeypatch.setattr(packing, "fp32_packing_pays", lambda m: False)
    assert setups.choose_target(model, {}, WITH_BF16) == cpu.Choice("bf16", "native bf16, row-exact", (16,))
    assert setups.choose_target(model, {}, WITHOUT_BF16).setup == "fp32"
    assert setups.choose_target(model, {cpu.TARGET_SETUP_ENV: "bf16"}, WITHOUT_BF16).why == "no native bf16 on this CPU"
    forced = setups.choose_target(model, {cpu.TARGET_SETUP_ENV: " FP32 "}, WITH_BF16)
    assert forced.why == f"{cpu.TARGET_SETUP_ENV}=fp32"
    assert setups.choose_target(model, {cpu.TARGET_SETUP_ENV: "bf16-fast"}, WITH_BF16).sizes is None
    monkeypatch.setattr(packing, "exact_row_sizes", lambda m, dtype=torch.bfloat16: None)
    choice = setups.choose_target(model, {}, WITH_BF16)
    assert (choice.setup, choice.why) == ("fp32", "bf16 was not row-exact on this CPU")


def test_without_native_bf16_the_target_computes_windows_weight_first_where_that_measures_faster(monkeypatch):
    model = tiny_llama(0)
    monkeypatch.setattr(packing, "fp32_packing_pays", lambda m: False)  # the next test covers it
    monkeypatch.setattr(fp32, "window_products_pay", lambda m: True)
    assert setups.choose_target(model, {}, WITHOUT_BF16).setup == "fp32-window"
    assert setups.choose_target(model, {cpu.TARGET_SETUP_ENV: "fp32"}, WITHOUT_BF16).setup == "fp32"  # forced
    monkeypatch.setattr(fp32, "window_products_pay", lambda m: False)
    assert setups.choose_target(model, {}, WITHOUT_BF16) == cpu.Choice("fp32", "no native bf16 on this CPU")
    assert setups.choose_target(model, {cpu.TARGET_SETUP_ENV: "fp32-window"}, WITH_BF16).setup == "fp32-window"
    assert isinstance(fp32.window_products_pay(wide_llama(0)), bool)  # the measurement itself runs


def test_without_native_bf16_the_target_is_fp32_packed_where_that_is_row_exact_and_faster(monkeypatch):
    """Also the bundled pairs' fp32 target (`choose_fp32_target`), on any CPU."""
    model = tiny_llama(0)
    monkeypatch.setattr(packing, "fp32_packing_pays", lambda m: True)
    monkeypatch.setattr(packing, "exact_row_sizes",
                        lambda m, dtype=torch.bfloat16: () if dtype == torch.float32 else None)
    assert setups.choose_target(model, {}, WITHOUT_BF16) == cpu.Choice(
        "fp32-packed", "no native bf16 on this CPU; packed fp32 row-exact, measured faster", ())
    # bf16 asked for where the CPU lacks it: the same set-up, which says why bf16 was not taken
    assert setups.choose_target(model, {cpu.TARGET_SETUP_ENV: "bf16"}, WITHOUT_BF16) == cpu.Choice(
        "fp32-packed", "no native bf16 on this CPU; packed fp32 row-exact, measured faster", ())
    assert setups.choose_fp32_target(model, {}) == cpu.Choice(
        "fp32-packed", "packed fp32 row-exact, measured faster", ())
    assert setups.choose_fp32_target(model, {cpu.TARGET_SETUP_ENV: "fp32"}).setup == "fp32"  # forced
    assert setups.choose_target(model, {cpu.TARGET_SETUP_ENV: "fp32-packed"}, WITH_BF16).setup == "fp32-packed"
    monkeypatch.setattr(packing, "fp32_packing_pays", lambda m: False)
    assert setups.choose_fp32_target(model, {}).setup == "fp32"
    assert setups.choose_fp32_target(model, {cpu.TARGET_SETUP_ENV: "fp32-packed"}).setup == "fp32-packed"  # forced
    monkeypatch.setattr(packing, "exact_row_sizes", lambda m, dtype=torch.bfloat16: None)
    assert setups.choose_fp32_target(model, {cpu.TARGET_SETUP_ENV: "fp32-packed"}).setup == "fp32"  # never inexact
    assert isinstance(packing.fp32_packing_pays(wide_llama(0)), bool)  # the measurement itself runs


@pytest.mark.slow
def test_the_fp32_packed_set_up_is_row_exact_where_chosen_and_computes_what_fp32_computes():
    model = wide_llama(0)
    ids = torch.randint(0, 64, (40,), generator=torch.Generator().manual_seed(2)).tolist()
    expected = [logits(model, ids[:n]) for n in (1, 8, 40)]
    sizes = packing.exact_row_sizes(model, torch.float32)
    if sizes is None:
        pytest.skip("oneDNN's packed fp32 product is not row-exact on this CPU: the set-up is never chosen here")
    assert "oneDNN-packed" in setups.prepare_target(model, "fp32-packed", sizes)
    assert isinstance(model.lm_head, packing.PackedLinear) and model.lm_head.dtype == torch.float32
    for n, want in zip((1, 8, 40), expected):
        assert torch.allclose(logits(model, ids[:n]), want, atol=1e-4), n
    assert forward.rows_exact(model, window=8) and forward.rows_exact(model, window=20)


@pytest.mark.slow
def test_greedy_speculation_is_lossless_on_the_fp32_packed_set_up_over_many_prompts():
    target = wide_llama(3)
    draft = noisy_copy(target, 0.3, seed=4)
    sizes = packing.exact_row_sizes(target, torch.float32)
    if sizes is None:
        pytest.skip("oneDNN's packed fp32 product is not row-exact on this CPU: the set-up is never chosen here")
    setups.prepare_target(target, "fp32-packed", sizes)
    pair = build_pair("tiny-fp32-packed", target, draft, tokenizer=None, device=torch.device("cpu"))
    assert accepted_losslessly(pair) > 0


def test_without_native_bf16_the_draft_is_cast_to_bf16_where_one_row_measures_faster(monkeypatch):
    draft = tiny_llama(1)
    monkeypatch.setattr(int4, "int4_one_row_pays", lambda model, native_bf16: False)  # its own test below
    monkeypatch.setattr(bf16, "bf16_one_row_pays", lambda m: True)
    assert setups.choose_draft({}, WITHOUT_BF16, draft).setup == "bf16-cast"
    assert setups.choose_draft({}, WITHOUT_BF16).setup == "fp32"  # nothing to measure on
    assert setups.choose_draft({cpu.DRAFT_SETUP_ENV: "fp32-window"}, WITHOUT_BF16, draft).setup == "fp32"
    monkeypatch.setattr(bf16, "bf16_one_row_pays", lambda m: False)
    assert setups.choose_draft({}, WITHOUT_BF16, draft).setup == "fp32"
    assert setups.choose_draft({cpu.DRAFT_SETUP_ENV: "bf16"}, WITHOUT_BF16, draft).setup == "bf16-cast"
    ids = torch.randint(0, 8, (12,), generator=torch.Generator().manual_seed(0)).tolist()
    expected = logits(draft, ids)
    assert setups.prepare_draft(draft, "bf16-cast").startswith("draft bf16")
    assert next(draft.parameters()).dtype == torch.bfloat16 and isinstance(draft.lm_head, bf16.CastLinear)
    assert torch.allclose(logits(draft, ids), expected, atol=0.1)  # a prefill (12 rows): fp32 products
    assert torch.allclose(logits(draft, ids[:1]), expected[:1], atol=0.1)  # one row: bf16


def test_the_draft_is_bf16_where_the_cpu_has_native_bf16():
    assert setups.choose_draft({}, WITH_BF16).setup == "bf16"
    assert setups.choose_draft({}, WITHOUT_BF16).setup == "fp32"
    assert setups.choose_draft({cpu.DRAFT_SETUP_ENV: "fp32"}, WITH_BF16).setup == "fp32"
    assert setups.choose_draft({cpu.DRAFT_SETUP_ENV: "auto"}, WITH_BF16).setup == "bf16"  # auto: the draft's turns


def test_a_set_up_not_in_the_registry_is_a_one_line_error_naming_those_that_are(monkeypatch):
    """SPECVIZ_TARGET_SETUP=foo once meant auto, silently: now it is refused where the setting is read."""
    from specviz.errors import SpecVizError

    for env in (cpu.TARGET_SETUP_ENV, cpu.DRAFT_SETUP_ENV):
        monkeypatch.setenv(env, "foo")
        with pytest.raises(SpecVizError) as caught:
            setups.asked(env)
        message = str(caught.value)
        assert "\n" not in message and f"{env}='foo'" in message
        assert "auto" in message and all(name in message for name in setups.SETUPS)
        monkeypatch.setenv(env, " Auto ")
        assert setups.asked(env) == "auto"
        monkeypatch.delenv(env)
        assert setups.asked(env) == "auto"  # unset
    with pytest.raises(SpecVizError, match="is not a CPU set-up"):
        setups.choose_draft({cpu.DRAFT_SETUP_ENV: "nonsense"}, WITH_BF16)  # no longer auto
    with pytest.raises(SpecVizError, match="is not a CPU set-up"):
        setups.choose_fp32_target(None, {cpu.TARGET_SETUP_ENV: "fp16"})  # the bundled pairs' too (no model needed)


def test_the_registry_is_the_one_list_of_set_ups(monkeypatch):
    """Every set-up in SETUPS is accepted by the settings and by pass-costs' --setups (a target's alone,
    a draft's after a slash), describes itself in one line, and has that line in docs/SETUP.md's
    table of set-ups; each model's turns are its own set-ups, fp32 last."""
    from pathlib import Path

    from specviz.study.passcosts import _setups

    setup_md = (Path(__file__).resolve().parents[1] / "docs" / "SETUP.md").read_text(encoding="utf-8")
    rows = {line.split("|")[1].strip(): line for line in setup_md.splitlines() if line.startswith("| `")}
    for name, setup in setups.SETUPS.items():
        assert setup.name == name and setup.models and setup.models <= {cpu.TARGET, cpu.DRAFT}
        line = setup.describe()
        assert line.startswith(f"{name} (") and "\n" not in line and setup.summary in line
        row = rows[f"`{name}`"]
        assert setup.summary in row and all(model in row for model in setup.models), name
        for env in (cpu.TARGET_SETUP_ENV, cpu.DRAFT_SETUP_ENV):
            monkeypatch.setenv(env, name.upper())
            assert setups.asked(env) == name
        if cpu.TARGET in setup.models:
            assert _setups(name, "qwen2.5-coder-1.5b") == [name]
        if cpu.DRAFT in setup.models:
            assert _setups(f"fp32/{name}", "qwen2.5-coder-1.5b") == [f"fp32/{name}"]
    assert setups.names(cpu.TARGET) == ["fp32", "fp32-packed", "fp32-window", "bf16", "bf16-fast", "kquant"]
    assert setups.names(cpu.DRAFT) == ["fp32", "bf16", "bf16-cast", "int4", "kquant"]
    for role, turns in ((cpu.TARGET, setups.TARGET_TURNS), (cpu.DRAFT, setups.DRAFT_TURNS)):
        assert all(role in setups.SETUPS[name].models for name in turns) and turns[-1] == "fp32"


def test_bf16_needs_amx_or_avx512_bf16_in_the_flags():
    assert not cpu._has_native_bf16(frozenset({"avx2", "avx512f", "fma"}))
    assert cpu.machine().name  # named next to every figure
    assert cpu.machine().describe().startswith(cpu.machine().name)


# ---- row-exact attention -------------------------------------------------------------------


def test_row_attention_computes_what_sdpa_computes():
    model = wide_llama(0)
    ids = torch.randint(0, 64, (30,), generator=torch.Generator().manual_seed(1)).tolist()
    expected = logits(model, ids)
    cpu.use_row_attention(model)
    assert torch.allclose(logits(model, ids), expected, atol=1e-5)


@pytest.mark.slow
@needs_bf16
def test_the_bf16_set_up_gives_a_row_the_same_bits_in_any_window():
    model = wide_llama(0)
    setups.prepare_target(model, "bf16")
    for context, window in [(5, 2), (40, 8), (100, 20)]:
        assert forward.rows_exact(model, context=context, window=window), (context, window)
    assert packing.exact_row_sizes(wide_llama(1)) == cpu.ROW_SIZES  # the probe: one layer of the same widths


@needs_bf16
def test_a_packed_product_runs_on_a_fixed_row_count_whatever_comes():
    """A row's result does not depend on how many rows came with it: 1, 16, 17 or 40 (blocks)."""
    torch.manual_seed(0)
    packed = packing.PackedLinear(torch.nn.Linear(96, 80))
    x = torch.randn(40, 96).to(torch.bfloat16)
    alone = torch.cat([packed(x[i:i + 1]) for i in range(40)])
    for count in (2, 16, 17, 32, 40):
        assert torch.equal(packed(x[:count]), alone[:count]), count
    assert packed(x[None, :3]).shape == (1, 3, 80)


@needs_bf16
def test_the_bf16_set_up_stays_close_to_fp32():
    model = wide_llama(0)
    ids = torch.randint(0, 64, (40,), generator=torch.Generator().manual_seed(2)).tolist()
    expected = logits(model, ids)
    assert "target bf16" in setups.prepare_target(model, "bf16")
    assert all(isinstance(m, packing.PackedLinear) for m in [model.lm_head, model.model.layers[0].mlp.up_proj])
    assert torch.allclose(logits(model, ids), expected, atol=0.15, rtol=0.02)


@pytest.mark.slow
@needs_bf16
def test_greedy_speculation_is_lossless_on_the_bf16_set_up_over_many_prompts():
    target = wide_llama(3)
    draft = noisy_copy(target, 0.3, seed=4)
    setups.prepare_target(target, "bf16")
    setups.prepare_draft(draft, "bf16")
    pair = build_pair("tiny-bf16", target, draft, tokenizer=None, device=torch.device("cpu"))
    assert pair.vocab_size == 64
    assert accepted_losslessly(pair) > 0  # the draft was right often enough for windows to be checked


def test_window_products_compute_what_fp32_computes_on_the_same_weights():
    model = wide_llama(0)
    ids = torch.randint(0, 64, (40,), generator=torch.Generator().manual_seed(2)).tolist()
    expected = [logits(model, ids[:n]) for n in (1, 8, 40)]  # one row, a window, a prefill past WINDOW_ROWS
    weight = model.model.layers[0].mlp.up_proj.weight
    assert "weight-first" in setups.prepare_target(model, "fp32-window")
    layer = model.model.layers[0].mlp.up_proj
    assert isinstance(layer, fp32.WindowLinear) and layer.weight is weight  # no copy of the weights
    assert isinstance(model.lm_head, fp32.WindowLinear)
    for n, want in zip((1, 8, 40), expected):
        assert torch.allclose(logits(model, ids[:n]), want, atol=1e-5), n
    with_bias = torch.nn.Linear(12, 7)
    x = torch.randn(3, 5, 12)
    assert torch.allclose(fp32.WindowLinear(with_bias)(x), with_bias(x), atol=1e-6)


@pytest.mark.slow
def test_greedy_speculation_gives_todays_tokens_on_the_window_set_up_over_many_prompts():
    """The same answer as fp32 as loaded, and lossless, whatever the policy and prompt."""
    target = wide_llama(3)
    draft = noisy_copy(target, 0.3, seed=4)
    plain = build_pair("tiny-fp32", copy.deepcopy(target), copy.deepcopy(draft), tokenizer=None,
                       device=torch.device("cpu"))
    setups.prepare_target(target, "fp32-window")
    windowed = build_pair("tiny-window", target, draft, tokenizer=None, device=torch.device("cpu"))
    assert accepted_losslessly(windowed, same_answer_as=plain) > 0


# ---- the draft in int4 ----------------------------------------------------------------------


def test_an_int4_layer_computes_nearly_what_the_layer_computes():
    torch.manual_seed(0)
    linear = torch.nn.Linear(128, 48)
    assert int4.Int4Linear.fits(linear)
    assert not int4.Int4Linear.fits(torch.nn.Linear(100, 48)) and not int4.Int4Linear.fits(torch.nn.Linear(128, 40))
    x = torch.randn(5, 128)
    exact, quantized = linear(x), int4.Int4Linear(linear)(x)
    assert quantized.dtype == torch.bfloat16 and quantized.shape == (5, 48)
    assert (quantized.float() - exact).norm() < 0.1 * exact.norm()  # 16 levels a group of 32


def test_the_draft_is_int4_where_a_one_row_int4_product_measures_faster(monkeypatch):
    draft = wide_llama(1)
    assert int4.int4_one_row_pays(draft, cpu.machine().native_bf16) in (True, False)  # it times, here
    monkeypatch.setattr(int4, "int4_one_row_pays", lambda model, native_bf16: True)
    assert setups.choose_draft({}, WITH_BF16, draft).setup == "int4"
    assert setups.choose_draft({}, WITHOUT_BF16, draft).setup == "int4"
    assert setups.choose_draft({cpu.DRAFT_SETUP_ENV: "bf16"}, WITH_BF16, draft).setup == "bf16"  # forced
    assert setups.choose_draft({cpu.DRAFT_SETUP_ENV: "fp32"}, WITH_BF16, draft).setup == "fp32"
    monkeypatch.setattr(int4, "int4_one_row_pays", lambda model, native_bf16: False)
    assert setups.choose_draft({}, WITH_BF16, draft).setup == "bf16"
    assert setups.choose_draft({cpu.DRAFT_SETUP_ENV: "int4"}, WITHOUT_BF16, draft).setup == "int4"


@pytest.mark.slow
def test_an_int4_draft_guesses_nearly_as_the_fp32_one_and_speculation_stays_lossless():
    """Lossy weights change some of the draft's guesses, never the answer: the target decides."""
    target = wide_llama(3)
    draft = noisy_copy(target, 0.3, seed=4)
    ids = torch.randint(0, 64, (48,), generator=torch.Generator().manual_seed(9)).tolist()
    before = logits(draft, ids).argmax(-1)
    assert setups.prepare_draft(draft, "int4").startswith("draft int4")
    assert isinstance(draft.lm_head, int4.Int4Linear) and isinstance(draft.model.layers[0].mlp.down_proj,
                                                                     int4.Int4Linear)
    assert (logits(draft, ids).argmax(-1) == before).float().mean() >= 0.8
    pair = build_pair("tiny-int4", target, draft, tokenizer=None, device=torch.device("cpu"))
    assert accepted_losslessly(pair) > 0


def test_int4_leaves_layers_it_does_not_fit_in_bf16():
    draft = tiny_llama(1)  # 16 wide: no whole group of 32
    setups.prepare_draft(draft, "int4")
    assert isinstance(draft.lm_head, torch.nn.Linear) and draft.lm_head.weight.dtype == torch.bfloat16


def test_pass_costs_measures_a_target_and_a_draft_set_up_each_its_own():
    from specviz.errors import SpecVizError
    from specviz.study.passcosts import _setups

    assert _setups("bf16/int4,fp32", "qwen2.5-coder-1.5b") == ["bf16/int4", "fp32"]
    for wrong in ("bf16/fp32-window", "int4", "bf16/"):
        with pytest.raises(SpecVizError, match="TARGET/DRAFT"):
            _setups(wrong, "qwen2.5-coder-1.5b")


def test_fp32_leaves_the_model_as_it_is():
    model = tiny_llama(0)
    before = copy.deepcopy(model.state_dict())
    assert setups.prepare_target(model, "fp32") == "target fp32 (torch's kernels)"
    assert setups.prepare_draft(model, "fp32") == "draft fp32"
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())


# ---- the cost curve --------------------------------------------------------------------------


def test_the_cost_curve_measures_every_window_and_prints_ratios(tiny_pair):
    curve = measure(tiny_pair, context=20, windows=(1, 2, 4), repeats=2, cpu_name="test CPU")
    assert curve.windows == (1, 2, 4) and len(curve.target_ms) == 3
    assert all(ms > 0 for ms in curve.target_ms) and curve.draft_call_ms > 0 and curve.draft_prefill_ms > 0
    assert curve.ratio(1) == 1.0
    lines = table(curve)
    assert lines[0] == "CPU: test CPU" and any(line.startswith("target, 4 new tokens") for line in lines)
    # the caches were left as they were found: the pair still decodes
    assert len(list(decode_target_only(tiny_pair, [1, 2, 3], 4))) == 5


def test_the_cost_curve_times_its_calls_in_turns():
    """A busy second of a shared machine must fall on every window alike, not on one window's repeats."""
    from specviz.pair.cpu import timed_in_turns

    order: list[str] = []
    ms = timed_in_turns({name: lambda name=name: order.append(name) for name in "abc"}, repeats=3)
    assert order == list("abc") + list("abc") + list("cba") + list("abc")  # a warm-up, then turns
    assert set(ms) == set("abc") and all(v >= 0 for v in ms.values())


def test_the_set_up_checks_time_both_sides_in_the_same_turns(monkeypatch):
    """Each check compares two kernels: timed one after the other, a busy second of a shared
    machine would fall on one of them and choose the set-up. Both sides go in one set of turns."""
    timed: list[set[str]] = []
    in_turns = cpu.timed_in_turns

    def recorded(calls, repeats):
        timed.append(set(calls))
        return in_turns(calls, repeats)

    monkeypatch.setattr(cpu, "timed_in_turns", recorded)
    model = wide_llama(0)
    for check in (fp32.window_products_pay, packing.fp32_packing_pays, bf16.bf16_one_row_pays,
                  lambda m: int4.int4_one_row_pays(m, native_bf16=False)):
        assert isinstance(check(model), bool)
    expected = [{"usual", "weight first"}, {"usual one", "usual window", "packed one", "packed window"},
                {"fp32", "bf16"}]
    if hasattr(torch, "_weight_int4pack_mm_for_cpu"):
        expected.append({"int4", "bf16"})
    assert timed == expected


def test_measured_prices_never_fall_with_the_window(monkeypatch, tiny_pair):
    """A pass over more tokens does all one over fewer does: a curve that falls holds a busy
    moment's price, which would make a round's first draft token look dearer than it is."""
    from specviz.decoding import costcurve

    noisy = PassCostCurve("cpu", "setup", 128, (1, 2, 4, 8), (100.0, 160.0, 130.0, 200.0), 20.0, 50.0)
    monkeypatch.setattr(costcurve, "measure", lambda *args, **kwargs: noisy)
    costcurve.forget_pass_costs(tiny_pair)
    try:
        prices = costcurve.pass_costs(tiny_pair)
    finally:
        costcurve.forget_pass_costs(tiny_pair)
    assert prices.target_ms[:5] == (100.0, 130.0, 130.0, 130.0, 130.0 + 70.0 / 4)  # windows 1-5
    assert all(a <= b for a, b in zip(prices.target_ms, prices.target_ms[1:]))


def test_the_curve_interpolates_between_measured_windows():
    curve = PassCostCurve("cpu", "setup", 100, (1, 2, 4, 8), (100.0, 120.0, 140.0, 180.0), 20.0, 50.0)
    assert curve.target_pass_ms(3) == pytest.approx(130.0)
    assert curve.target_pass_ms(12) == pytest.approx(220.0)  # past the last window: the last slope
    assert curve.ratio(8) == pytest.approx(1.8) and curve.draft_ratio == pytest.approx(0.2)


def _timed_round(index: int, drafted: int, draft_s: float, verify_s: float, prefill_s: float = 0.0) -> Round:
    return Round(index=index, position=index, budget=drafted, draft_ids=[7] * drafted, draft_probs=[0.5] * drafted,
                 accepted=0, target_id=7, draft_passes=drafted + (prefill_s > 0), draft_s=draft_s + prefill_s,
                 verify_s=verify_s, draft_prefill_s=prefill_s)


def test_live_prices_scale_the_measured_curve_by_what_runs_timed():
    """Each part of the price by the median of timed / measured; a run's first round (the prompt's
    prefill) is left out, and the draft's prefill is not a draft call."""
    prices = LivePassCosts(PassCosts(10.0, (100.0, 150.0, 160.0, 170.0)))
    assert prices.current() == prices.measured  # nothing timed yet: the curve as measured
    rounds = [_timed_round(0, 3, 5.0, 9.0, prefill_s=9.0),  # the prompt's prefill: ignored
              _timed_round(1, 3, 0.06, 0.34),  # three draft calls of 20 ms, a window of 4 at 340 ms (2x)
              _timed_round(2, 0, 0.0, 0.05),  # a plain pass: half the measured 100 ms
              # the backlog since round 1 (two tokens: one call each) after a prefill of the draft's
              _timed_round(3, 1, 0.04, 0.3, prefill_s=0.5)]
    prices.record(Trace("costaware", "cost-aware", {}, [7] * 8, rounds, 1.0, "max_new_tokens"))
    now = prices.current()
    assert now.draft_call_ms == pytest.approx(20.0)  # 2x, from both rounds' calls
    assert now.target_ms[0] == pytest.approx(50.0)
    assert now.target_ms[1:] == pytest.approx((300.0, 320.0, 340.0))  # 2x: windows of 2 (300 / 150) and 4
    # target-only decoding: its passes after the first
    prices.record(Baseline(token_ids=[7] * 11, wall_s=1.2, stop_reason="max_new_tokens", prefill_s=0.2))
    assert prices.current().target_ms[0] == pytest.approx(75.0)  # the median of 0.5 and 1.0


def test_a_window_the_runs_checked_often_is_priced_by_its_own_timings():
    """A spike in the load-time curve (a pass over 2 tokens timed at 180 ms, where runs pay 110)
    is priced away once the runs have checked that window often enough; a window they have
    checked less often keeps the curve's shape, scaled by the median over all windows."""
    prices = LivePassCosts(PassCosts(10.0, (100.0, 180.0, 200.0, 220.0)))
    rounds = [_timed_round(0, 1, 0.0, 0.5)]  # the prompt's prefill: ignored
    rounds += [_timed_round(i, 1, 0.01, 0.110) for i in range(1, TIMED_ENOUGH + 1)]  # windows of 2 at 110 ms
    rounds += [_timed_round(TIMED_ENOUGH + 1, 3, 0.03, 0.198)]  # one window of 4: 0.9x the curve's 220 ms
    prices.record(Trace("costaware", "cost-aware", {}, [7] * 20, rounds, 1.0, "max_new_tokens"))
    scale = 110.0 / 180.0  # the median over all windows' timed / measured: eight of them at 110 / 180
    assert prices.current().target_ms == pytest.approx((100.0, 110.0, 200.0 * scale, 220.0 * scale))


def test_live_prices_never_price_a_window_below_one_token():
    prices = LivePassCosts(PassCosts(10.0, (100.0, 101.0)))
    prices.record(Baseline(token_ids=[7] * 3, wall_s=0.5, stop_reason="eos", prefill_s=0.1))  # 200 ms a pass
    assert prices.current().target_ms == (200.0, 200.0)


@pytest.mark.slow
def test_a_cost_aware_comparison_measures_the_pairs_prices_once_and_records_them(bundled_pair):
    from specviz.decoding.costcurve import forget_pass_costs, live_pass_costs, pass_costs
    from specviz.decoding.pipeline import compare, make_request

    forget_pass_costs(bundled_pair)
    messages: list[str] = []
    comparison = compare(bundled_pair, make_request("Name a fruit.", "costaware,static:3", 16),
                         progress=messages.append)
    live = live_pass_costs(bundled_pair)
    assert live is not None and len(live.measured.target_ms) == 20
    assert any("Measuring what a pass costs" in m for m in messages)
    trace = comparison.trace("cost-aware")
    assert trace.lossless and trace.params["prices"]["target_ms"]
    # every run on the pair is learnt from: both policies and target-only decoding
    assert live.window and live.draft_call and live.one_token
    assert pass_costs(bundled_pair) == live.current()  # measured once, kept on the pair

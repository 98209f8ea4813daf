"""A K-quant draft's decoder layers in one C call (specviz/pair/fused_pass.py): close to torch's
layers, row-exact after any prefix and crop, and lossless with the oracle still the ideal."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import torch

from specviz.decoding.engine import generate, target_only
from specviz.decoding.oracle import make_oracle
from specviz.decoding.policies import Dynamic, Heuristic, Static
from specviz.pair import cpu, forward, fused_pass, kquant, setups
from specviz.pair.kvcache import new_cache
from specviz.pair.models import build_pair

here = cpu.machine()


@pytest.fixture(scope="module")
def kernel(tmp_path_factory) -> Path:
    if not kquant.cpu_can(here.flags):
        pytest.skip("this CPU has neither AVX512-VNNI nor AVX2")
    return kquant.build(tmp_path_factory.mktemp("kernels"), here.flags)


def tiny(kind: str, seed: int, layers: int = 2) -> torch.nn.Module:
    """A model whose Linear layers fit the draft's 4-bit codes (widths in 128s): Qwen2 has
    biases on q, k and v, Llama none; both share a key/value head between two query heads."""
    from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(seed)
    shape = {"vocab_size": 64, "hidden_size": 256, "intermediate_size": 512, "num_hidden_layers": layers,
             "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 512,
             "tie_word_embeddings": False, "bos_token_id": None, "eos_token_id": None, "pad_token_id": None}
    model = (Qwen2ForCausalLM(Qwen2Config(**shape)) if kind == "qwen2" else LlamaForCausalLM(LlamaConfig(**shape))).eval()
    with torch.no_grad():
        model.lm_head.weight.mul_(4.0)  # sharp enough that its choices are clear
        if kind == "qwen2":
            for layer in model.model.layers:
                for projection in (layer.self_attn.q_proj, layer.self_attn.k_proj, layer.self_attn.v_proj):
                    projection.bias.normal_(0, 0.5)
    model.generation_config.eos_token_id = None
    return model


def fused_draft(kind: str, seed: int, kernel: Path, layers: int = 2) -> torch.nn.Module:
    draft = tiny(kind, seed, layers)
    line = setups.prepare_draft(draft, "kquant", kernel)
    assert "its layers in one C call" in line and fused_pass.layers_of(draft) is not None
    return draft


def logits(model: torch.nn.Module, pieces: list[list[int]], cache=None) -> torch.Tensor:
    """Every row's logits, the tokens fed in calls of `pieces`."""
    cache = cache if cache is not None else new_cache(model.config)
    with torch.inference_mode():
        return torch.cat([forward.logits(model, torch.tensor([piece]), cache, len(piece))[0] for piece in pieces])


IDS = torch.randint(0, 64, (40,), generator=torch.Generator().manual_seed(7)).tolist()


@pytest.mark.parametrize("kind", ["qwen2", "llama"])
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_the_drafts_layers_in_one_call_compute_what_torchs_layers_do(kernel, kind, seed):
    """Not the same bits (another order of float sums), but the same layers. A row's int8 codes
    turn an ulp into a code's step now and then, so most rows, not all, agree to float rounding;
    a slip in the rotation, the grouped heads, a bias or the cache would move nearly every row."""
    draft = fused_draft(kind, seed, kernel, layers=1)
    fused = logits(draft, [IDS])
    setattr(draft, fused_pass.ATTRIBUTE, None)
    layers = logits(draft, [IDS])
    apart = ((fused - layers).norm(dim=-1) / layers.norm(dim=-1))
    assert (apart < 1e-5).float().mean().item() >= 0.3, apart
    assert apart.max().item() < 0.02 and (fused.argmax(-1) == layers.argmax(-1)).float().mean().item() > 0.9


@pytest.mark.parametrize("kind", ["qwen2", "llama"])
def test_a_row_is_the_same_bits_in_any_call_and_after_a_crop(kernel, kind):
    draft = fused_draft(kind, 2, kernel)
    whole = logits(draft, [IDS])
    assert torch.equal(whole, logits(draft, [IDS[:7], IDS[7:8], IDS[8:21], IDS[21:]]))
    assert torch.equal(whole, logits(draft, [[token] for token in IDS]))
    cache = new_cache(draft.config)
    logits(draft, [IDS[:30], [5, 9, 11]], cache)  # a rejected draft's rows, then cropped away
    cache.crop(-3)
    assert torch.equal(whole[30:], logits(draft, [IDS[30:]], cache))
    # past the cache's first buffer (256 positions), which then grows
    long_ids = (IDS * 8)[:300]
    assert torch.equal(logits(draft, [long_ids])[-10:], logits(draft, [long_ids[:295], long_ids[295:]])[-10:])
    assert forward.rows_exact(draft) and forward.draft_rows_exact(draft)


def test_a_model_not_all_on_the_kernel_keeps_torchs_layers(kernel):
    plain = tiny("llama", 3)
    assert not fused_pass.attach(plain, kernel) and fused_pass.layers_of(plain) is None
    half = tiny("llama", 3)
    setups.prepare_draft(half, "kquant", kernel)
    setattr(half, fused_pass.ATTRIBUTE, None)
    half.model.layers[1].mlp.down_proj = torch.nn.Linear(512, 256, bias=False)  # one layer left in torch
    assert not fused_pass.attach(half, kernel)


@pytest.mark.parametrize("kind", ["qwen2", "llama"])
def test_speculation_with_the_fused_draft_is_lossless_and_the_oracle_its_ideal(kernel, kind):
    target = tiny(kind, 4)
    draft = copy.deepcopy(target)
    with torch.no_grad():
        for weight in draft.parameters():
            weight.add_(0.1 * weight.std() * torch.randn_like(weight))
    setups.prepare_draft(draft, "kquant", kernel)
    cpu.use_row_attention(target)
    pair = build_pair("tiny", target, draft, tokenizer=None, device=torch.device("cpu"))
    pair.draft_row_exact = forward.draft_rows_exact(draft)  # as a preset's load checks it
    assert pair.draft_row_exact  # so rounds catch up in one call, which the oracle's ideal must survive
    accepted = 0
    for seed in range(6):
        prompt = torch.randint(0, 64, (6 + seed,), generator=torch.Generator().manual_seed(seed)).tolist()
        reference = target_only(pair, prompt, 24).token_ids
        oracle, ideal, _ = make_oracle(pair, prompt, reference)
        best = generate(pair, prompt, oracle, 24)
        assert best.token_ids == reference and all(r.accepted == r.lookahead for r in best.rounds)
        for policy in (Static(5), Heuristic(3), Dynamic(0.3, 12)):
            trace = generate(pair, prompt, policy, 24)
            assert trace.token_ids == reference, (seed, policy.label)
            assert best.target_passes <= trace.target_passes
            assert all(r.accepted == min(r.lookahead, ideal[r.position]) for r in trace.rounds), (seed, policy.label)
            accepted += trace.accepted
    assert accepted > 0

"""The target at its GGUF's own precision (pair/kquant.py, kquant.c): K-quant blocks unpacked to the
values the GGUF dequantizes to, the kernel's product, its rows the same bits alone and in a window,
a tiny model on it lossless, and the set-up chosen per CPU capability."""

from __future__ import annotations

import copy
from pathlib import Path

import numpy as np
import pytest
import torch
from gguf import GGMLQuantizationType, GGUFWriter, quants
from test_cpu import WITHOUT_BF16, accepted_losslessly

from specviz.pair import cpu, forward, kquant, setups
from specviz.pair.models import build_pair
from specviz.pair.setups import kquant_codes

KINDS = {kquant.Q4_K: GGMLQuantizationType.Q4_K, kquant.Q6_K: GGMLQuantizationType.Q6_K}
WITH_VNNI = cpu.Machine("a CPU with VNNI", True, frozenset({"avx512f", "avx512bw", "avx512_vnni", "avx512_bf16"}))
AVX2_ONLY = cpu.Machine("an AVX2 CPU", False, frozenset({"avx2", "fma"}))
here = cpu.machine()
needs_kernel = pytest.mark.skipif(not kquant.cpu_can(here.flags), reason="this CPU has neither AVX512-VNNI nor AVX2")


@pytest.fixture(scope="module")
def kernel(tmp_path_factory) -> Path:
    if not kquant.cpu_can(here.flags):
        pytest.skip("this CPU has neither AVX512-VNNI nor AVX2")
    return kquant.build(tmp_path_factory.mktemp("kernels"), here.flags)


@pytest.mark.parametrize("kind", [kquant.Q4_K, kquant.Q6_K])
def test_blocks_unpack_to_what_the_gguf_dequantizes_to(kind):
    raw = kquant.random_blocks(kind, 32, 512, np.random.default_rng(0))
    reference = quants.dequantize(raw.reshape(32, -1), KINDS[kind])
    assert np.array_equal(kquant.dequantize(kind, raw, 32, 512), reference)
    # and the kernel's layout reads back to the same values, bit for bit
    assert np.array_equal(kquant.pack(kind, raw, 32, 512).weights().numpy(), reference)


KQUANT_BLOCKS = {"blk.0.ffn_up.weight": (kquant.Q4_K, 48, 512), "blk.0.ffn_down.weight": (kquant.Q6_K, 32, 256),
                 "blk.0.ffn_gate.weight": (kquant.Q4_K, 32, 512),
                 "output.weight": (kquant.Q6_K, 16, 256), "token_embd.weight": (kquant.Q4_K, 16, 256)}


def write_kquant_gguf(path: Path) -> dict[str, np.ndarray]:
    """A GGUF file of KQUANT_BLOCKS' random K-quant blocks and one fp32 norm; returns the blocks by tensor name."""
    generator = np.random.default_rng(1)
    raws = {name: kquant.random_blocks(kind, out, into, generator) for name, (kind, out, into) in KQUANT_BLOCKS.items()}
    writer = GGUFWriter(str(path), "qwen2")
    for name, (kind, out, into) in KQUANT_BLOCKS.items():
        writer.add_tensor(name, raws[name].reshape(out, -1), raw_dtype=KINDS[kind])  # its shape in bytes
    writer.add_tensor("blk.0.attn_norm.weight", np.ones(256, dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return raws


def test_a_gguf_file_packs_its_k_quant_linear_layers_and_only_those(tmp_path):
    path = tmp_path / "tiny.gguf"
    raws, blocks = write_kquant_gguf(path), KQUANT_BLOCKS

    destination = tmp_path / "packed.safetensors"
    assert kquant.pack_gguf(path, destination) == 4  # not the norm; gate and up joined
    packed = kquant.read_packed(destination)
    gate_up = "model.layers.0.mlp.gate_proj,model.layers.0.mlp.up_proj"
    assert set(packed) == {gate_up, "model.layers.0.mlp.down_proj", "lm_head", "model.embed_tokens"}
    dequantized = {name: quants.dequantize(raws[name].reshape(out, -1), KINDS[kind])
                   for name, (kind, out, _) in blocks.items()}
    for module, kind, expected in [
            (gate_up, kquant.Q4_K, np.concatenate([dequantized["blk.0.ffn_gate.weight"], dequantized["blk.0.ffn_up.weight"]])),
            ("lm_head", kquant.Q6_K, dequantized["output.weight"]),
            ("model.embed_tokens", kquant.Q4_K, dequantized["token_embd.weight"])]:
        assert packed[module].kind == kind
        assert np.array_equal(packed[module].weights().numpy(), expected)


def quantized_activations(x: torch.Tensor, block: int = 256) -> torch.Tensor:
    """The activations as the kernel sees them: int8 per row and block, times the block's scale."""
    blocks = x.reshape(x.shape[0], -1, block)
    scale = blocks.abs().amax(-1, keepdim=True) / 127
    return (torch.round(blocks / scale) * scale).reshape(x.shape)


def test_the_kernel_is_compiled_for_the_best_instruction_set_the_cpu_has():
    assert "-mavx512vnni" in kquant.compiler_flags(WITH_VNNI.flags)
    avx2 = kquant.compiler_flags(AVX2_ONLY.flags)
    assert "-mavx2" in avx2 and not any(flag.startswith("-mavx512") for flag in avx2)
    assert kquant.compiler_flags(WITHOUT_BF16.flags) is None and not kquant.cpu_can(WITHOUT_BF16.flags)


@pytest.mark.parametrize("kind", [kquant.Q4_K, kquant.Q6_K])
def test_the_kernels_product_is_the_gguf_weights_times_int8_activations(kernel, kind):
    raw = kquant.random_blocks(kind, 64, 768, np.random.default_rng(2))
    layer = kquant.KQuantLinear(kquant.pack(kind, raw, 64, 768), torch.randn(64), kernel)
    x = torch.randn(5, 768)
    weights = torch.from_numpy(kquant.dequantize(kind, raw, 64, 768)).double()
    expected = quantized_activations(x).double() @ weights.T + layer.bias.double()
    assert torch.allclose(layer(x).double(), expected, rtol=1e-4, atol=1e-4)
    plain = x.double() @ weights.T + layer.bias.double()  # and the activations' rounding is small
    assert ((layer(x).double() - plain).norm() / plain.norm()) < 0.02


def test_q6_k_codes_take_six_bits_and_an_older_caches_eight_bit_layout_still_multiplies_alike(kernel):
    raw = kquant.random_blocks(kquant.Q6_K, 48, 512, np.random.default_rng(4))
    packed = kquant.pack(kquant.Q6_K, raw, 48, 512)
    assert packed.bits == 6 and packed.codes.numel() == 48 * 512 * 6 // 8
    # the layout a cache packed before 2026-12-07 holds: one code a byte, (tiles, groups, steps, 16, 4)
    codes = kquant.fields(kquant.Q6_K, raw, 48, 512)[0]
    one_a_byte = torch.from_numpy(codes.astype(np.uint8).reshape(3, 16, 32, 4, 4).transpose(0, 2, 3, 1, 4).copy())
    older = kquant.Packed(kquant.Q6_K, 48, 512, one_a_byte.reshape(-1), packed.sc, packed.mn, packed.d, packed.dmin)
    assert older.bits == 8
    assert torch.equal(packed.weights(), older.weights())
    assert torch.equal(packed.weights(), torch.from_numpy(kquant.dequantize(kquant.Q6_K, raw, 48, 512)))
    x = torch.randn(9, 512)
    assert torch.equal(kquant.KQuantLinear(packed, None, kernel)(x), kquant.KQuantLinear(older, None, kernel)(x))


def test_the_activations_int8_codes_are_round_to_nearest_of_each_blocks_scale(kernel):
    x = torch.randn(3, 512) * torch.tensor([[1e-3], [1.0], [50.0]])
    x[1, :256] = 0  # a block of zeros: scale 0, codes 0
    x[2, 3] = -x[2].abs().max() * 1.5  # a negative value sets the block's scale
    xq, scale, bsum = torch.empty(3, 512, dtype=torch.int8), torch.empty(3, 2), torch.empty(3, 16)
    kquant.load(kernel).kq_quantize(x.data_ptr(), 3, 512, 32, 256, xq.data_ptr(), scale.data_ptr(), bsum.data_ptr())
    amax = x.reshape(3, 2, 256).abs().amax(-1)
    inverse = torch.where(amax > 0, 127 / amax, torch.zeros_like(amax))
    expected = torch.round(x.reshape(3, 2, 256) * inverse[..., None]).reshape(3, 512)
    assert torch.equal(scale, amax / 127)
    assert torch.equal(xq, expected.to(torch.int8))
    assert torch.equal(bsum, expected.reshape(3, 16, 32).sum(-1))


@pytest.mark.parametrize("rows", [2, 7, 16, 33, 70])  # 33 and 70: more rows than the kernel holds at once
def test_a_row_is_the_same_bits_alone_and_among_others(kernel, rows):
    raw = kquant.random_blocks(kquant.Q4_K, 32, 512, np.random.default_rng(3))
    layer = kquant.KQuantLinear(kquant.pack(kquant.Q4_K, raw, 32, 512), None, kernel)
    x = torch.randn(rows, 512)
    together = layer(x)
    assert torch.equal(together, torch.cat([layer(x[i:i + 1]) for i in range(rows)]))
    assert torch.equal(together[:3], layer(x[:3]))


def kquant_llama(seed: int):
    """A tiny Llama whose every Linear layer fits the kernel (widths in 256s, outputs in 16s)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    config = LlamaConfig(vocab_size=64, hidden_size=256, intermediate_size=512, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                         tie_word_embeddings=False, bos_token_id=None, eos_token_id=None, pad_token_id=None)
    model = LlamaForCausalLM(config).eval()
    model.generation_config.eos_token_id = None
    return model


def random_packing(model, seed: int) -> dict[str, kquant.Packed]:
    """Every Linear layer of `model` and its token embeddings as random K-quant codes: Q6_K for the
    output layer and the down projections (as Q4_K_M files store them), Q4_K elsewhere; sharp enough
    that choices are clear."""
    generator, packed = np.random.default_rng(seed), {}
    for name, module in model.named_modules():
        if isinstance(module, torch.nn.Embedding):
            module = torch.nn.Linear(module.embedding_dim, module.num_embeddings)  # the table's shape as a GGUF's
        if isinstance(module, torch.nn.Linear):
            kind = kquant.Q6_K if name == "lm_head" or name.endswith("down_proj") else kquant.Q4_K
            raw = kquant.random_blocks(kind, module.out_features, module.in_features, generator)
            packed[name] = kquant.pack(kind, raw, module.out_features, module.in_features)
    return packed


@pytest.mark.slow
@needs_kernel
def test_a_target_on_k_quant_codes_is_row_exact_and_lossless(kernel):
    target, draft = kquant_llama(0), kquant_llama(0)
    packed = random_packing(target, 0)
    assert "Q4_K/Q6_K" in setups.prepare_target(target, "kquant", packed=packed, kernel=kernel)
    # the embeddings are looked up from their codes: the same values, without a float32 table
    embeddings = target.model.embed_tokens
    assert isinstance(embeddings, kquant.KQuantEmbedding)
    ids = torch.tensor([[3, 17, 63], [0, 3, 40]])
    assert torch.equal(embeddings(ids), torch.nn.functional.embedding(ids, packed["model.embed_tokens"].weights()))
    draft_packing = random_packing(draft, 0)  # the same codes: a draft that agrees, then jitter it
    kquant_codes.to_kquant(draft, draft_packing, kernel)
    with torch.no_grad():
        draft.model.norm.weight.mul_(1 + 0.05 * torch.randn_like(draft.model.norm.weight))
    assert forward.rows_exact(target)
    assert accepted_losslessly(build_pair("tiny", target, draft, None)) > 0


@needs_kernel
def test_layers_reading_one_input_run_as_one_call_with_the_same_bits(kernel):
    target = kquant_llama(3)
    packed = random_packing(target, 3)
    packed["model.layers.1.self_attn.v_proj"] = kquant.pack(  # a Q6_K v beside Q4_K q and k, as in a Q4_K_M file
        kquant.Q6_K, kquant.random_blocks(kquant.Q6_K, 128, 256, np.random.default_rng(3)), 128, 256)
    apart = {name: kquant.KQuantLinear(layer, None, kernel) for name, layer in packed.items() if name != "model.embed_tokens"}
    kquant_codes.to_kquant(target, kquant.with_shared_inputs_joined(packed), kernel)
    layers = target.model.layers
    assert isinstance(layers[0].self_attn.v_proj, kquant.KQuantPart) and layers[0].self_attn.v_proj.joint.out_features == 512
    assert isinstance(layers[1].self_attn.v_proj, kquant.KQuantLinear) and isinstance(layers[1].self_attn.k_proj, kquant.KQuantPart)
    assert layers[0].mlp.gate_proj.joint is layers[0].mlp.up_proj.joint
    ids = torch.randint(0, 64, (1, 12), generator=torch.Generator().manual_seed(3))
    with torch.inference_mode():
        together = target(input_ids=ids).logits
        assert layers[0].mlp.up_proj.joint.last == [None, None, 0]  # let go once every part took its columns
        for name, layer in apart.items():
            parent, _, child = name.rpartition(".")
            setattr(target.get_submodule(parent), child, layer)
        assert torch.equal(together, target(input_ids=ids).logits)


@pytest.mark.slow
def test_the_set_up_is_chosen_by_what_the_cpu_can_do(kernel, monkeypatch):
    model = kquant_llama(1)
    packed = random_packing(model, 1)
    monkeypatch.setattr(kquant_codes, "kquant_kernel", lambda found, cache: (kernel, "") if kquant.cpu_can(found.flags)
                        else (None, "need avx512_vnni or avx2, which this CPU lacks"))
    monkeypatch.setattr(kquant_codes, "kquant_pays", lambda *args, **kwargs: True)
    for found in (WITH_VNNI, AVX2_ONLY):
        choice = setups.choose_target(model, {}, found, packed)
        assert (choice.setup, choice.kernel) == ("kquant", kernel), found.name
    without = setups.choose_target(model, {}, WITHOUT_BF16, packed)  # AVX2 without FMA: neither body
    assert without.setup.startswith("fp32") and without.why.startswith("K-quant codes need avx512_vnni or avx2")
    # no packed codes (a bundled or hub model): nothing said about them
    assert "K-quant" not in setups.choose_target(model, {}, WITHOUT_BF16, {}).why
    # forced without codes: the reason, and the set-up the CPU would otherwise get
    forced = setups.choose_target(model, {cpu.TARGET_SETUP_ENV: "kquant"}, WITHOUT_BF16, {})
    assert forced.why.startswith("K-quant codes not kept at set-up;") and forced.setup != "kquant"
    # forced off: another set-up, even where the codes would serve
    assert setups.choose_target(model, {cpu.TARGET_SETUP_ENV: "fp32"}, WITH_VNNI, packed).setup == "fp32"
    monkeypatch.setattr(kquant_codes, "kquant_pays", lambda *args, **kwargs: False)
    slower = setups.choose_target(model, {}, AVX2_ONLY, packed)  # (no bf16 claimed: this CPU may lack it)
    assert slower.setup != "kquant" and "measured slower here" in slower.why


def test_a_float_weight_quantized_by_specviz_stays_close_and_row_exact(kernel):
    weight = torch.randn(64, 384) * 0.05  # 384: three of the draft's blocks of 128, not a GGUF's 256
    packed = kquant.quantize(weight)
    assert packed.kind == kquant.Q4 and packed.block == 128
    assert ((packed.weights() - weight).norm() / weight.norm()) < 0.1  # 4 bits, 16 levels a group
    layer = kquant.KQuantLinear(packed, None, kernel)
    x = torch.randn(12, 384)
    together = layer(x)
    assert torch.allclose(together.double(), quantized_activations(x, 128).double() @ packed.weights().double().T,
                          rtol=1e-4, atol=1e-4)
    assert torch.equal(together, torch.cat([layer(x[i:i + 1]) for i in range(12)]))


def test_the_drafts_codes_follow_the_rule_group_by_group():
    """SpecViz's 4-bit form (kquant.quantize) against the rule written out for one group at a time
    in float32 numpy: the same integer scales, minimums and codes, so the draft's guesses (and the
    study's records) do not move with how the rule is vectorized."""
    weight = torch.randn(32, 256) * 0.03
    weight[0, :32] = 0.0  # a flat group: its step is the floor, its codes 0
    packed = kquant.quantize(weight)
    w = weight.numpy().reshape(32, 2, 4, 32)  # (out, blocks of 128, groups of 32, inputs)
    f32 = np.float32
    for row in range(32):
        for block in range(2):
            groups = w[row, block]
            steps = [max((g.max() - g.min()) / f32(15), f32(1e-12)) for g in groups]
            d = max(max(steps), f32(1e-12)) / f32(127)
            dmin = max(max(abs(g.min()) for g in groups), f32(1e-12)) / f32(127)
            for index, group in enumerate(groups):
                sc = min(max(np.rint(steps[index] / d), 1), 127)
                mn = min(max(np.rint(-group.min() / dmin), -127), 127)
                codes = np.clip(np.rint((group + dmin * f32(mn)) / (d * f32(sc))), 0, 15)
                expected = d * f32(sc) * codes - dmin * f32(mn)
                got = packed.weights()[row, 128 * block + 32 * index: 128 * block + 32 * (index + 1)]
                assert np.array_equal(got.numpy(), expected.astype(np.float32)), (row, block, index)


def test_the_row_exact_probe_takes_a_small_vocabulary_whatever_the_special_tokens(kernel):
    from transformers import Qwen2Config, Qwen2ForCausalLM

    # a large vocabulary whose special tokens lie past the probe's: the probe must not inherit them
    config = Qwen2Config(vocab_size=4096, hidden_size=256, intermediate_size=512, num_hidden_layers=1,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                         bos_token_id=4000, eos_token_id=4001, pad_token_id=4002)
    model = Qwen2ForCausalLM(config).eval()
    vocab = kquant_codes.PROBE_VOCAB
    probe = cpu.probe_of(model, vocab=vocab)
    assert probe.config.vocab_size == vocab and probe.lm_head.out_features == vocab
    assert model.config.vocab_size == 4096 and model.config.pad_token_id == 4002  # the model's own: untouched
    assert kquant_codes.kquant_rows_exact(model, kernel)


@pytest.mark.slow
def test_the_draft_gets_the_kernel_where_the_cpu_can_and_it_pays(kernel, monkeypatch):
    draft = kquant_llama(2)
    monkeypatch.setattr(kquant_codes, "kquant_kernel", lambda found, cache: (kernel, ""))
    monkeypatch.setattr(kquant_codes, "kquant_draft_pays", lambda *args, **kwargs: True)
    choice = setups.choose_draft({}, WITH_VNNI, draft)
    assert (choice.setup, choice.kernel) == ("kquant", kernel)
    assert setups.choose_draft({}, WITHOUT_BF16, draft).setup != "kquant"  # neither AVX512-VNNI nor AVX2 with FMA
    assert setups.choose_draft({cpu.DRAFT_SETUP_ENV: "int4"}, WITH_VNNI, draft).setup == "int4"
    monkeypatch.setattr(kquant_codes, "kquant_draft_pays", lambda *args, **kwargs: False)
    assert setups.choose_draft({}, AVX2_ONLY, draft).setup != "kquant"  # (no bf16 claimed: this CPU may lack it)
    apart = copy.deepcopy(draft)  # each layer its own call: what the joined draft must equal
    cpu.replace_linears(apart, lambda linear: kquant.KQuantLinear(kquant.quantize(linear.weight), linear.bias, kernel))
    cpu.use_row_attention(apart)
    line = setups.prepare_draft(draft, "kquant", kernel)
    assert line.startswith("draft 4-bit") and isinstance(draft.lm_head, kquant.KQuantLinear)
    ids = torch.randint(0, 64, (1, 12))
    with torch.inference_mode():
        assert torch.equal(draft(ids).logits, apart(ids).logits)
    attention, mlp = draft.model.layers[0].self_attn, draft.model.layers[0].mlp
    assert isinstance(attention.q_proj, kquant.KQuantPart) and attention.q_proj.joint is attention.v_proj.joint
    assert isinstance(mlp.gate_proj, kquant.KQuantPart) and mlp.gate_proj.joint is mlp.up_proj.joint
    assert forward.rows_exact(draft)  # so a catch-up may feed it several tokens in one call


def mapped(path: Path) -> bool:
    return str(path) in Path("/proc/self/maps").read_text()


@pytest.mark.slow
@needs_kernel
def test_the_k_quant_set_ups_let_the_loaded_weights_file_go(kernel, tmp_path):
    """A safetensors file is mapped whole and the pages a load read stay resident while any tensor of
    it lives: after set-up, nothing of the file may remain (the real pair: 2.3 GB less)."""
    import gc

    from transformers import LlamaForCausalLM

    kquant_llama(4).save_pretrained(tmp_path / "target")
    kquant_llama(5).save_pretrained(tmp_path / "draft")
    target = LlamaForCausalLM.from_pretrained(tmp_path / "target")
    draft = LlamaForCausalLM.from_pretrained(tmp_path / "draft")
    files = [tmp_path / name / "model.safetensors" for name in ("target", "draft")]
    if not all(mapped(file) for file in files):
        pytest.skip("transformers read the weights without mapping the file")
    before = target.model.norm.weight.clone()
    setups.prepare_target(target, "kquant", packed=random_packing(target, 4), kernel=kernel)
    setups.prepare_draft(draft, "kquant", kernel)
    gc.collect()
    assert not any(mapped(file) for file in files)
    assert torch.equal(target.model.norm.weight, before)  # the same values, in memory of its own

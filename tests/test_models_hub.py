"""Hub presets and SPECVIZ_DEFAULT_PRESET, without a hub: the `smollm2-360m` preset's loading
path runs for real (`from_pretrained` on both models, vocabulary check, pair building) with its
ids pointed at two tiny Llama models saved in a temporary folder, and HF_HUB_OFFLINE set."""

from __future__ import annotations

import dataclasses
import logging
import os
import subprocess
import sys

import pytest

from specviz.decoding.pipeline import compare, make_request
from specviz.pair import models, presets, weights
from tests.conftest import noisy_copy, tiny_llama

WORDS = ["<unk>", "<eos>"] + [f"w{i}" for i in range(30)]


def tiny_tokenizer():
    """A 32-word word-level tokenizer, built locally (no download)."""
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel
    from tokenizers.pre_tokenizers import WhitespaceSplit
    from transformers import PreTrainedTokenizerFast

    core = Tokenizer(WordLevel({w: i for i, w in enumerate(WORDS)}, unk_token="<unk>"))
    core.pre_tokenizer = WhitespaceSplit()
    return PreTrainedTokenizerFast(tokenizer_object=core, unk_token="<unk>", eos_token="<eos>")


@pytest.fixture
def local_hub_preset(tmp_path, monkeypatch):
    """`smollm2-360m` with its hub ids replaced by local folders, and the hub marked offline."""
    target = tiny_llama(0, vocab=len(WORDS), sharpness=2.0)
    draft = noisy_copy(target, 0.2, seed=5)
    tokenizer = tiny_tokenizer()
    for name, model in (("target", target), ("draft", draft)):
        model.save_pretrained(tmp_path / name)
        tokenizer.save_pretrained(tmp_path / name)
    preset = dataclasses.replace(presets.PRESETS["smollm2-360m"], target=str(tmp_path / "target"),
                                 draft=str(tmp_path / "draft"))
    monkeypatch.setitem(presets.PRESETS, "smollm2-360m", preset)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")

    def no_network(*args, **kwargs):
        raise AssertionError("the test must not open a network connection")

    monkeypatch.setattr(weights.socket, "create_connection", no_network)
    return preset


def test_the_360m_preset_names_the_separately_trained_pair():
    preset = presets.PRESETS["smollm2-360m"]
    assert (preset.target, preset.draft, preset.offline) == ("HuggingFaceTB/SmolLM2-360M-Instruct",
                                                             "HuggingFaceTB/SmolLM2-135M-Instruct", False)


@pytest.mark.slow
def test_a_hub_preset_loads_through_from_pretrained_and_runs(local_hub_preset):
    pair = models.load_pair("smollm2-360m")
    assert pair.preset == "smollm2-360m" and pair.vocab_size == len(WORDS)
    assert pair.target is not pair.draft and not pair.target.training
    assert pair.tokenizer.convert_tokens_to_ids("w3") == 5
    comparison = compare(pair, make_request("w1 w2 w3 w4", "static:3,dynamic:0.4,oracle", 12))
    assert len(comparison.baseline.token_ids) == 12
    assert all(t.lossless for t in comparison.traces)  # fp32 greedy: every policy equals target-only


@pytest.mark.slow
def test_a_hub_preset_with_a_missing_model_fails_with_the_presets_name(local_hub_preset, tmp_path, monkeypatch):
    broken = dataclasses.replace(local_hub_preset, draft=str(tmp_path / "nowhere"))
    monkeypatch.setitem(presets.PRESETS, "smollm2-360m", broken)
    with pytest.raises(models.SpecVizError, match="Preset 'smollm2-360m' could not load .*not in the local cache"):
        models.load_pair("smollm2-360m")


def test_default_preset_follows_the_environment():
    assert presets.default_preset({}) == presets.BUILTIN_DEFAULT_PRESET
    assert presets.default_preset({presets.DEFAULT_PRESET_ENV: " smollm2-360m "}) == "smollm2-360m"
    assert presets.default_preset({presets.DEFAULT_PRESET_ENV: "smollm2-135m-bf16"}) == "smollm2-135m-bf16"


@pytest.mark.parametrize("name", ["smollm2-999m", "HuggingFaceTB/a|HuggingFaceTB/b", "../x"])
def test_an_unknown_default_preset_falls_back_with_a_warning(caplog, name):
    with caplog.at_level(logging.WARNING, logger="specviz.pair.models"):
        assert presets.default_preset({presets.DEFAULT_PRESET_ENV: name}) == presets.BUILTIN_DEFAULT_PRESET
    assert presets.DEFAULT_PRESET_ENV in caplog.text and "not a listed preset" in caplog.text


@pytest.mark.slow
def test_the_environment_sets_the_default_at_startup():
    env = {**os.environ, presets.DEFAULT_PRESET_ENV: "smollm2-360m"}
    shown = subprocess.run([sys.executable, "-m", "specviz", "presets"], env=env, capture_output=True, text=True,
                           timeout=120, check=True)
    assert "default: smollm2-360m" in shown.stdout
    env[presets.DEFAULT_PRESET_ENV] = "no-such-preset"
    shown = subprocess.run([sys.executable, "-m", "specviz", "presets"], env=env, capture_output=True, text=True,
                           timeout=120, check=True)
    assert f"default: {presets.BUILTIN_DEFAULT_PRESET}" in shown.stdout and "no-such-preset" in shown.stderr

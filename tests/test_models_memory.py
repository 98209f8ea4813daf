"""How many pairs `get_pair` keeps: a large pair (the real pair is about 9 GB) evicts every other large
pair before it loads; small ones (the bundled pairs, about 1 GB each) stay. No model is loaded:
`load_pair` is a stand-in that records what it was asked for."""

import pytest

from specviz.pair import models, presets

REAL = presets.REAL_PAIR_PRESET
BUNDLED = ["smollm2-135m-int8", "smollm2-135m-bf16"]


@pytest.fixture
def loads(monkeypatch):
    asked: list[str] = []

    def fake_load_pair(name, progress=None):
        asked.append(name)
        return f"pair {name}"

    monkeypatch.setattr(models, "_pairs", {})
    monkeypatch.setattr(models, "_load_states", {})
    monkeypatch.setattr(models, "load_pair", fake_load_pair)
    return asked


def held() -> set[str]:
    return set(models._pairs)


def test_the_presets_state_their_size_and_kind():
    kinds = {name: p.kind for name, p in presets.PRESETS.items()}
    assert {n for n, k in kinds.items() if k == "bundled"} == set(BUNDLED)
    assert {n for n, k in kinds.items() if k == "offline after set-up"} == {REAL}
    assert {n for n, p in presets.PRESETS.items() if p.offline} == set(BUNDLED) | {REAL}
    assert all(not presets.PRESETS[n].large for n in BUNDLED)
    assert presets.PRESETS[REAL].large and presets.PRESETS[REAL].ram_gb >= 9
    assert presets.PRESETS["qwen2.5-1.5b"].large and not presets.PRESETS["smollm2-360m"].large


def test_a_large_pair_evicts_the_other_large_pairs_only(loads):
    for name in BUNDLED:
        models.get_pair(name)
    models.get_pair("qwen2.5-1.5b")
    assert held() == {*BUNDLED, "qwen2.5-1.5b"}
    models.get_pair(REAL)
    assert held() == {*BUNDLED, REAL}
    assert models.load_state("qwen2.5-1.5b").phase == "not loaded" and models.load_state(REAL).phase == "ready"
    models.get_pair("smollm2-360m")  # about 2 GB: evicts nothing, and is not evicted by a large pair
    assert held() == {*BUNDLED, REAL, "smollm2-360m"}
    models.get_pair("qwen2.5-1.5b")
    assert held() == {*BUNDLED, "smollm2-360m", "qwen2.5-1.5b"}
    for name in BUNDLED:
        assert models.get_pair(name) == f"pair {name}"  # still held: not loaded again
    assert loads == [*BUNDLED, "qwen2.5-1.5b", REAL, "smollm2-360m", "qwen2.5-1.5b"]


def test_a_user_chosen_hub_pair_counts_as_large(loads, monkeypatch):
    monkeypatch.setenv(presets.ALLOW_HUB_MODELS_ENV, "1")
    chosen = "Qwen/Qwen2.5-7B-Instruct|Qwen/Qwen2.5-0.5B-Instruct"
    models.get_pair(REAL)
    models.get_pair(chosen)
    assert held() == {chosen}
    monkeypatch.delenv(presets.ALLOW_HUB_MODELS_ENV)  # it can no longer be looked up: still large
    models.get_pair(REAL)
    assert held() == {REAL}


def test_a_failed_large_load_leaves_the_small_pairs(loads, monkeypatch):
    models.get_pair(BUNDLED[0])

    def failing(name, progress=None):
        raise models.ModelLoadError("not set up")

    monkeypatch.setattr(models, "load_pair", failing)
    with pytest.raises(models.ModelLoadError):
        models.get_pair(REAL)
    assert held() == {BUNDLED[0]} and models.load_state(REAL).phase == "failed"

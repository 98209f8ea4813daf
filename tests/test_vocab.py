"""The draft's smaller output layer (pair/vocab.py, pair/draft_head.py) on tiny models built here:
the kept rows' logits are the full layer's and every other id's -inf (float, K-quant codes, the
bundled int8 draft), speculation stays lossless, EOS and special tokens are always kept, the
setting's mistakes are one line, coverage counts what the kept rows could have drafted, and the
study and pass-costs name and measure a run with it apart."""

from __future__ import annotations

import copy
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import noisy_copy
from test_cpu import accepted_losslessly, logits, wide_llama
from test_kquant import kquant_llama

from specviz.errors import SpecVizError
from specviz.pair import cpu, draft_head, forward, kquant, models, setups, vocab
from specviz.pair.models import build_pair
from specviz.pair.presets import DEFAULT_PRESET

KEPT = torch.tensor(sorted(set(range(0, 64, 2)) | {1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31}))  # 48


def ids(seed: int, count: int = 20) -> list[int]:
    return torch.randint(0, 64, (count,), generator=torch.Generator().manual_seed(seed)).tolist()


def assert_kept_only(reduced: torch.Tensor, full: torch.Tensor | None, kept: torch.Tensor,
                     exact: bool = False) -> None:
    """The kept ids' logits are the full layer's (bit for bit where `exact`), every other id's -inf."""
    if full is not None and exact:
        assert torch.equal(reduced[:, kept], full[:, kept])
    elif full is not None:
        torch.testing.assert_close(reduced[:, kept], full[:, kept])
    dropped = torch.ones(reduced.shape[-1], dtype=torch.bool)
    dropped[kept] = False
    assert torch.all(reduced[:, dropped] == float("-inf"))
    assert set(reduced.argmax(-1).tolist()) <= set(kept.tolist())  # a dropped id is never the draft's guess


def test_the_kept_layer_gives_the_full_layers_logits_on_kept_ids_and_minus_inf_elsewhere():
    model = wide_llama(0)
    prompt = ids(1)
    full = logits(model, prompt)
    head = draft_head.keep_rows(model, KEPT)
    assert model.lm_head is head and head.linear.weight.shape == (48, 64)
    assert_kept_only(logits(model, prompt), full, KEPT)


@pytest.mark.slow
def test_greedy_speculation_with_the_kept_layer_stays_lossless():
    """The target verifies on the full vocabulary: a draft that cannot say some tokens drafts worse there,
    never changes the answer."""
    target = wide_llama(3)
    draft = noisy_copy(target, 0.3, seed=4)
    draft_head.keep_rows(draft, KEPT)
    assert accepted_losslessly(build_pair("tiny-kept", target, draft, tokenizer=None)) > 0


@pytest.mark.slow
def test_the_bundled_int8_draft_keeps_its_rows_before_it_is_quantized():
    """(Its weights' int8 scale is per layer, so the kept rows' values differ a little from the full
    layer's: compared with it only through the lossless check.)"""
    target = wide_llama(5)
    draft = models.int8_draft(target, KEPT)
    assert_kept_only(logits(draft, ids(2)), None, KEPT)
    assert isinstance(target.lm_head, torch.nn.Linear) and target.lm_head.out_features == 64  # the target keeps all
    assert accepted_losslessly(build_pair("tiny-int8-kept", target, draft, tokenizer=None)) > 0


@pytest.fixture(scope="module")
def kernel(tmp_path_factory) -> Path:
    here = cpu.machine()
    if not kquant.cpu_can(here.flags):
        pytest.skip("this CPU has neither AVX512-VNNI nor AVX2")
    return kquant.build(tmp_path_factory.mktemp("kernels"), here.flags)


@pytest.mark.slow
def test_on_k_quant_codes_the_kept_rows_are_the_full_layers_bits(kernel):
    """Kept before the precision set-up, the rows get the codes they get in the full layer (a row is
    quantized alone) and the kernel computes each from its own tile: the same bits."""
    full = kquant_llama(2)
    reduced = copy.deepcopy(full)
    draft_head.keep_rows(reduced, KEPT)
    setups.prepare_draft(full, "kquant", kernel)
    setups.prepare_draft(reduced, "kquant", kernel)
    assert isinstance(reduced.lm_head.linear, kquant.KQuantLinear) and reduced.lm_head.linear.out_features == 48
    prompt = ids(3)
    assert_kept_only(logits(reduced, prompt), logits(full, prompt), KEPT, exact=True)
    assert forward.rows_exact(reduced)  # so the draft still reads a round's backlog in one call


# ---- which rows --------------------------------------------------------------------------------


def test_eos_and_special_tokens_are_always_kept_and_rows_come_in_whole_tiles():
    ranking = np.arange(100)[::-1]  # 99 the most frequent, then 98, ...
    kept = vocab.kept_ids(ranking, size=20, always={7, 3, 150}, rows=100)  # 150: past the layer, left out
    assert kept.tolist() == sorted(kept.tolist()) and len(kept) == 32  # 20 rounded up to two tiles of 16
    assert {3, 7} <= set(kept.tolist()) and 150 not in kept.tolist()
    assert set(kept.tolist()) - {3, 7} == set(range(99, 69, -1))
    assert len(vocab.kept_ids(ranking, size=500, always=(), rows=100)) == 100  # never more than the layer


def test_the_ranking_takes_the_corpus_and_the_tokenizers_order_in_turns():
    found = vocab.Frequencies(np.array([0, 5, 0, 9, 5, 1]), "a corpus")
    # the corpus's order 3, 1, 4, 5, 0, 2 (equal counts by id) and the ids 0, 1, 2, ... in turns
    assert found.ranking().tolist() == [3, 0, 1, 4, 2, 5]
    assert found.covered(np.array([3, 1])) == pytest.approx(14 / 20)


class WordTokenizer:
    """A stand-in tokenizer: each word's id is its length, the EOS id 63, two special tokens."""

    eos_token_id = 63
    all_special_ids = (62, 63)

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        return [min(len(word), 60) for word in text.split()]

    def get_vocab(self) -> dict[str, int]:
        return {str(i): i for i in range(64)}


def test_a_plan_counts_the_corpus_once_and_keeps_eos_and_specials(tmp_path, monkeypatch):
    source = tmp_path / "module.py"
    source.write_text("a bb bb ccc ccc ccc dddd\n" * 3, encoding="utf-8")
    monkeypatch.setattr(vocab, "stdlib_files", lambda root=None: [source])
    plan = vocab.plan(64, WordTokenizer(), {63}, tmp_path / "vocab", {vocab.VOCAB_ENV: "300"})
    assert plan.kept is None and "full" in plan.line  # 300 >= 64 rows: nothing to leave out
    monkeypatch.setattr(vocab, "SMALLEST", 16)  # a tiny layer's worth
    environ = {vocab.VOCAB_ENV: "16"}
    plan = vocab.plan(64, WordTokenizer(), {63}, tmp_path / "vocab", environ)
    assert {1, 2, 3, 4, 62, 63} <= set(plan.kept.tolist()) and len(plan.kept) == 16
    assert plan.line.startswith("draft output layer 16 of 64 tokens (100.0% of the tokens of Python ")
    assert len(list((tmp_path / "vocab").glob("stdlib-*.npy"))) == 1
    monkeypatch.setattr(vocab, "count_tokens", lambda *args: pytest.fail("counted again"))
    assert np.array_equal(vocab.plan(64, WordTokenizer(), {63}, tmp_path / "vocab", environ).kept, plan.kept)
    assert vocab.plan(64, WordTokenizer(), {63}, tmp_path / "vocab", {}).kept is None


# ---- the setting -------------------------------------------------------------------------------


@pytest.mark.parametrize(("value", "size"), [("", None), ("full", None), ("FULL", None), ("32768", 32768),
                                             ("32k", 32768), ("65,536", 65536), ("64K", 65536)])
def test_the_setting_reads_full_or_a_number_of_tokens(value, size):
    assert vocab.asked({vocab.VOCAB_ENV: value}) == size


@pytest.mark.parametrize("value", ["lots", "-5", "100", "32m", "0"])
def test_a_mistaken_setting_is_one_line_naming_what_it_takes(value):
    with pytest.raises(SpecVizError) as raised:
        vocab.asked({vocab.VOCAB_ENV: value})
    message = str(raised.value)
    assert "\n" not in message and vocab.VOCAB_ENV in message and "full" in message and "32768" in message


def test_a_mistaken_setting_stops_a_load_before_any_model_loads(monkeypatch):
    monkeypatch.setenv(vocab.VOCAB_ENV, "lots")
    monkeypatch.setattr(models.weights, "load_bundled_target", lambda say: pytest.fail("loaded a model"))
    with pytest.raises(models.ModelLoadError) as raised:
        models.load_pair(DEFAULT_PRESET)
    assert "\n" not in str(raised.value) and vocab.VOCAB_ENV in str(raised.value)


def test_a_runs_name_says_its_draft_vocabulary():
    assert vocab.tag(None) == "" and vocab.tag(32768) == "v32k" and vocab.tag(5000) == "v5000"


# ---- coverage ----------------------------------------------------------------------------------


def test_coverage_is_the_share_of_tokens_the_kept_rows_could_have_drafted():
    assert vocab.coverage([1, 2, 3], [1, 1, 4, 2]) == 0.75
    assert vocab.coverage(torch.tensor([1, 2, 3]), [5, 6]) == 0.0
    assert vocab.coverage(KEPT, []) == 1.0


# ---- named apart in the study, measured apart in pass-costs -------------------------------------


def test_a_study_run_with_the_smaller_layer_is_a_pair_of_its_own():
    from specviz.decoding.drafts import DEFAULT_DRAFT, DraftSpec
    from specviz.study.report import model_preset
    from specviz.study.runner import study_name

    assert study_name("pair-a", DEFAULT_DRAFT, None) == "pair-a"
    assert study_name("pair-a", DEFAULT_DRAFT, 32768) == "pair-a+model-v32k"
    assert study_name("pair-a", DraftSpec.of("hybrid"), 65536) == "pair-a+hybrid-v64k"
    assert study_name("pair-a", DraftSpec.of("lookup"), 32768) == "pair-a+lookup"  # runs no draft model
    assert model_preset("pair-a+model-v32k") == "pair-a"


def test_pass_costs_measures_a_set_up_with_the_smaller_layer_when_told_at_sign_size(monkeypatch):
    from specviz import settings
    from specviz.study import passcosts

    monkeypatch.delenv(vocab.VOCAB_ENV, raising=False)
    assert passcosts._known("kquant@32k") and passcosts._known("bf16/int4@64k") and passcosts._known("kquant")
    with passcosts._forced("bf16/int4@32k"):
        assert vocab.asked() == 32768 and settings.read(cpu.DRAFT_SETUP_ENV) == "int4"
    assert vocab.asked() is None
    with pytest.raises(SpecVizError, match=vocab.VOCAB_ENV):
        passcosts._known("kquant@lots")

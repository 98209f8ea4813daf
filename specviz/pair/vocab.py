"""A smaller draft output layer: the draft computes logits for the most frequent tokens only.

Why: a draft call reads every weight once, and on Qwen2.5-Coder-0.5B the output layer is a
quarter of them (151,936 x 896 of 494 M parameters). FR-Spec (arXiv 2502.14856) keeps the rows of
a frequency-ranked subset of the vocabulary; the draft then reads 32,768 of those rows per call,
not 151,936. The target still verifies on the full vocabulary, so the answer is unchanged.

How: draft_head.KeptVocabHead replaces the draft's output layer by a Linear over the kept rows
and gives full-vocabulary logits back, -inf outside them. Everything that reads the draft's logits
(the drafters, the oracle, the what-if replay) is unchanged: the softmax over the full vocabulary
is then the softmax over the subset, and a token outside it is never drafted (probability 0). The
head is put in before the precision set-up (`models._load_preset`), which then converts the kept
rows as it would have in the full layer: int4, bf16 and SpecViz's 4-bit codes convert a row on its
own (the bundled int8 draft's scale is per layer: the kept rows'), and the K-quant kernel computes
a channel from its own tile and the row alone, so there a kept token's logit is the bits the full
layer gives it; torch's float products give the same value to rounding. The precision set-up is
chosen first, on the full draft, so that runs with and without the smaller layer differ in that
layer alone.

Which rows: `SPECVIZ_DRAFT_VOCAB` (`full`, the default, or a number of tokens, e.g. 32768 or 32k),
rounded up to whole tiles of 16 rows (the K-quant kernel's); the pair's EOS ids and the
tokenizer's special tokens (the chat template's) always, then the most frequent tokens
(`Frequencies.ranking`): by a corpus that ships with Python itself, the running interpreter's
standard library sources (code and English docstrings), tokenized with the pair's tokenizer once
and cached in the model cache by the tokenizer's hash and the Python version, and by the
tokenizer's own order, in turns. Never the study's prompts or answers: those are what the subset
is judged on (`coverage`; this module loads no torch, so the study's report may use it).

Counted at load rather than shipped as a ranking file: it serves any pair's tokenizer, and the
count takes about 7 s of one core, once (14 MB of sources, 3.2 M tokens for Qwen's tokenizer). The
price: the ranking moves a little with the Python version, which the set-up's line names.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import platform
import re
import sysconfig
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .. import settings
from ..errors import SpecVizError

VOCAB_ENV = "SPECVIZ_DRAFT_VOCAB"
FULL = "full"
SMALLEST = 256  # fewer rows would leave little but the special tokens
TILE = 16  # the K-quant kernel's (and int4's) output channels per tile: kept rows come in whole tiles
FILES_PER_BATCH = 64


def asked(environ: Mapping[str, str] | None = None) -> int | None:
    """How many tokens SPECVIZ_DRAFT_VOCAB keeps: None for the full layer (unset or `full`), else a
    count (`32768`, `32k` = 32 x 1024). Anything else is a one-line SpecVizError."""
    raw = settings.read(VOCAB_ENV, environ)
    value = raw.lower().replace("_", "").replace(",", "")
    if value in ("", FULL):
        return None
    match = re.fullmatch(r"(\d+)(k?)", value)
    size = int(match[1]) * (1024 if match[2] else 1) if match else 0
    if size < SMALLEST:
        raise SpecVizError(f"{VOCAB_ENV}={raw!r} is not a draft vocabulary: set it to {FULL} or a number of "
                           f"tokens of at least {SMALLEST} (e.g. 32768 or 32k).")
    return size


def tag(size: int | None) -> str:
    """How a run's name says the draft's vocabulary: "" for the full layer, else "v32k" (or "v5000")."""
    if size is None:
        return ""
    return f"v{size // 1024}k" if size % 1024 == 0 else f"v{size}"


# ---- the kept rows -------------------------------------------------------------------------


def kept_ids(ranking: Sequence[int] | np.ndarray, size: int, always: Iterable[int], rows: int) -> np.ndarray:
    """The ids to keep, ascending: every id of `always` (EOS, special tokens) below `rows`, then the
    most frequent of `ranking` (ids, most frequent first), `size` in all rounded up to whole tiles
    of TILE, at most `rows`."""
    count = min(rows, -(-max(size, 1) // TILE) * TILE)
    chosen = dict.fromkeys(i for i in sorted(set(always)) if 0 <= i < rows)
    for token in (int(i) for i in ranking):
        if len(chosen) >= count:
            break
        if 0 <= token < rows:
            chosen.setdefault(token)
    for token in range(rows):  # a ranking short of `count` (a tiny corpus): the lowest ids fill it
        if len(chosen) >= count:
            break
        chosen.setdefault(token)
    return np.array(sorted(chosen), dtype=np.int64)


def coverage(kept: Iterable[int], token_ids: Iterable[int]) -> float:
    """The share of `token_ids` (e.g. the target's tokens of a suite's recorded answers) that the
    `kept` ids (a list, an array, a tensor) could have drafted; 1.0 for no tokens."""
    keep = set(kept.tolist() if hasattr(kept, "tolist") else kept)
    tokens = list(token_ids)
    return sum(token in keep for token in tokens) / len(tokens) if tokens else 1.0


# ---- token frequencies over a corpus that ships with Python ---------------------------------


@dataclass(frozen=True)
class Frequencies:
    """How often each token id occurs in a corpus, and what that corpus was."""

    counts: np.ndarray  # int64, one per id
    corpus: str  # for the set-up's line: "Python 3.11.7's standard library"

    def ranking(self) -> np.ndarray:
        """Every id once, most frequent first: the corpus's order (equal counts by id) and the
        tokenizer's own (by id) in turns, each id where it first comes.

        Why both: the corpus is code and its docstrings, which rank code's tokens well and prose's
        poorly (it has 31,899 distinct tokens of Qwen's 151,936); a BPE vocabulary's ids follow its
        merge order, itself a frequency ranking on the tokenizer's own (broader) training text. On
        the real pair's recorded answers, 32,768 tokens so chosen (special tokens left out) covered
        97.4% of the coding suite's tokens (the corpus's order alone 97.5%, ids alone 93.7%) and
        91.8% and 88.7% of the questions' and summaries' (87.1%, 81.2%; 93.9%, 90.9%): docs/SETUP.md."""
        by_corpus = np.argsort(-self.counts, kind="stable")
        turns = np.stack([by_corpus, np.arange(len(self.counts))], axis=1).reshape(-1)
        _, first = np.unique(turns, return_index=True)
        return turns[np.sort(first)]

    def covered(self, kept: np.ndarray) -> float:
        """The share of the corpus's tokens that are kept."""
        total = int(self.counts.sum())
        return float(self.counts[kept].sum()) / total if total else 1.0


def stdlib_files(root: Path | None = None) -> list[Path]:
    """The standard library's Python sources, by path: no site-packages, no test suites."""
    root = root or Path(sysconfig.get_paths()["stdlib"])
    skipped = {"site-packages", "dist-packages", "test", "tests", "__pycache__"}
    return sorted(p for p in root.rglob("*.py") if not skipped & set(p.relative_to(root).parts))


def count_tokens(tokenizer: object, texts: Iterable[str], rows: int) -> np.ndarray:
    """How often each id below `rows` occurs in `texts`, tokenized without special tokens, a batch
    of texts at a time (the tokenizers library encodes a batch on all cores)."""
    counts = np.zeros(rows, dtype=np.int64)
    backend = getattr(tokenizer, "backend_tokenizer", None)  # the tokenizers library's, where it has one
    texts = iter(texts)
    while batch := list(itertools.islice(texts, FILES_PER_BATCH)):
        if backend is not None:
            encoded = [one.ids for one in backend.encode_batch(batch, add_special_tokens=False)]
        else:
            encoded = [tokenizer.encode(text, add_special_tokens=False) for text in batch]
        ids = np.fromiter((i for one in encoded for i in one), dtype=np.int64)
        counts += np.bincount(ids[(ids >= 0) & (ids < rows)], minlength=rows)
    return counts


def tokenizer_hash(tokenizer: object) -> str:
    backend = getattr(tokenizer, "backend_tokenizer", None)
    text = backend.to_str() if backend is not None else json.dumps(sorted(tokenizer.get_vocab().items()))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def frequencies(tokenizer: object, rows: int, cache: Path | None) -> Frequencies:
    """The token counts of the standard library's sources, from `cache` where counted before (a few
    seconds of one core for the real pair's tokenizer: 14 MB of sources)."""
    version = platform.python_version()
    corpus = f"Python {version}'s standard library"
    path = None if cache is None else cache / f"stdlib-{version}-{tokenizer_hash(tokenizer)}-{rows}.npy"
    if path is not None and path.is_file():
        return Frequencies(np.load(path), corpus)
    texts = (p.read_text(encoding="utf-8", errors="replace") for p in stdlib_files())
    counts = count_tokens(tokenizer, texts, rows)
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        staging = path.with_name(f"{path.stem}.tmp-{os.getpid()}.npy")
        np.save(staging, counts)
        os.replace(staging, path)
    return Frequencies(counts, corpus)


def special_ids(tokenizer: object) -> set[int]:
    """The tokenizer's special and added tokens (a chat template's <|im_start|>, <|im_end|>, ...)."""
    ids = set(getattr(tokenizer, "all_special_ids", None) or ())
    ids.update(getattr(tokenizer, "added_tokens_decoder", None) or {})
    return {int(i) for i in ids}


@dataclass(frozen=True)
class Plan:
    """The rows SPECVIZ_DRAFT_VOCAB keeps of a draft's output layer (None: all), and the model line's words."""

    kept: np.ndarray | None  # the kept ids, ascending (kept_ids)
    line: str = ""


def plan(rows: int, tokenizer: object, eos_ids: Iterable[int], cache: Path | None,
         environ: Mapping[str, str] | None = None) -> Plan:
    """Which of an output layer's `rows` the draft keeps, as SPECVIZ_DRAFT_VOCAB asks."""
    size = asked(environ)
    if size is None:
        return Plan(None)
    if size >= rows:
        return Plan(None, f"draft output layer full ({VOCAB_ENV}={size} is at least its {rows:,} tokens)")
    found = frequencies(tokenizer, rows, cache)
    kept = kept_ids(found.ranking(), size, set(eos_ids) | special_ids(tokenizer), rows)
    return Plan(kept, f"draft output layer {len(kept):,} of {rows:,} tokens ({found.covered(kept):.1%} of the "
                      f"tokens of {found.corpus})")

"""Where the kept records live, and how their names read. Pure: no torch.

Records are kept in one folder at the top of the repository, `results/`, apart from the prose of
docs/, each named so that a reader (and the code) can tell what it holds without opening it:

    results/study/<pair>-<draft>-<cpu>-<date>[-<n>]/      one run of `python -m specviz study`
    results/bench/<what>-<pair>-<cpu>-<date>[-<n>].<ext>  one benchmark's output

- pair: the preset run (`--preset`); a run of several presets joins them with "+"
  (`smollm2-135m-int8+smollm2-135m-bf16`);
- draft: what drafted, `model` (the pair's draft model), `lookup` (`--draft lookup`) or `hybrid`
  (`--draft hybrid`); a draft model with a smaller output layer adds its size, `model-v32k`
  (SPECVIZ_DRAFT_VOCAB=32k, pair/vocab.py), as the records' pair names do;
- cpu: the machine's kind, `cpu_kind` of the CPU its meta.json names: epyc-avx2, epyc-avx512,
  xeon-amx, ...;
- date: the day (UTC) the run started, its meta.json's first invocation (a benchmark: the day it
  was measured); n: 2, 3, ... for a later run that would otherwise get the same name;
- what (benchmarks only): one of BENCH_KINDS.

A study folder holds what the run wrote (results.jsonl, meta.json, comparisons/, results.csv) and
its own report, STUDY.md. The page of record, docs/STUDY.md, is made from every run folder here
(`python -m specviz study --report-only --out results/study/* --report docs/STUDY.md`). A command
that reads a fixed set of runs finds their names in results/index.json (`indexed`), never in code.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
RESULTS = REPO / "results"
STUDY_RESULTS = RESULTS / "study"
BENCH_RESULTS = RESULTS / "bench"
INDEX = RESULTS / "index.json"
BENCH_KINDS = ("llamacpp", "pass-costs", "feeding")  # scripts/bench_llamacpp.py, pass-costs, scripts/bench_feeding.py

_TAIL = r"-(?P<draft>[a-z0-9]+(?:-v\d+k?)?)-(?P<cpu>[a-z0-9]+-[a-z0-9]+)-(?P<date>\d{4}-\d\d-\d\d)(?:-(?P<n>[2-9]|[1-9]\d+))?"
_RUN = re.compile(r"(?P<pair>[a-z0-9][a-z0-9.+-]*?)" + _TAIL)
_BENCH = re.compile(r"(?P<what>" + "|".join(BENCH_KINDS) + r")-(?P<pair>[a-z0-9][a-z0-9.+-]*?)-"
                    r"(?P<cpu>[a-z0-9]+-[a-z0-9]+)-(?P<date>\d{4}-\d\d-\d\d)(?:-(?P<n>[2-9]|[1-9]\d+))?\.(?P<ext>\w+)")


@dataclass(frozen=True)
class RunName:
    """A kept run's name, parsed (`parse_run`) or made (`str`)."""

    pair: str
    draft: str
    cpu: str
    date: str
    n: int = 1

    @property
    def presets(self) -> tuple[str, ...]:
        return tuple(self.pair.split("+"))

    def __str__(self) -> str:
        return f"{self.pair}-{self.draft}-{self.cpu}-{self.date}" + (f"-{self.n}" if self.n > 1 else "")


def parse_run(name: str) -> RunName:
    """A study folder's name read by the scheme; ValueError for a name that does not follow it."""
    match = _RUN.fullmatch(name)
    if match is None:
        raise ValueError(f"{name!r} is not <pair>-<draft>-<cpu kind>-<yyyy-mm-dd>[-<n>] (specviz/study/folders.py)")
    return RunName(match["pair"], match["draft"], match["cpu"], match["date"], int(match["n"] or 1))


@dataclass(frozen=True)
class BenchName:
    """A kept benchmark output's name, parsed (`parse_bench`)."""

    what: str
    pair: str
    cpu: str
    date: str
    n: int
    ext: str


def parse_bench(name: str) -> BenchName:
    """A benchmark file's name read by the scheme; ValueError for a name that does not follow it."""
    match = _BENCH.fullmatch(name)
    if match is None:
        raise ValueError(f"{name!r} is not <what>-<pair>-<cpu kind>-<yyyy-mm-dd>[-<n>].<ext> with <what> one of "
                         f"{', '.join(BENCH_KINDS)} (specviz/study/folders.py)")
    return BenchName(match["what"], match["pair"], match["cpu"], match["date"], int(match["n"] or 1), match["ext"])


def cpu_kind(described: str) -> str:
    """A machine's kind as names carry it, from the CPU a run recorded (`cpu.machine().describe()`,
    e.g. "AMD EPYC (avx512_bf16, avx512f, avx2)" -> epyc-avx512): the processor's family and the
    widest unit among its flags (amx, avx512, avx2). Older records name no flags: then the
    family alone ("AMD EPYC" -> epyc), and the log says which kind it was."""
    name, flags = described.lower(), ""
    if name.endswith(")") and " (" in name:  # "<model name> (<flags>)"; a model name may hold "(R)"
        name, _, flags = name[:-1].rpartition(" (")
    words = re.findall(r"[a-z0-9]+", name.replace("(r)", " ").replace("(tm)", " "))
    family = next((w for w in ("epyc", "xeon", "ryzen", "core") if w in words), words[0] if words else "cpu")
    listed = [] if flags.startswith("no ") else re.findall(r"[a-z0-9_]+", flags)  # "(no AVX2)"
    unit = next((u for u in ("amx", "avx512", "avx2") if any(f.startswith(u) for f in listed)), None)
    return f"{family}-{unit}" if unit else family


def study_runs(root: Path = STUDY_RESULTS) -> list[Path]:
    """Every run folder under `root`, by name; a folder whose name does not follow the scheme is
    an error (ValueError), not skipped."""
    folders = sorted(p for p in root.iterdir() if p.is_dir()) if root.is_dir() else []
    for folder in folders:
        parse_run(folder.name)
    return folders


def indexed(key: str, index: Path = INDEX) -> list[str]:
    """The run names results/index.json lists under `key`: a fixed set of runs a command reads."""
    names = json.loads(index.read_text(encoding="utf-8"))[key]
    for name in names:
        parse_run(name)
    return list(names)

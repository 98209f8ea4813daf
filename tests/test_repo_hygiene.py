"""What is committed stays portable and in its place (issue 56): no absolute path of the machine
that made a file, records included; docs/ holds prose and the few pictures it shows, the records
live in results/ under names that say what they hold. Reads files only: no model, no torch."""

from __future__ import annotations

import gzip
import json
import re
import subprocess
from pathlib import Path

import pytest

from specviz.study.folders import (
    BENCH_RESULTS,
    INDEX,
    STUDY_RESULTS,
    cpu_kind,
    indexed,
    parse_bench,
    parse_run,
    study_runs,
)

ROOT = Path(__file__).resolve().parents[1]
# A path under a machine's own folders: a home (/root, /home, /Users), a checkout or scratch place
# (/work, /mnt, /srv, /scratch, /data, /tmp, macOS's /var/folders), or a Windows home; at the start
# of a word, so `<package>/data/part01.bin` is not one. /usr/bin/time or /proc/cpuinfo name no
# machine of ours and pass.
ABSOLUTE = re.compile(rb"(?:^|[\s\"'`(=\[,:;])(?P<root>/(?:root|home|Users|work|mnt|srv|scratch|data|tmp|var/folders)/"
                      rb"|[A-Za-z]:\\{1,2}Users\\)", re.MULTILINE)
# Allowed: tests/, whose inputs are such paths on purpose (how recorded commands are made portable,
# what a preset name may not be), and /tmp/ in Markdown, a throwaway folder a documented command
# writes to (BENCHMARKS.md's study on Ray) that no record keeps.
TMP_IN_PROSE = b"/tmp/"
NOT_TEXT = {".png", ".jpg", ".jpeg", ".gif", ".webp", ".ico"}
RECORDS = (".json", ".jsonl", ".csv", ".gz")
DOCS_MAX_BYTES, DOCS_MAX_FILES = 3_000_000, 60


def tracked() -> list[str]:
    try:
        listed = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout: nothing to say what is committed")
    return [name for name in listed.decode("utf-8").split("\0") if name and (ROOT / name).is_file()]


def machine_paths(name: str, data: bytes) -> list[str]:
    """The machine folders `data` names (their roots, e.g. /home/), but those allowed in a file so named."""
    found = [m["root"] for m in ABSOLUTE.finditer(data)]
    return [f.decode("utf-8", "replace") for f in found if not (name.endswith(".md") and f == TMP_IN_PROSE)]


@pytest.mark.slow
def test_no_tracked_file_names_a_machines_own_folders():
    found = {}
    for name in tracked():
        path = ROOT / name
        if name.startswith("tests/") or path.suffix in NOT_TEXT:
            continue
        data = path.read_bytes()
        if name.endswith(".gz"):
            data = gzip.decompress(data)
        if paths := machine_paths(name, data):
            found[name] = paths[:3]
    assert not found, f"absolute paths of a machine (store them relative to the repository): {found}"


def test_the_check_sees_what_it_is_for():
    assert machine_paths("meta.json", b'"command": "study --out /work/main/docs/study --report /tmp/x.md"') == [
        '/work/', '/tmp/']
    assert machine_paths("x.md", b"--out /tmp/study-ray/one, cache in /home/ann/.cache") == ["/home/"]
    assert machine_paths("x.py", b"`<package>/data/partNN.bin`, /usr/bin/time, ~/.cache/specviz") == []
    assert machine_paths("x.json", rb'{"path": "C:\\Users\\ann\\sv"}') == ["C:\\\\Users\\"]


def test_docs_hold_prose_and_the_pictures_they_show():
    docs = [name for name in tracked() if name.startswith("docs/")]
    records = [name for name in docs if name.endswith(RECORDS)]
    size = sum((ROOT / name).stat().st_size for name in docs)
    assert not records, f"data records belong in results/, not docs/: {records}"
    assert size < DOCS_MAX_BYTES, f"docs/ holds {size} bytes"
    assert len(docs) <= DOCS_MAX_FILES, f"docs/ holds {len(docs)} files"


def _presets_and_draft(folder: Path) -> tuple[set[str], str]:
    """The pairs a run's records name, and its draft (`_draft_of`)."""
    lines = (folder / "results.jsonl").read_text(encoding="utf-8").splitlines()
    names = {json.loads(line)["preset"] for line in lines if line.strip()}
    drafts = {_draft_of(name) for name in names}
    assert len(drafts) == 1, (folder.name, names)
    return {name.split("+")[0] for name in names}, drafts.pop()


def _draft_of(name: str) -> str:
    """A studied pair's draft as a run's name says it: what follows `+` without the draft's settings
    (`+lookup-n3-k16`: lookup), but for a smaller draft output layer's size (`+model-v32k`:
    model-v32k); nothing: the draft model."""
    _, _, drafted = name.partition("+")
    kind, *tags = drafted.split("-") if drafted else ["model"]
    return "-".join([kind, *(tag for tag in tags if re.fullmatch(r"v\d+k?", tag))])


def test_every_kept_run_is_named_for_what_it_holds():
    runs = study_runs()
    assert runs, "no study runs in results/study"
    for folder in runs:
        name = parse_run(folder.name)
        assert (folder / "results.jsonl").is_file() and (folder / "meta.json").is_file(), folder.name
        presets, draft = _presets_and_draft(folder)
        assert (set(name.presets), name.draft) == (presets, draft), folder.name
        invocations = json.loads((folder / "meta.json").read_text(encoding="utf-8"))["invocations"]
        assert min(inv["started"] for inv in invocations)[:10] == name.date, folder.name
        for inv in (inv for inv in invocations if "cpu" in inv):  # an older record names no flags: its family
            kind = cpu_kind(inv["cpu"])
            assert name.cpu == kind or ("-" not in kind and name.cpu.split("-")[0] == kind), (folder.name, kind)


def test_every_kept_benchmark_is_named_for_what_it_holds():
    files = sorted(p for p in BENCH_RESULTS.iterdir() if p.is_file()) if BENCH_RESULTS.is_dir() else []
    for path in files:
        name = parse_bench(path.name)
        if path.suffix != ".json":
            continue
        data = json.loads(path.read_text(encoding="utf-8"))
        cpus = {entry.get("cpu") for entry in (data if isinstance(data, list) else [data]) if isinstance(entry, dict)}
        for described in cpus - {None}:
            assert cpu_kind(described) == name.cpu, (path.name, described)


def test_results_hold_study_runs_benchmarks_and_their_index_only():
    assert sorted(p.name for p in STUDY_RESULTS.parent.iterdir()) == sorted(
        ["README.md", INDEX.name, STUDY_RESULTS.name, BENCH_RESULTS.name])
    for key, value in json.loads(INDEX.read_text(encoding="utf-8")).items():
        if isinstance(value, list):
            assert all((STUDY_RESULTS / run).is_dir() for run in indexed(key)), key


def test_names_read_back_as_they_were_made():
    name = parse_run("smollm2-135m-int8+smollm2-135m-bf16-model-epyc-avx512-2026-12-07-2")
    assert (name.presets, name.draft, name.cpu, name.date, name.n) == (
        ("smollm2-135m-int8", "smollm2-135m-bf16"), "model", "epyc-avx512", "2026-12-07", 2)
    made = "qwen2.5-coder-1.5b-lookup-xeon-amx-2026-12-05"
    assert str(parse_run(made)) == made
    reduced = parse_run("qwen2.5-coder-1.5b-model-v32k-xeon-amx-2026-12-08")  # a smaller draft output layer
    assert (reduced.presets, reduced.draft, reduced.cpu) == (("qwen2.5-coder-1.5b",), "model-v32k", "xeon-amx")
    assert [_draft_of(n) for n in ("a", "a+lookup-n3-k16", "a+model-v32k", "a+hybrid-v64k")] == [
        "model", "lookup", "model-v32k", "hybrid-v64k"]
    assert cpu_kind("Intel(R) Xeon(R) Processor (amx_bf16, avx512_bf16, avx512f, avx2)") == "xeon-amx"
    assert cpu_kind("AMD EPYC (avx2)") == "epyc-avx2" and cpu_kind("AMD EPYC") == "epyc"
    bench = parse_bench("pass-costs-qwen2.5-coder-1.5b-epyc-avx2-2026-12-07.json")
    assert (bench.what, bench.pair, bench.cpu, bench.date, bench.ext) == (
        "pass-costs", "qwen2.5-coder-1.5b", "epyc-avx2", "2026-12-07", "json")
    for wrong in ("study-xeon", "qwen2.5-coder-1.5b-model-epyc-avx2-2026-12-6", "x-model-epyc-avx2-2026-12-06-1"):
        with pytest.raises(ValueError):
            parse_run(wrong)

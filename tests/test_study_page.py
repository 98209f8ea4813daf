"""The study's page of record (issue 45): docs/STUDY.md is what `study --report-only` makes from
the kept result folders (every run in results/study), per pair the latest complete run; README quotes only what it holds; and
no generated doc names a machine's own paths. Fast: records only, no model."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import pytest

from specviz.cli import main
from specviz.study.folders import study_runs
from specviz.study.records import ModeResult, PromptResult, RoundRecord
from specviz.study.runner import REPO, Selection, _command_line, page_of_record_text, recorded_command

PAGE = REPO / "docs" / "STUDY.md"
FIGURE = re.compile(r"\b\d+\.\d\dx\b")
# an option given an absolute path: `--out /work/...`, `--report=/tmp/...`, quoted or not
ABSOLUTE_OPTION = re.compile(r"--[a-z][\w-]*(?:=|\s+)['\"]?/")


def _mode(policy: str, label: str, rounds: list[tuple[int, int]]) -> ModeResult:
    drafted = sum(k for k, _ in rounds)
    draft_s, verify_s = 0.01 * drafted, 0.05 * len(rounds)
    return ModeResult(label, policy, 40, len(rounds), drafted, sum(a for _, a in rounds), draft_s + verify_s,
                      draft_s, verify_s, True,
                      [RoundRecord(k, a, [0.9] * a + [0.2] * (k - a)) for k, a in rounds])


def _record(preset: str, suite: str, index: int, finished: str, costaware: bool) -> PromptResult:
    modes = [_mode("static", "static k=5", [(5, 2)] * 10), _mode("heuristic", "heuristic k0=5", [(5, 3)] * 12),
             _mode("dynamic", "dynamic t=0.4", [(3, 2)] * 11)]
    if costaware:
        modes.append(_mode("costaware", "cost-aware", [(3, 3)] * 10))
    modes.append(_mode("oracle", "oracle", [(k, k) for k in (1, 6, 2, 7, 0, 5, 3, 6)]))
    return PromptResult(preset, suite, f"{suite}-{index}", index, 40, 12, 40, 2.0, 9.0, False, 2, finished, modes)


def _folder(path: Path, cpu: str, setup: str | None, day: str, runs: dict[str, list[str]],
            costaware: bool = False) -> None:
    """A result folder as a run leaves it: results.jsonl, and meta.json whose one invocation typed
    absolute paths (as commands were recorded before issue 45)."""
    path.mkdir()
    records = [_record(preset, suite, i, f"{day}T10:0{i}:00+00:00", costaware)
               for preset, suites in runs.items() for suite in suites for i in range(2)]
    (path / "results.jsonl").write_text("".join(r.to_json() + "\n" for r in records), encoding="utf-8")
    invocation = {"command": f"python -m specviz study --out /home/someone/specviz/{path.name} --report /tmp/x.md",
                  "started": f"{day}T09:00:00+00:00", "finished": f"{day}T11:00:00+00:00", "cpu": cpu, "cores": 2,
                  "torch_threads": 2, "prompts_run": len(records), "prompts_skipped": 0}
    if setup:
        invocation["setups"] = {preset: setup for preset in runs}
    (path / "meta.json").write_text(json.dumps({"invocations": [invocation]}), encoding="utf-8")


def _row(page: str, start: str) -> list[str]:
    line = next(line for line in page.splitlines() if line.startswith(f"| {start} |"))
    return [cell.strip() for cell in line.strip("|").split("|")][1:]


def test_the_page_shows_each_pairs_latest_complete_run_and_links_the_others(tmp_path, capsys):
    _folder(tmp_path / "old", "Old CPU", None, "2026-01-01", {"pair-a": ["coding", "questions"],
                                                             "pair-b": ["coding", "questions"]})
    _folder(tmp_path / "new", "New CPU", "target bf16; draft int4", "2026-02-01",
            {"pair-a": ["coding", "questions"]}, costaware=True)
    _folder(tmp_path / "newest", "New CPU", "target bf16; draft int4", "2026-03-01", {"pair-a": ["coding"]})
    page_path = tmp_path / "docs" / "STUDY.md"
    assert main(["study", "--report-only", "--out", str(tmp_path / "old"), str(tmp_path / "new"),
                 str(tmp_path / "newest"), "--report", str(page_path)]) == 0
    page = page_path.read_text(encoding="utf-8")

    # the newest run lacks a suite: the one before it is current for pair-a; pair-b has only one
    assert _row(page, "run") == ["[ELSEWHERE/new](../new/results.jsonl), 2026-02-01",
                                 "[ELSEWHERE/old](../old/results.jsonl), 2026-01-01"]
    assert _row(page, "machine") == ["New CPU, 2 cores, 2 torch threads", "Old CPU, 2 cores, 2 torch threads"]
    assert _row(page, "set-up") == ["target bf16; draft int4", "not recorded"]
    assert _row(page, "The dynamic rule (threshold 0.4) beats the heuristic schedule") == ["**reproduced**"] * 2
    cost_aware = _row(page, "The cost-aware rule beats dynamic 0.4 and the heuristic and keeps up with the best "
                            "threshold in hindsight")
    assert cost_aware[0] in ("**holds**", "**does not hold**") and cost_aware[1] == "not checked"
    earlier = page.split("## Earlier runs")[1].split("## The rules")[0]
    assert "- pair-a: [ELSEWHERE/newest](../newest/results.jsonl), 2026-03-01 (incomplete: no questions)" in earlier
    assert "- pair-a: [ELSEWHERE/old](../old/results.jsonl), 2026-01-01 (superseded by a newer run)" in earlier
    assert "pair-b" not in earlier
    assert "| coding | " in page.split("## Speedups")[1] and "## pair-a" in page and "## pair-b" in page
    # the page names no machine's folders, and writes nothing into the result folders
    assert str(tmp_path) not in page and "--out OUT ELSEWHERE/new ELSEWHERE/newest" in page
    assert not (tmp_path / "old" / "results.csv").exists()


def test_several_folders_need_report_only_and_a_page(tmp_path, capsys):
    assert main(["study", "--report-only", "--out", str(tmp_path / "a"), str(tmp_path / "b")]) == 2
    assert "Several --out folders make the page of record" in capsys.readouterr().err


def test_commands_are_recorded_with_paths_relative_to_the_repository(tmp_path, monkeypatch):
    # an older record, typed with absolute paths on another machine whose checkout sat elsewhere
    typed = ("python -m specviz study --suites /home/bob/sv/assets/prompts/coding.jsonl --limit 10 "
             "--out /home/bob/sv/docs/study --report /tmp/study-STUDY.md")
    assert recorded_command(typed, REPO / "docs" / "study") == (
        "python -m specviz study --suites assets/prompts/coding.jsonl --limit 10 --out docs/study "
        "--report ELSEWHERE/study-STUDY.md")
    assert recorded_command("python -m specviz study --out=/scratch/run --report /scratch/run/S.md",
                            tmp_path / "run") == "python -m specviz study --out=OUT --report OUT/S.md"
    # a command typed now, from a folder inside the repository, with relative and absolute paths
    monkeypatch.chdir(REPO / "docs")
    argv = ["study", "--report-only", "--out", "study", str(REPO / "docs" / "study-xeon"), "--report", "STUDY.md",
            "--suites", "../assets/prompts/coding.jsonl"]
    assert _command_line(argv, Path("study")) == ("python -m specviz study --report-only --out docs/study "
                                                  "docs/study-xeon --report docs/STUDY.md --suites "
                                                  "assets/prompts/coding.jsonl")


def _generated_docs() -> list[Path]:
    return sorted({PAGE, *REPO.glob("docs/**/STUDY.md"), *REPO.glob("results/study/*/STUDY.md")})


def test_no_generated_doc_gives_an_option_an_absolute_path():
    found = [f"{path.relative_to(REPO)}: {match.group(0)}" for path in _generated_docs()
             for match in ABSOLUTE_OPTION.finditer(path.read_text(encoding="utf-8"))]
    assert len(_generated_docs()) >= 2 and not found, found


def _page_command(page: str) -> str:
    return re.search(r"made from the kept records by `(python -m specviz study --report-only [^`]+)`", page).group(1)


@pytest.mark.slow
def test_the_page_of_record_is_what_its_command_makes():
    """docs/STUDY.md is never edited by hand: the command it names, run now on the kept records,
    writes it exactly (after a new run or a change to the report, run that command)."""
    page = PAGE.read_text(encoding="utf-8")
    command = _page_command(page)
    words = shlex.split(command)
    outs = words[words.index("--out") + 1:words.index("--report")]
    report = REPO / words[words.index("--report") + 1]
    assert report == PAGE and len(outs) > 1
    assert page_of_record_text([REPO / o for o in outs], report, Selection(None, None, None, None), command) == page


def test_the_page_of_record_reads_every_kept_run():
    """The page's command names every run folder in results/study, and only those: a new run is
    on the page once its folder is there and the command is run again (`--out results/study/*`)."""
    words = shlex.split(_page_command(PAGE.read_text(encoding="utf-8")))
    outs = words[words.index("--out") + 1:words.index("--report")]
    assert sorted(outs) == sorted(p.relative_to(REPO).as_posix() for p in study_runs())


def test_the_page_names_the_cost_aware_verdict_of_every_pair_that_ran_it():
    page = PAGE.read_text(encoding="utf-8")
    policies = _row(page, "policies")
    verdicts = _row(page, "The cost-aware rule beats dynamic 0.4 and the heuristic and keeps up with the best "
                          "threshold in hindsight")
    assert any("cost-aware" in p for p in policies)
    for ran, cell in zip(policies, verdicts, strict=True):
        # the rule is judged against dynamic 0.4 and the heuristic: a run without them cannot check it
        judged = all(policy in ran for policy in ("cost-aware", "dynamic", "heuristic"))
        assert cell in (("**holds**", "**does not hold**") if judged else ("not checked",)), ran
    assert any(cell != "not checked" for cell in verdicts)


READERS_DOCS = [REPO / "README.md", *(REPO / "docs" / name for name in ("GUIDE.md", "SETUP.md", "CLI-AND-API.md"))]


def _readme_paragraphs_citing_the_page() -> list[str]:
    """The paragraphs of README and of the docs pages written for readers that cite the page."""
    texts = [path.read_text(encoding="utf-8") for path in READERS_DOCS]
    return [p for text in texts for p in re.split(r"\n\s*\n", text) if "STUDY.md#verdicts" in p]


def test_readme_quotes_only_figures_the_page_of_record_holds():
    """Every speedup (N.NNx) in a paragraph of README (or the docs pages for readers) that cites
    docs/STUDY.md is on that page, so none can keep a figure the page no longer shows."""
    page = PAGE.read_text(encoding="utf-8")
    paragraphs = _readme_paragraphs_citing_the_page()
    assert any("docs/STUDY.md#verdicts" in p for p in paragraphs)
    missing = [(figure, p[:80]) for p in paragraphs for figure in FIGURE.findall(p) if figure not in page]
    assert not missing, missing


def _timed(preset: str, suite: str, walls: dict[str, float]) -> PromptResult:
    """A prompt whose target-only decoding took 2 s and each policy the given seconds."""
    modes = [ModeResult(policy, policy, 40, 20, 0, 20, wall, 0.0, wall, True, [RoundRecord(1, 1, [1.0])] * 20)
             for policy, wall in walls.items()]
    return PromptResult(preset, suite, f"{suite}-0", 0, 40, 12, 40, 2.0, 9.0, False, 2, "2026-12-05T10:00:00+00:00",
                        modes)


def _per_draft(lines: list[str]) -> list[str]:
    """The draft section's tables of one draft against the model draft (before "Which draft for")."""
    return lines[:next(i for i, line in enumerate(lines) if line.startswith("**Which draft for"))]


def test_the_draft_section_names_the_faster_draft_and_the_policy_that_suits_lookup():
    from specviz.study.report import Run, draft_section, suited_policy

    model = Run("docs/m", "m", None, "pair-a", [_timed("pair-a", "coding", {"static": 4.0, "dynamic": 2.5}),
                                                _timed("pair-a", "questions", {"static": 4.0, "dynamic": 2.2})], 0, [])
    lookup_walls = {"editing": {"static": 1.0, "dynamic": 1.25, "costaware": 1.1, "oracle": 0.5},
                    "coding": {"static": 2.5, "dynamic": 1.9, "costaware": 1.8, "oracle": 1.0},
                    "questions": {"static": 3.0, "dynamic": 2.05, "costaware": 2.0, "oracle": 1.5}}
    lookup = Run("docs/l", "l", None, "pair-a+lookup",
                 [_timed("pair-a+lookup", suite, walls) for suite, walls in lookup_walls.items()], 0, [])
    lines = _per_draft(draft_section({"pair-a": model, "pair-a+lookup": lookup}))
    text = "\n".join(lines)
    rows = {line.split("|")[1].strip(): [c.strip() for c in line.strip("|").split("|")[1:]]
            for line in lines if line.startswith("| ") and not line.startswith("| suite")}
    assert rows["editing"] == ["not run", "static 2.00x", "n/a", "n/a"]
    assert rows["coding"] == ["dynamic 0.80x", "costaware 1.11x", "1.39", "lookup"]
    assert rows["questions"] == ["dynamic 0.91x", "costaware 1.00x", "1.10", "lookup"]
    # static is fastest on editing but falls to 0.67x on questions: it does not know to stop
    assert "**costaware**: at or above 0.95x on every suite (its slowest 1.00x) and the fastest practical policy on " \
           "2 of 3 suites" in text
    assert suited_policy([]) == (None, "no practical policy stays at or above 0.95x on every suite")
    slow = Run("docs/s", "s", None, "pair-b+lookup", [_timed("pair-b+lookup", "coding", {"static": 2.5})], 0, [])
    assert "no practical policy stays at or above 0.95x" in "\n".join(draft_section({"pair-b+lookup": slow}))
    assert draft_section({"pair-a": model}) == []
    # the model draft's run on another machine does not count: two machines' timings do not compare
    elsewhere = Run("docs/m2", "m2", None, "pair-a", model.records, 0, [{"cpu": "another CPU", "cores": 2}])
    lines = _per_draft(draft_section({"pair-a": elsewhere, "pair-a+lookup": lookup}, [elsewhere, lookup]))
    assert "model draft (not studied on this machine)" in "\n".join(lines)
    assert all(line.split("|")[2].strip() == "not run" for line in lines if line.startswith("| coding"))
    lines = draft_section({"pair-a": elsewhere, "pair-a+lookup": lookup}, [model, elsewhere, lookup])
    assert any(line.startswith("| coding | dynamic 0.80x") for line in lines)  # the run on the same machine


def test_which_draft_names_the_fastest_draft_per_suite_on_one_machine():
    from specviz.study.report import Run, draft_section

    model = Run("results/m", "m", None, "pair-a", [_timed("pair-a", "coding", {"static": 4.0, "dynamic": 2.5}),
                                                   _timed("pair-a", "questions", {"static": 1.6, "dynamic": 2.2})], 0, [])
    hybrid = Run("results/h", "h", None, "pair-a+hybrid", [_timed("pair-a+hybrid", "coding", {"static": 1.6}),
                                                           _timed("pair-a+hybrid", "questions", {"static": 1.8})], 0, [])
    smaller = Run("results/v", "v", None, "pair-a+hybrid-v32k",
                  [_timed("pair-a+hybrid-v32k", "coding", {"static": 1.5, "oracle": 0.5})], 0, [])
    lines = draft_section({"pair-a": model, "pair-a+hybrid": hybrid, "pair-a+hybrid-v32k": smaller})
    table = lines[lines.index(next(line for line in lines if line.startswith("**Which draft for pair-a**"))):]
    assert table[2] == "| suite | model draft | hybrid | hybrid-v32k | fastest draft |"
    rows = {line.split("|")[1].strip(): [c.strip() for c in line.strip("|").split("|")[1:]]
            for line in table if line.startswith("| ") and not line.startswith("| suite")}
    # 2 s of target-only decoding over each policy's wall time; the oracle never counts
    assert rows["coding"] == ["dynamic 0.80x", "static 1.25x", "static 1.33x", "hybrid-v32k"]
    assert rows["questions"] == ["static 1.25x", "static 1.11x", "not run", "model draft"]
    assert any(line.startswith("| coding | dynamic 0.80x | static 1.25x | 1.56 | hybrid |") for line in lines)
    assert not any("suits this lookup draft" in line for line in lines)  # that rule is lookup's alone
    # within 3% of each other: even (two runs of a day differ by about that)
    close = Run("results/c", "c", None, "pair-a+lookup", [_timed("pair-a+lookup", "coding", {"static": 2.45})], 0, [])
    lines = draft_section({"pair-a": model, "pair-a+lookup": close})
    assert any(line.startswith("| coding | dynamic 0.80x | static 0.82x | 1.02 | even |") for line in lines)
    assert "| coding | dynamic 0.80x | static 0.82x | even: lookup, model draft |" in lines


def test_without_a_complete_run_the_run_over_the_most_suites_is_current():
    from specviz.study.report import Run, current_runs

    broad = Run("docs/b", "b", None, "pair-a", [_timed("pair-a", suite, {"static": 1.0})
                                                for suite in ("coding", "summarization", "questions")], 0, [])
    newer = _timed("pair-a", "editing", {"static": 1.0})
    newer.finished = "2026-12-06T10:00:00+00:00"
    small = Run("docs/s", "s", None, "pair-a", [newer, _timed("pair-a", "coding", {"static": 1.0})], 0, [])
    assert current_runs([broad, small])["pair-a"] is broad  # neither has every suite: the broader one
    everything = Run("docs/e", "e", None, "pair-a", [_timed("pair-a", suite, {"static": 1.0}) for suite in
                                                     ("editing", "coding", "summarization", "questions")], 0, [])
    assert current_runs([broad, small, everything])["pair-a"] is everything  # a complete run wins

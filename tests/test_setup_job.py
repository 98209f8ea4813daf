"""The real pair's set-up as the server's background job (pair/setup_job.py), on tiny wheel parts served
from a local folder (pip --no-index --find-links, as SPECVIZ_WHEELS_FROM sets it): its stages in order,
a cancel mid-download and mid-unpack that leaves the cache clean for the next set-up, a wrong hash and
no network each one line, two callers sharing one job; and what the page, the API and a Space's
start-up read from it."""

from __future__ import annotations

import re
import socket
import threading
from pathlib import Path

import pytest

from specviz.pair import presets, setup_job, weights, wheel_parts
from specviz.pair.setup_job import RETRY, SetUpJob, SetUpState
from tests.tiny_gguf import TinyFiles, leftovers, sha256_of, tiny_pair_files, use_tiny_pair

PRESET = presets.REAL_PAIR_PRESET
JOB_TIMEOUT_S = 120


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> TinyFiles:
    return tiny_pair_files(tmp_path_factory.mktemp("tiny-pair-job"))


@pytest.fixture
def cache(tmp_path, monkeypatch, tiny) -> Path:
    return use_tiny_pair(monkeypatch, tmp_path / "cache", tiny)


def local_index(tiny: TinyFiles) -> list[str]:
    return ["--no-index", "--find-links", str(tiny.wheels)]


def watched(job: SetUpJob, monkeypatch, when=None) -> list[str]:
    """The stages the job reports, in order (each once per run of it); `when(stage, calls)` may act
    (cancel) as a stage is reported for the `calls`-th time."""
    seen: list[str] = []
    calls: dict[str, int] = {}
    report = job._report

    def recording(preset: str, stage: str, done: int, total: int) -> None:
        calls[stage] = calls.get(stage, 0) + 1
        if not seen or seen[-1] != stage:
            seen.append(stage)
        if when is not None:
            when(stage, calls[stage])
        report(preset, stage, done, total)

    monkeypatch.setattr(job, "_report", recording)
    return seen


def run(job: SetUpJob, tiny: TinyFiles, requirements: Path | None = None,
        pip_args: list[str] | None = None) -> SetUpState:
    job.start(PRESET, requirements or tiny.requirements, local_index(tiny) if pip_args is None else pip_args)
    job.wait(JOB_TIMEOUT_S)
    state = job.state(PRESET)
    assert not state.running, state
    return state


@pytest.mark.slow
def test_the_job_runs_the_stages_in_order_and_ends_ready(cache, tiny, monkeypatch):
    job = SetUpJob()
    assert job.state(PRESET).phase == "not set up"
    seen = watched(job, monkeypatch)
    state = run(job, tiny)
    assert state.phase == "ready" and state.line() == f"The real pair {PRESET} is set up."
    # The tiny target keeps no K-quant codes (its SetUpModel says so): no "pack" stage here.
    assert seen == ["download", "join", "verify", "join", "verify", "unpack"], seen
    assert weights.pair_set_up(PRESET) and leftovers(cache) == []
    assert (cache / "tiny-target-fp32" / "config.json").is_file()
    again = SetUpJob()
    assert again.state(PRESET).phase == "ready" and again.start(PRESET).phase == "ready"  # nothing to do


@pytest.mark.slow
def test_progress_is_a_record_the_page_reads(cache, tiny, monkeypatch):
    job = SetUpJob()
    records: list[SetUpState] = []
    watched(job, monkeypatch, when=lambda stage, calls: records.append(job.state(PRESET)))
    run(job, tiny)
    joining = [r for r in records if r.stage == "join" and r.total_bytes]
    assert joining and all(0.0 <= r.stage_fraction <= 1.0 for r in records)
    assert all(r.running for r in records) and "Setting up" in records[-1].line()
    assert records[-1].elapsed_s >= 0 and set(records[-1].to_dict()) >= {"phase", "stage", "stage_fraction",
                                                                         "done_bytes", "total_bytes", "message"}


@pytest.mark.parametrize("stage, at_call", [("download", 2), ("join", 2), ("unpack", 2), ("unpack", 3)],
                         ids=["mid-download", "mid-join", "mid-unpack-read", "mid-unpack-saved"])
@pytest.mark.slow
def test_a_cancel_leaves_the_cache_clean_and_the_next_set_up_succeeds(cache, tiny, monkeypatch, stage, at_call):
    """download, 2nd report: pip is running (its first check for a cancel); join, 2nd: after the first
    chunk; unpack, 2nd: the target's model read, not saved; 3rd: saved under its temporary name."""
    job = SetUpJob()
    watched(job, monkeypatch, when=lambda s, calls: job.cancel() if (s, calls) == (stage, at_call) else None)
    state = run(job, tiny)
    assert state.phase == "cancelled" and "nothing was kept" in state.line() and RETRY in state.line()
    assert leftovers(cache) == [] and not weights.pair_set_up(PRESET)
    assert not (cache / "tiny-target-fp32").exists()
    assert run(SetUpJob(), tiny).phase == "ready" and leftovers(cache) == []


def test_a_wrong_hash_is_one_line_naming_the_part(cache, tiny, tmp_path):
    text = tiny.requirements.read_text()
    first = re.search(r"sha256:([0-9a-f]{64})", text).group(1)
    bad = tmp_path / "bad-wheels.txt"
    bad.write_text(text.replace(first, "0" * 64, 1))
    state = run(SetUpJob(), tiny, requirements=bad)
    real = sha256_of(tiny.wheels / "tiny_target_part1-0.1.0-py3-none-any.whl")
    assert state.phase == "failed" and "\n" not in state.message
    assert f"tiny-target-part1==0.1.0 has sha256 {real}" in state.message and RETRY in state.message
    assert "scripts/setup.sh" not in state.message  # the page's way to try again, not the shell's
    assert leftovers(cache) == [] and state.line().startswith(f"The set-up of {PRESET} failed: ")


def test_no_network_is_one_line(cache, tiny):
    with socket.socket() as s:  # a port nothing listens on: connections are refused at once
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    state = run(SetUpJob(), tiny, pip_args=["--index-url", f"http://127.0.0.1:{port}/simple", "--retries", "0",
                                           "--timeout", "2"])
    assert state.phase == "failed" and "\n" not in state.message
    assert "pip could not download" in state.message and "network" in state.message and RETRY in state.message
    assert leftovers(cache) == []


@pytest.mark.slow
def test_two_callers_share_one_job(cache, tiny, monkeypatch):
    job = SetUpJob()
    downloads: list[Path] = []
    release = threading.Event()
    download = wheel_parts.download

    def held(*args, **kwargs):
        downloads.append(args[1])
        release.wait(30)  # the first caller's job waits here while the second asks
        return download(*args, **kwargs)

    monkeypatch.setattr(wheel_parts, "download", held)
    first = job.start(PRESET, tiny.requirements, local_index(tiny))
    second = job.start(PRESET, tiny.requirements, local_index(tiny))
    assert first.running and second.running and second.preset == PRESET
    release.set()
    job.wait(JOB_TIMEOUT_S)
    assert job.state(PRESET).phase == "ready" and len(downloads) == 1


def test_cancel_with_nothing_running_changes_nothing(cache):
    job = SetUpJob()
    assert job.cancel().phase == "not set up"


def test_the_wheels_come_from_pypi_unless_a_folder_is_named(monkeypatch):
    monkeypatch.delenv("SPECVIZ_WHEELS_FROM", raising=False)
    assert setup_job.wheels_source() == []
    monkeypatch.setenv("SPECVIZ_WHEELS_FROM", "/some/folder")
    assert setup_job.wheels_source() == ["--no-index", "--find-links", "/some/folder"]


def test_an_unexpected_error_is_one_line_too():
    assert "\n" not in setup_job.one_line(OSError(28, "No space left on device\nmore"))
    assert "No space left on device" in setup_job.one_line(OSError(28, "No space left on device"))
    line = setup_job.one_line(wheel_parts.SpecVizError(f"bad.\nrun {wheel_parts.SETUP_COMMAND} again."))
    assert "\n" not in line and RETRY in line


# ---- what the page, the API and a Space's start-up read -----------------------------------------------


def test_the_api_reports_the_pairs_state_as_data(cache):
    from specviz.ui import api

    state = api.pair_state(PRESET)
    assert state["phase"] == "not set up" and state["loaded"] == "not loaded" and "not set up" in state["line"]
    bundled = api.pair_state(presets.BUILTIN_DEFAULT_PRESET)
    assert bundled["phase"] == "ready" and bundled["line"] == ""
    with pytest.raises(wheel_parts.SpecVizError, match="Unknown preset"):
        api.pair_state("no-such-pair")


def test_the_panel_shows_only_for_a_pair_not_set_up(cache, tiny):
    from specviz.ui import setup_panel

    hidden = setup_panel.panel(presets.BUILTIN_DEFAULT_PRESET)
    assert hidden[0].visible is False
    shown = setup_panel.panel(PRESET)
    assert shown[0].visible is True and shown[2].visible is True and shown[3].visible is False
    assert "1.57 GB" in shown[1] and "disk" in shown[1] and "minutes" in shown[1]


@pytest.mark.parametrize("env, expected", [
    ({}, False),
    ({"SPACE_ID": "owner/space"}, True),
    ({"SPACE_ID": "owner/space", "SPECVIZ_SET_UP_AT_START": "0"}, False),
    ({"SPECVIZ_SET_UP_AT_START": "1"}, True),
])
def test_a_space_whose_default_is_the_real_pair_sets_it_up_at_start(monkeypatch, env, expected):
    from specviz.ui import server_state

    monkeypatch.setattr(server_state, "DEFAULT_PRESET", PRESET)
    assert server_state.setting_up_at_start(env) is expected
    monkeypatch.setattr(server_state, "DEFAULT_PRESET", presets.BUILTIN_DEFAULT_PRESET)
    assert server_state.setting_up_at_start(env) is False  # a bundled default needs no set-up


def test_the_bundled_pair_serves_until_the_set_up_is_done(cache, monkeypatch):
    from specviz.ui import server_state

    monkeypatch.setattr(server_state, "DEFAULT_PRESET", PRESET)
    monkeypatch.setenv("SPECVIZ_SET_UP_AT_START", "1")
    job = SetUpJob()
    monkeypatch.setattr(server_state, "JOB", job)
    assert server_state.serving_default() == presets.BUILTIN_DEFAULT_PRESET  # not begun, or running
    job._state[PRESET] = SetUpState(PRESET, "failed", message="no network")
    assert server_state.serving_default() == PRESET  # the pair's own fallback: the hub's copies
    monkeypatch.setattr(weights, "pair_set_up", lambda name: True)
    assert server_state.serving_default() == PRESET


def test_without_a_c_compiler_the_model_line_says_the_target_runs_on_its_fallback(monkeypatch, tmp_path):
    """kquant.build raises "no C compiler" where neither $CC, cc nor gcc is found: the pair still loads, and
    the reason the K-quant set-up passed (which leads the model line's set-up) says so in one clause."""
    from specviz.pair import cpu, kquant
    from specviz.pair.setups import kquant_codes

    monkeypatch.delenv("CC", raising=False)
    monkeypatch.setattr(kquant.shutil, "which", lambda name: None)
    kernel, why_not = kquant_codes.kquant_kernel(cpu.Machine("test CPU", False, frozenset({"avx2", "fma"})), tmp_path)
    assert kernel is None and "\n" not in why_not
    assert "no C compiler" in why_not and "fallback set-up" in why_not

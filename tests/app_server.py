"""Start and stop `python app.py` on a free port, for the browser and server tests and the
timing script: one copy of the start-up loop, the Chromium location and its flags."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = "/usr/bin/chromium"
# Debian's Chromium, headless as root; without the networking flags it tries to reach Google's
# hosts at every start, which this machine refuses.
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]


class AppDidNotStart(RuntimeError):
    pass


@dataclass(frozen=True)
class Served:
    """A running app: its process, its URL and its log file."""

    proc: subprocess.Popen
    url: str
    log_path: Path


class LogSince:
    """An app's log from the moment this was made on. Modules share one app server, so each checks
    only the lines its own tests caused (a test elsewhere may have made Gradio log a traceback of its
    own input checks on purpose)."""

    def __init__(self, path: Path):
        self.path = path
        self.start = path.stat().st_size if path.exists() else 0

    def read_text(self) -> str:
        with open(self.path, "rb") as log:
            log.seek(self.start)
            return log.read().decode("utf-8", errors="replace")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_app(log_path: Path, timeout_s: float = 120, script: str = "app.py",
              **env_extra: str) -> tuple[subprocess.Popen, str]:
    """Start the app (`script`: app.py, or a test's stand-in for it) with its output in `log_path`;
    return the process and its URL once it serves."""
    port = free_port()
    # The app's temporary files (downloads, Gradio's cache) stay beside its log, so pytest's own
    # clean-up of old runs removes them instead of /tmp filling with every run's copies.
    scratch = log_path.parent / "tmp"
    scratch.mkdir(exist_ok=True)
    env = dict(os.environ, GRADIO_ANALYTICS_ENABLED="False", PYTHONUNBUFFERED="1", TMPDIR=str(scratch),
               GRADIO_TEMP_DIR=str(scratch / "gradio"), **env_extra)
    env.pop("GRADIO_SERVER_PORT", None)
    with open(log_path, "w") as log:
        proc = subprocess.Popen([sys.executable, script, "--port", str(port)], cwd=ROOT, env=env,
                                stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}/"
    deadline = time.monotonic() + timeout_s
    while True:
        if proc.poll() is not None:
            raise AppDidNotStart(f"{script} exited with {proc.returncode}:\n{log_path.read_text()[-3000:]}")
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                if response.status == 200:
                    return proc, url
        except OSError:
            pass
        if time.monotonic() > deadline:
            stop_app(proc)
            raise AppDidNotStart(f"{script} did not serve within {timeout_s:.0f} s:\n{log_path.read_text()[-3000:]}")
        time.sleep(0.5)


@contextmanager
def serving(folder: Path, **env_extra: str) -> Iterator[Served]:
    """The app, started with its log in `folder`, for the length of a `with` block."""
    proc, url = start_app(folder / "app.log", **env_extra)
    try:
        yield Served(proc, url, folder / "app.log")
    finally:
        stop_app(proc)


def stop_app(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def set_box(box, text: str, key: str = "Tab", tries: int = 3) -> None:
    """Type `text` into a Gradio input (a Playwright locator), commit it with `key`, and check that it
    holds. An event that finishes just as a box first mounts (an accordion opened right after a run)
    can put the box's old value back: a front-end race a person typing does not meet, but a test
    that types within milliseconds does; it then ran the wrong settings and failed far away."""
    for _ in range(tries):
        box.fill(text)
        box.press(key)
        box.page.wait_for_timeout(300)
        if _same(box.input_value(), text):
            return
    raise AssertionError(f"the box holds {box.input_value()!r} after {text!r} was typed {tries} times")


def _same(shown: str, typed: str) -> bool:
    """The box shows what was typed ("0" for "0.0" counts: number boxes re-format)."""
    try:
        return shown == typed or float(shown) == float(typed)
    except ValueError:
        return False

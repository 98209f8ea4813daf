"""The set-up's heavy steps, unpacking a GGUF and packing its K-quant codes, in a child process.

Why a child: the unpacking is minutes of Python (the GGUF reader's numpy dequantization, saving
safetensors) that held the GIL the serving thread needs, so a run on the bundled pair waited 1.1-3.6 s
for its first coloured token while the page's set-up unpacked (2-core AMD EPYC, 2026-12-07; setup_job.py
has the figures with the child). A child
holds its own GIL, runs one torch thread, and inherits the calling thread's priority (the page's set-up
job runs at nice 19, setup_job.py); its several GB of dequantized weights go back to the system when it
ends, not to the server's heap.

The protocol is JSON lines: the parent writes a step on the child's stdin; the child answers on its
stdout (what libraries print there is sent to its stderr, which goes to a log file). At each of the
unpacking's checkpoints the child asks and waits for "go" or "stop", so a cancel stops it exactly where
it stopped in the same process: before the save, or before the rename, and the child's own clean-up
deletes what it staged before it answers. Its last message is "done", "cancelled" or an error, which the
parent raises as the same kind of error (SpecVizError, OSError, SetUpCancelled).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Self

from ..errors import SpecVizError
from .wheel_parts import SETUP_COMMAND, SetUpCancelled

logger = logging.getLogger(__name__)

_PACKAGE_ROOT = Path(__file__).resolve().parents[2]  # the folder that holds specviz/, for the child's imports


class ChildSteps:
    """One child process for one set-up's steps, started at the first step; use it in a `with`."""

    def __init__(self) -> None:
        self._child: subprocess.Popen | None = None
        self._log = None

    def __enter__(self) -> Self:
        return self

    def __exit__(self, kind, error, traceback) -> None:
        self.close()

    def unpack(self, folder: Path, gguf_file: str, destination: Path, checkpoint: Callable[[], None]) -> None:
        """unpack.unpack_gguf in the child; `checkpoint` is called at each of its checkpoints and
        stops the child there when it raises."""
        self._run({"step": "unpack", "folder": str(folder), "gguf_file": gguf_file,
                   "destination": str(destination)}, checkpoint)

    def pack(self, gguf_path: Path, destination: Path) -> None:
        """kquant.pack_gguf in the child."""
        self._run({"step": "pack", "gguf_path": str(gguf_path), "destination": str(destination)}, lambda: None)

    def close(self) -> None:
        """End the child. Killing it is safe between steps (each step answers once its files are whole
        or deleted), and within one it is what the server's own exit would do: what it staged has its
        pid in its name, and the next set-up deletes it (wheel_parts.remove_stale_temporaries). A
        child let to exit on its own spends a second tearing torch down."""
        child, self._child = self._child, None
        if child is not None:
            child.kill()
            child.wait()
            for stream in (child.stdin, child.stdout):
                with contextlib.suppress(OSError):  # a dead child's pipe: what was not sent stays unsent
                    stream.close()
        if self._log is not None:
            self._log.close()
            self._log = None

    def start(self) -> None:
        """Start the child now (else at the first step): it imports torch and transformers meanwhile."""
        if self._child is None:
            self._child = self._spawn()

    def _spawn(self) -> subprocess.Popen:
        self._log = tempfile.TemporaryFile()  # noqa: SIM115 - open while the child runs; close() closes it
        path = os.pathsep.join(p for p in (str(_PACKAGE_ROOT), os.environ.get("PYTHONPATH", "")) if p)
        env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": path, "PYTHONUNBUFFERED": "1"}
        return subprocess.Popen([sys.executable, "-m", "specviz.pair.child_steps"], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=self._log, env=env, text=True, bufsize=1)

    def _run(self, step: dict, checkpoint: Callable[[], None]) -> None:
        self.start()
        self._send(step)
        while True:
            message = self._receive()
            if "checkpoint" not in message:
                return _outcome(message)
            try:
                checkpoint()
            except BaseException:
                self._send("stop")
                self._receive()  # "cancelled", once the child has deleted what it staged
                raise
            self._send("go")

    def _send(self, message: dict | str) -> None:
        try:
            self._child.stdin.write(json.dumps(message) + "\n")
            self._child.stdin.flush()
        except BrokenPipeError:
            raise self._died() from None

    def _receive(self) -> dict:
        line = self._child.stdout.readline()
        if not line:
            raise self._died()
        return json.loads(line)

    def _died(self) -> SpecVizError:
        code = self._child.wait()
        self._log.seek(0)
        tail = self._log.read().decode(errors="replace").strip().splitlines()[-20:]
        logger.warning("The set-up's child process ended with %s; its last lines:\n%s", code, "\n".join(tail))
        why = (" (signal 9: most often the memory running out; unpacking a model needs several GB of RAM)"
               if code == -9 else "")
        return SpecVizError(f"The set-up's unpacking stopped: its child process ended with code {code}{why}. "
                            f"Run {SETUP_COMMAND} again.")


def _outcome(message: dict) -> None:
    """Return on "done"; raise the error the child reported, as the same kind of error."""
    if message.get("done"):
        return
    if message.get("cancelled"):
        raise SetUpCancelled("The set-up was cancelled.")
    if message.get("error") == "SpecVizError":
        raise SpecVizError(message["message"])
    if message.get("error") == "OSError":
        raise OSError(message["errno"], message["strerror"], message["filename"])
    raise SpecVizError(f"The set-up's unpacking failed: {message.get('error')}: {message.get('message')}. "
                       f"Run {SETUP_COMMAND} again.")


# ---- the child ----------------------------------------------------------------------------------


def _child_main() -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer  # noqa: F401 - imported before the first step

    from . import kquant, unpack

    answers = os.fdopen(os.dup(sys.stdout.fileno()), "w", buffering=1)
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())  # what libraries print must not enter the protocol
    torch.set_num_threads(1)

    def send(message: dict) -> None:
        answers.write(json.dumps(message) + "\n")

    def ask_parent() -> None:
        send({"checkpoint": True})
        if json.loads(sys.stdin.readline() or '"stop"') != "go":
            raise SetUpCancelled("The set-up was cancelled.")

    while line := sys.stdin.readline():
        step = json.loads(line)
        try:
            if step["step"] == "unpack":
                unpack.unpack_gguf(Path(step["folder"]), step["gguf_file"], Path(step["destination"]), ask_parent)
            else:
                kquant.pack_gguf(Path(step["gguf_path"]), Path(step["destination"]))
            send({"done": True})
        except SetUpCancelled:
            send({"cancelled": True})
        except SpecVizError as error:
            send({"error": "SpecVizError", "message": str(error)})
        except OSError as error:
            send({"error": "OSError", "errno": error.errno, "strerror": error.strerror,
                  "filename": None if error.filename is None else str(error.filename)})
        except Exception as error:  # noqa: BLE001 - reported to the parent, which makes it the page's one line
            send({"error": type(error).__name__, "message": str(error)[:300]})


if __name__ == "__main__":
    _child_main()

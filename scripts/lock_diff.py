"""What differs between the installed packages and requirements.lock (exit 1 if anything does).

    python scripts/lock_diff.py                      pip freeze of this Python against requirements.lock
    python scripts/lock_diff.py --subset A.txt B.txt every pin of A is B's pin (requirements.txt within the lock)

A local version label is left out of the comparison: the lock says torch==2.13.0, which installs the
CPU build 2.13.0+cpu on the project's machines and PyPI's build on a Space. pip, setuptools and wheel
are left out as pip freeze leaves them out; so is SpecViz itself.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from pathlib import Path

PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;#]+)")
NOT_COMPARED = {"pip", "setuptools", "wheel", "specviz"}


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def pins(lines: list[str]) -> dict[str, str]:
    """name -> version of every `name==version` line (comments, options and editable installs skipped)."""
    found = {}
    for line in lines:
        match = PIN.match(line.strip())
        if match and canonical(match.group(1)) not in NOT_COMPARED:
            found[canonical(match.group(1))] = match.group(2).split("+")[0]
    return found


def differences(have: dict[str, str], want: dict[str, str], subset: bool = False) -> list[str]:
    """One line per package that differs; with `subset`, packages of `want` missing from `have` are fine."""
    lines = []
    for name in sorted(have.keys() | want.keys()):
        if name not in want:
            lines.append(f"  + {name}=={have[name]} (not in the lock)")
        elif name not in have:
            if not subset:
                lines.append(f"  - {name}=={want[name]} (locked, not installed)")
        elif have[name] != want[name]:
            lines.append(f"  ~ {name}: {have[name]} installed, {want[name]} locked")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--subset", nargs=2, metavar=("PART", "LOCK"), help="check that PART's pins are LOCK's")
    parser.add_argument("--lock", default="requirements.lock", help="the lock (default requirements.lock)")
    args = parser.parse_args(argv)
    if args.subset:
        part, lock = (Path(p) for p in args.subset)
        found = differences(pins(part.read_text().splitlines()), pins(lock.read_text().splitlines()), subset=True)
        what = f"{part} against {lock}"
    else:
        frozen = subprocess.run([sys.executable, "-m", "pip", "freeze"], check=True, capture_output=True,
                                text=True).stdout.splitlines()
        found = differences(pins(frozen), pins(Path(args.lock).read_text().splitlines()))
        what = f"pip freeze against {args.lock}"
    print(f"{what}: " + ("the same pins" if not found else f"{len(found)} differ"))
    if found:
        print("\n".join(found))
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())

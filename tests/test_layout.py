"""The package's plan holds: imports run one way, from ui and study down to core."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "specviz"


def imported_stages(path: Path) -> set[str]:
    """The subpackages of specviz (core, study, ui) that a module imports from."""
    here = path.relative_to(PACKAGE).parts[:-1]  # () for top-level modules, ("ui",) inside ui/
    stages = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom):
            if node.level:  # relative: climb from the module's own package
                base = list(here[: len(here) - (node.level - 1)]) if node.level - 1 <= len(here) else []
                parts = base + (node.module.split(".") if node.module else [])
            else:
                parts = node.module.split(".")[1:] if node.module and node.module.startswith("specviz") else []
            if not node.module and node.level:  # `from .. import x`: the names are the modules
                parts = [*parts, *(alias.name for alias in node.names)]
            stages.update(parts[:1])
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("specviz."):
                    stages.add(alias.name.split(".")[1])
    return stages & {"core", "study", "ui"}


def test_core_uses_neither_study_nor_ui_and_study_does_not_use_ui():
    allowed = {"core": {"core"}, "study": {"core", "study"}, "ui": {"core", "study", "ui"}}
    for stage, may_use in allowed.items():
        for path in sorted((PACKAGE / stage).glob("*.py")):
            assert imported_stages(path) <= may_use, (path.name, imported_stages(path) - may_use)


def test_the_rule_sees_every_kind_of_import():
    ui = PACKAGE / "ui" / "events.py"
    assert imported_stages(ui) >= {"core", "study", "ui"}
    assert imported_stages(PACKAGE / "ui" / "api.py") >= {"core"}  # `from ..core import pipeline`

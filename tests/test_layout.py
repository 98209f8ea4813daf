"""The package's plan holds: imports run one way, from ui and study down to explain, from explain
down to decoding, and from decoding down to the pair."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "specviz"
# Each stage and the stages it may use: the pair knows nothing of decoding, decoding nothing of
# the explainers, the study or the page; the explainers (what the page shows of a run, and the
# what-if) read decoding's records only, never a model (tests/test_no_torch.py); the page uses the
# explainers, not the study harness.
STAGES = {"pair": {"pair"}, "decoding": {"pair", "decoding"}, "explain": {"decoding", "explain"},
          "study": {"pair", "decoding", "explain", "study"}, "ui": {"pair", "decoding", "explain", "ui"}}


def imported_stages(path: Path) -> set[str]:
    """The subpackages of specviz (pair, decoding, explain, study, ui) that a module imports from."""
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
    return stages & set(STAGES)


def test_each_stage_uses_only_the_stages_below_it():
    for stage, may_use in STAGES.items():
        for path in sorted((PACKAGE / stage).rglob("*.py")):  # its subpackages too (pair/setups/, study/report/)
            assert imported_stages(path) <= may_use, (path.name, imported_stages(path) - may_use)


def test_the_rule_sees_every_kind_of_import():
    ui = PACKAGE / "ui" / "events.py"
    assert imported_stages(ui) >= {"pair", "decoding", "explain", "ui"}
    assert imported_stages(PACKAGE / "ui" / "api.py") >= {"decoding"}  # `from ..decoding import pipeline`
    # from a package within a stage: `from ...explain.costs import X` and `from ..records import X` in study/report/
    assert imported_stages(PACKAGE / "study" / "report" / "figures.py") >= {"explain", "study"}


def sibling_imports(path: Path) -> set[str]:
    """The modules of its own subpackage that a module imports, at run time or for type checking."""
    siblings = {p.stem for p in path.parent.glob("*.py")}
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.level == 1:
            names = [node.module] if node.module else [alias.name for alias in node.names]
            found.update(name.split(".")[0] for name in names if name.split(".")[0] in siblings)
    return found - {path.stem}


def import_circle(graph: dict[str, set[str]]) -> list[str] | None:
    """A circle of imports in `graph` (module -> the modules it imports), or None."""
    done: set[str] = set()

    def visit(module: str, path: tuple[str, ...]) -> list[str] | None:
        if module in path:
            return [*path, module]
        if module in done:
            return None
        for imported in sorted(graph.get(module, ())):
            if (circle := visit(imported, (*path, module))) is not None:
                return circle
        done.add(module)
        return None

    return next((c for c in (visit(m, ()) for m in sorted(graph)) if c is not None), None)


def test_the_modules_of_each_stage_import_one_way_too():
    """No circle inside a stage (the study's report once imported the cost model, which imported
    the report's records): each stage's modules, and those of a package within it (study/report/),
    can be read bottom up."""
    assert import_circle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]  # the check sees one
    for stage in STAGES:
        for folder in sorted({p.parent for p in (PACKAGE / stage).rglob("*.py")}):  # a subpackage on its own
            graph = {p.stem: sibling_imports(p) for p in folder.glob("*.py")}
            assert import_circle(graph) is None, (folder.name, import_circle(graph))


def test_every_module_is_named_in_the_layout_doc():
    """docs/DESIGN.md's layout names every module of the package, so a module added without a
    line there fails here."""
    design = (PACKAGE.parent / "docs" / "DESIGN.md").read_text(encoding="utf-8")
    layout = design[design.index("## Layout"):].split("\n## ")[0]
    modules = sorted(p.relative_to(PACKAGE).as_posix() for p in PACKAGE.rglob("*.py") if p.name != "__init__.py")
    missing = [m for m in modules if Path(m).name not in layout]
    assert not missing, f"not in docs/DESIGN.md's layout: {missing}"


def test_readme_stays_a_card():
    """README is also the Space's card: what the page shows, the headline, the quick start and
    links; the rest lives in docs/."""
    readme = PACKAGE.parent / "README.md"
    assert readme.stat().st_size <= 15_000
    assert (PACKAGE.parent / "docs" / "BENCHMARKS.md").stat().st_size <= 20_000


def test_no_function_in_the_package_is_over_60_lines():
    """A newcomer reads a function whole: the longest in specviz/ fits a screen and a half
    (ruff's C901 at 15, in pyproject.toml, holds their branches)."""
    long = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = node.end_lineno - node.lineno + 1
                if lines > 60:
                    long.append(f"{path.relative_to(PACKAGE)}:{node.lineno} {node.name} ({lines} lines)")
    assert not long, long


def test_every_specviz_variable_is_read_in_settings_and_listed_in_the_docs():
    """SPECVIZ_ variables are read through specviz/settings.py only, and each has a row in
    docs/SETUP.md's table: a new one cannot hide in a module."""
    import re

    from specviz import settings

    named: set[str] = set()
    for path in sorted(PACKAGE.rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        named |= set(re.findall(r"SPECVIZ_[A-Z_]+[A-Z]", text))
        if path.name != "settings.py":
            assert not re.search(r"environ(\.get)?[\[(]\s*[\"']SPECVIZ_", text), path
    assert named == set(settings.VARIABLES)
    table = (PACKAGE.parent / "docs" / "SETUP.md").read_text(encoding="utf-8")
    assert [name for name in settings.VARIABLES if f"| `{name}` |" not in table] == []

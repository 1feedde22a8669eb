"""Imports flow one way (STYLE.md): numerics never see the simulator, and vice versa."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

PACKAGE = Path(__file__).parent.parent / "simfl"


def imported_modules(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return names


# The one-way import graph, as data: what each package or module may not import
# (docs/design.md section 2 states the same table: a test checks).
SIMULATOR = ("simpy", "simfl.sim", "simfl.runs")
FORBIDDEN = {
    "sim": ("torch", "simfl.train", "simfl.aggregate", "simfl.quantile", "simfl.runs"),
    "train": SIMULATOR,
    "aggregate": (*SIMULATOR, "simfl.train"),
    "quantile": (*SIMULATOR, "torch", "simfl.train", "simfl.aggregate"),
    "population": ("torch", "simfl.sim", "simfl.train", "simfl.runs", "simfl.aggregate"),
    "data": (*SIMULATOR, "simfl.train", "simfl.aggregate", "simfl.quantile",
             "simfl.population"),
    "scenario": ("simfl.data", "simfl.population", "simfl.sim", "simfl.train", "torch",
                 "simfl.runs", "simfl.records"),
    "plugins": ("torch", "simpy", "simfl.scenario", "simfl.data", "simfl.population",
                "simfl.sim", "simfl.train", "simfl.aggregate", "simfl.quantile", "simfl.runs"),
    "rng.py": ("simfl.scenario", "simfl.data", "simfl.sim", "simfl.train"),
    "errors.py": ("simfl.",),
    "records": ("torch", "simfl.sim", "simfl.train", "simfl.runs"),
    "rundir.py": ("torch", "simpy", "simfl.sim", "simfl.train", "simfl.runs", "simfl.records"),
    "plots": ("torch", "simfl.sim", "simfl.train", "simfl.runs", "simfl.algorithms"),
    "cli": ("torch", "simpy"),  # at module level: the commands import what they need
    "algorithms": ("torch", "simfl.train", "simfl.quantile", "simfl.runs", "simfl.cli"),
    "metrics.py": ("simfl.", "torch", "simpy"),
    # study reads sweep files through runs.sweep (torch-free), never the run machinery
    "study": ("torch", "simpy", "simfl.sim", "simfl.train", "simfl.runs.run", "simfl.runs.build",
              "simfl.runs.loop", "simfl.runs.manifest", "simfl.runs.plain", "simfl.runs.replay",
              "simfl.runs.checkpoint", "simfl.runs.memory", "simfl.runs.tune",
              "simfl.runs.sweep.execute", "simfl.cli"),
    "tables.py": ("torch", "simpy", "simfl.sim", "simfl.train", "simfl.runs", "simfl.plots"),
    "api.py": ("torch", "simpy", "simfl.sim", "simfl.train", "simfl.cli", "simfl.runs.sweep",
               "simfl.runs.tune"),
    # the run machinery: the package as a whole, then each of its modules
    "runs": ("simfl.api", "simfl.cli", "simfl.plots", "simfl.algorithms"),
    "runs/memory.py": ("simfl.sim", "simfl.runs.run", "simfl.runs.sweep"),
    "runs/replay.py": ("simpy", "simfl.sim", "simfl.runs.run", "simfl.runs.sweep",
                       "simfl.runs.tune"),
    "runs/checkpoint.py": ("simfl.runs.run", "simfl.runs.sweep", "simfl.runs.tune"),
    "runs/plain.py": ("simpy", "simfl.sim", "simfl.runs.run", "simfl.runs.sweep",
                      "simfl.runs.tune"),
    "runs/run.py": ("simfl.runs.sweep", "simfl.runs.tune"),
    "runs/build.py": ("simpy", "simfl.sim", "simfl.runs.run", "simfl.runs.sweep",
                      "simfl.runs.tune"),
    "runs/loop.py": ("simfl.runs.run", "simfl.runs.sweep", "simfl.runs.tune"),
    "runs/manifest.py": ("simpy", "simfl.sim", "simfl.runs.run", "simfl.runs.sweep",
                         "simfl.runs.tune"),
    "runs/sweep": ("torch", "simfl.runs.tune"),
    "runs/tune.py": ("torch", "simpy"),
    "__init__.py": ("torch", "simpy", "simfl.runs", "simfl.sim", "simfl.train"),
    "__main__.py": ("torch", "simpy", "simfl.runs"),
}


def stated(forbidden: tuple[str, ...]) -> str:
    """How docs/design.md's package table states a row of FORBIDDEN."""
    names = ["anything of simfl" if f == "simfl." else
             f"`{f.removeprefix('simfl.')}`" if f.startswith("simfl.") else f
             for f in forbidden]
    return ", ".join(names) or "—"


def test_the_design_document_states_the_same_table() -> None:
    design = (PACKAGE.parent / "docs" / "design.md").read_text()
    rows = {("algorithms" if name.startswith("algorithms") else name): forbidden
            for name, forbidden in re.findall(r"^\| `([\w/.]+?)/?` \| .* \| (.*) \|$",
                                              design, re.M)}
    assert rows == {unit: stated(forbidden) for unit, forbidden in FORBIDDEN.items()
                    if unit not in ("__init__.py", "__main__.py")}


def units_in(folder: Path) -> set[str]:
    """The modules and packages directly in ``folder``."""
    return {p.name for p in folder.iterdir()
            if p.suffix == ".py" or (p / "__init__.py").is_file()}


def test_every_package_and_module_has_a_row() -> None:
    """A new package or top-level module must say what it may not import, and so must a
    new module or package of the run machinery (``runs/``)."""
    runs = {f"runs/{name}" for name in units_in(PACKAGE / "runs") if name != "__init__.py"}
    assert units_in(PACKAGE) | runs == set(FORBIDDEN)


def top_level_imports(path: Path) -> set[str]:
    """Modules imported at module level (not inside functions)."""
    names: set[str] = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return names


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_package_does_not_import_the_other_side(package: str) -> None:
    target = PACKAGE / package
    paths = [target] if target.suffix == ".py" else sorted(target.rglob("*.py"))
    assert paths and all(p.is_file() for p in paths), f"{package}: no such module"
    for path in paths:
        names = top_level_imports(path) if package == "cli" else imported_modules(path)
        for name in names:
            bad = [f for f in FORBIDDEN[package]
                   if name == f.rstrip(".") or name.startswith(f.rstrip(".") + ".")]
            assert not bad, f"{path.relative_to(PACKAGE.parent)} imports {name}"


def test_no_import_cycle_between_packages() -> None:
    """The graph of simfl's packages and top modules (by module-level imports) is acyclic."""
    def unit(name: str) -> str:
        return name.split(".")[1] if name.count(".") >= 1 else name

    graph: dict[str, set[str]] = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE).parts
        source = parts[0].removesuffix(".py")
        for name in top_level_imports(path):
            if name.startswith("simfl.") and unit(name) != source:
                graph.setdefault(source, set()).add(unit(name))
    done: set[str] = set()

    def visit(node: str, path: tuple[str, ...]) -> None:
        assert node not in path, f"import cycle: {' -> '.join((*path, node))}"
        if node in done:
            return
        for child in sorted(graph.get(node, ())):
            visit(child, (*path, node))
        done.add(node)

    for node in sorted(graph):
        visit(node, ())


def test_no_module_imports_another_modules_private_names() -> None:
    """A leading underscore means "this module only": no `from simfl.x import _name`."""
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("simfl"):
                private = [a.name for a in node.names if a.name.startswith("_")]
                assert not private, f"{path.relative_to(PACKAGE.parent)} imports {private}"


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def test_no_import_cycle_between_modules() -> None:
    """No two modules import each other, directly or round a loop, by any import: inside
    functions and under ``TYPE_CHECKING`` too (a package's ``__init__`` re-exporting its
    modules is the one allowed edge back)."""
    modules = {module_name(p): p for p in PACKAGE.rglob("*.py")}
    graph = {}
    for name, path in modules.items():
        targets = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                targets.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module:
                targets.add(node.module)
                targets.update(f"{node.module}.{alias.name}" for alias in node.names)
        graph[name] = sorted(t for t in targets
                             if t in modules and t != name and not name.startswith(t + "."))
    done: set[str] = set()

    def visit(node: str, path: tuple[str, ...]) -> None:
        assert node not in path, f"import cycle: {' -> '.join((*path, node))}"
        if node in done:
            return
        for child in graph[node]:
            visit(child, (*path, node))
        done.add(node)

    for node in sorted(graph):
        visit(node, ())

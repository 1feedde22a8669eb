"""Imports flow one way (STYLE.md): numerics never see the simulator, and vice versa."""

from __future__ import annotations

import ast
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


FORBIDDEN = {
    "sim": ("torch", "simfl.train", "simfl.aggregate"),
    "train": ("simpy", "simfl.sim", "simfl.run"),
    "aggregate": ("simpy", "simfl.sim", "simfl.run"),
    "quantile": ("simpy", "simfl.sim", "simfl.run", "torch"),
    "population": ("torch", "simfl.sim", "simfl.train", "simfl.run"),
}


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_package_does_not_import_the_other_side(package: str) -> None:
    for path in sorted((PACKAGE / package).rglob("*.py")):
        for name in imported_modules(path):
            bad = [f for f in FORBIDDEN[package] if name == f or name.startswith(f + ".")]
            assert not bad, f"{path.relative_to(PACKAGE.parent)} imports {name}"


def test_plots_read_parquet_only() -> None:
    names = imported_modules(PACKAGE / "plots.py")
    assert not {n for n in names if n.split(".")[0] == "torch" or n.startswith("simfl.sim")}

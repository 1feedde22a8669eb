"""docs/design.md stays true to the code: its schema tables list exactly the columns
records.SCHEMAS writes, in order, and its package table names every package."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from simfl.records import SCHEMAS

ROOT = Path(__file__).parents[1]
DESIGN = (ROOT / "docs" / "design.md").read_text()


@pytest.mark.parametrize("table", sorted(SCHEMAS))
def test_every_parquet_table_is_documented_column_by_column(table: str) -> None:
    section = re.search(rf"### {table}\.parquet[^\n]*\n(.*?)(?=\n### |\n## |\Z)", DESIGN, re.S)
    assert section, f"docs/design.md has no section for {table}.parquet"
    documented = re.findall(r"^\| (\w+) \|", section.group(1), re.M)
    assert [c for c in documented if c != "column"] == SCHEMAS[table].names


def test_every_package_and_top_module_is_in_the_package_table() -> None:
    rows = set(re.findall(r"^\| `([\w/.]+)`", DESIGN, re.M))
    rows |= {m for row in re.findall(r"^\| (`[^|]+`) \|", DESIGN, re.M)
             for m in re.findall(r"`([\w/.]+)`", row)}
    simfl = ROOT / "simfl"
    units = {f"{p.name}/" for p in simfl.iterdir() if (p / "__init__.py").is_file()}
    units |= {p.name for p in simfl.glob("*.py")} - {"__init__.py", "__main__.py"}
    units = {u if u != "algorithms/" else "algorithms/drfl/" for u in units}
    assert units <= rows, f"missing from docs/design.md: {sorted(units - rows)}"

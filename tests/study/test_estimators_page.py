"""docs/estimators.md's study tables are what its commands print from the kept runs
(docs/runs/estimators_phones): every table below a ``simfl.study`` command line."""

from __future__ import annotations

from pathlib import Path

import pytest

from simfl.study.docs_tables import page_commands, regenerate, table_below

ROOT = Path(__file__).parents[2]
PAGE = ROOT / "docs" / "estimators.md"


def test_every_study_table_on_the_page_is_its_commands_output(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)
    commands = [c for c in page_commands(Path(".")) if c.page == Path("docs/estimators.md")
                and c.tool is not None]
    assert [c.tool for c in commands] == ["bias_table"] * 3 + ["coverage"] + ["compare"] * 2
    names = [f"{c.name}_{k}.md" for k, c in enumerate(commands, 1)]
    index = regenerate(Path("."), tmp_path, only=names)
    rows = [[c.strip() for c in row.strip("|").split("|", 2)] for row in index[2:]]
    assert sorted(row[0] for row in rows) == sorted(names)
    for name, where, command in rows:
        table = table_below(PAGE, int(where.rsplit(":", 1)[1]))
        assert len(table) >= 3, where
        assert "\n".join(table) in (tmp_path / name).read_text(), (where, command)

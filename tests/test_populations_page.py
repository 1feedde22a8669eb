"""docs/populations.md: each gallery population's `trace stats`, as the page shows it,
is what the command prints now."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from simfl.cli import main

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
@pytest.mark.parametrize("name", ["habits", "phones"])
def test_the_page_shows_what_trace_stats_prints(
        name: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    page = (ROOT / "docs" / "populations.md").read_text()
    block = re.search(rf"<!-- {name} stats: begin -->\n```\n(.*?)\n```\n<!-- {name} stats: end -->",
                      page, re.S)
    assert block is not None
    monkeypatch.chdir(ROOT)
    capsys.readouterr()
    assert main(["trace", "stats", f"scenarios/populations/{name}.toml"]) == 0
    assert capsys.readouterr().out.rstrip() == block.group(1)

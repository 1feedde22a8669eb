"""The README and docs/ describe the software and its results: a README a newcomer reads
in minutes, and no account of how the work was organised anywhere."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
ORGANISATIONAL = re.compile(r"work session|\blent\b|\bissue \d+", re.I)


def test_the_readme_is_at_most_200_lines() -> None:
    assert len((ROOT / "README.md").read_text().splitlines()) <= 200


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_page_speaks_of_how_the_work_was_organised(page: Path) -> None:
    hits = [line for line in page.read_text().splitlines() if ORGANISATIONAL.search(line)]
    assert not hits, hits[:3]

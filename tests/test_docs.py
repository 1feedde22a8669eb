"""The README and docs/ describe the software and its results: a README a newcomer reads
in minutes, no account of how the work was organised anywhere, and no history: a result
carries the command and the kept runs that made it (whose manifests record the version),
not the dates, editions, commits and machines of its making."""

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


# A commit may be named where a registration names the commit that fixed it (the proof
# that it came before its runs: a line or a section that speaks of the registration), or
# as another repository's version (owner/name@commit).
HISTORY = {
    "an edition": re.compile(r"\bedition\b", re.I),
    "a date": re.compile(r"\b20\d\d-\d\d-\d\d\b"),
    "a commit": re.compile(r"(?<![@\w/])(?=[0-9a-f]*[a-f])(?=[0-9a-f]*\d)[0-9a-f]{7,40}\b"),
    "an account of the day": re.compile(
        r"\b(that day|made again on|first made|superseded|later machine|new machine)\b", re.I),
}
# docs/runs/ holds the kept runs and outputs, which record when and at which commit they
# were made; docs/drive.md's registration names its commit and amendments line by line.
HISTORY_PAGES = [p for p in PAGES if "runs" not in p.relative_to(ROOT).parts[1:2]
                 and p != ROOT / "docs" / "drive.md"]


@pytest.mark.parametrize("page", HISTORY_PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_page_tells_history(page: Path) -> None:
    hits, heading = [], ""
    for number, line in enumerate(page.read_text().splitlines(), 1):
        heading = line if line.startswith("#") else heading
        registration = "regist" in (heading + line).lower()
        for what, pattern in HISTORY.items():
            if pattern.search(line) and not (what == "a commit" and registration):
                hits.append(f"line {number} names {what}: {line.strip()[:80]}")
    assert not hits, hits[:5]

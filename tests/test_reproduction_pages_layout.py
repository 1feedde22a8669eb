"""docs/reproduction.md is a short answer page over the evidence pages of
docs/reproduction/: its answer comes first, it lists every evidence page, each evidence
page is short and leads back to it, and every figure the answer quotes stands on an
evidence page the answer links (where the command that prints it is)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[1]
ANSWER = ROOT / "docs" / "reproduction.md"
PAGES = sorted((ROOT / "docs" / "reproduction").glob("*.md"))
LINK = re.compile(r"\]\(([^)#\s]+)(#[^)]*)?\)")


def answer_section() -> str:
    return ANSWER.read_text().split("## The answer, in one screen", 1)[1].split("\n## ", 1)[0]


def test_the_answer_comes_first_and_every_evidence_page_is_listed() -> None:
    text = ANSWER.read_text()
    assert re.findall(r"^## (.+)$", text, re.M)[0] == "The answer, in one screen"
    assert len(text.splitlines()) <= 150
    listed = {(ANSWER.parent / target).resolve() for target, _ in LINK.findall(text)}
    assert {page.resolve() for page in PAGES} <= listed
    assert len(PAGES) >= 8


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_an_evidence_page_is_short_and_leads_back_to_the_answer(page: Path) -> None:
    text = page.read_text()
    assert text.startswith("# ")
    assert "](../reproduction.md" in text
    assert len(text.splitlines()) <= 400


def test_every_figure_of_the_answer_is_on_a_page_it_links() -> None:
    """Each figure and interval bound the answer gives (the one-screen table, the settled
    and open questions, the causes) appears, as printed, on an evidence page the answer
    links: the numbers trace to their commands and kept runs through those pages."""
    section = answer_section()
    linked = [(ANSWER.parent / target).read_text() for target, _ in LINK.findall(section)]
    assert len(linked) >= 5
    for figure in set(re.findall(r"[−+-]?\d+\.\d+(?:e-\d+)?", section)):
        plain = figure.replace("−", "-")
        assert any(figure in page or plain in page for page in linked), figure

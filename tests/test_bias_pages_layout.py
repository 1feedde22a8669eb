"""docs/bias.md is a short answer page over the evidence pages of docs/bias/: its answer
section comes first, every figure it quotes is on a page it links, it lists every
evidence page, every
link of the study's pages resolves, no page is long, and none tells history (editions,
dates, commit hashes, machines) instead of settings."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[1]
ANSWER = ROOT / "docs" / "bias.md"
FOLDER = ROOT / "docs" / "bias"
PAGES = sorted(FOLDER.glob("*.md"))
LINK = re.compile(r"\]\(([^)#\s]+)(#[^)]*)?\)")


def test_the_answer_comes_first_and_every_evidence_page_is_listed() -> None:
    text = ANSWER.read_text()
    headings = re.findall(r"^## (.+)$", text, re.M)
    assert headings[0] == "The answer"
    answer = text.split("## The answer", 1)[1].split("\n## ", 1)[0]
    assert len(answer.splitlines()) <= 60  # one page
    listed = {(ANSWER.parent / target).resolve() for target, _ in LINK.findall(text)}
    assert {page.resolve() for page in PAGES} <= listed
    assert len(PAGES) >= 5


@pytest.mark.parametrize("page", [ANSWER, *PAGES], ids=lambda p: p.name)
def test_every_link_resolves_and_the_page_is_short(page: Path) -> None:
    text = page.read_text()
    for target, _ in LINK.findall(text):
        if "://" not in target:
            assert (page.parent / target).exists(), f"{page.name}: {target}"
    assert len(text.splitlines()) <= 400


HISTORY = {
    "an edition": re.compile(r"\bedition\b", re.I),
    "a date": re.compile(r"\b20\d\d-\d\d-\d\d\b"),
    "a commit": re.compile(r"\b(?=[0-9a-f]*[a-f])(?=[0-9a-f]*\d)[0-9a-f]{7,40}\b"),
    "a machine": re.compile(r"\b(2-core|H100|H200|another machine)\b"),
}


@pytest.mark.parametrize("page", [ANSWER, *PAGES], ids=lambda p: p.name)
def test_no_page_tells_history(page: Path) -> None:
    text = page.read_text()
    for what, pattern in HISTORY.items():
        assert not pattern.search(text), f"{page.name} names {what}: {pattern.search(text)}"


def test_no_other_page_links_a_section_of_the_answer_page() -> None:
    """The evidence moved to docs/bias/: a link to a section of docs/bias.md would dangle."""
    pages = [*ROOT.glob("*.md"), *(ROOT / "docs").glob("*.md")]
    assert all("bias.md#" not in page.read_text() for page in pages)


def test_every_figure_of_the_answer_is_on_a_page_it_links() -> None:
    """The answer quotes the evidence: each signed figure and interval it gives appears on
    one of the pages its paragraph links (the numbers trace to runs through them)."""
    text = ANSWER.read_text()
    answer = text.split("## The answer", 1)[1].split("\n## ", 1)[0]
    for paragraph in answer.split("\n\n"):
        linked = [(ANSWER.parent / t).read_text() for t, _ in LINK.findall(paragraph)
                  if "://" not in t]
        for figure in re.findall(r"[−+-]?\d+\.\d+(?: ± \d+\.\d+)?", paragraph):
            plain = figure.replace("−", "-")
            assert any(figure in page or plain in page for page in linked), figure

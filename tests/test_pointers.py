"""Every pointer a reader follows leads somewhere: the relative links of README.md and
docs/**/*.md, and the file and section pointers of those pages, of the scenarios'
comments and of simfl's messages and docstrings name a file that exists and, where they
name a section, a heading of that file.

A pointer is
- a markdown link ``[text](path#anchor)``: the path exists, relative to its page, and the
  anchor is the GitHub slug of one of the target's headings;
- a path ``docs/....md`` or ``README``: the file exists;
- a section pointer ``FILE, "Section"`` (also ``FILE ("Section")``, ``FILE: "Section"``,
  and ``(FILE: Section)`` for README and docs/ paths) or ``design.md §N``: ``Section`` is
  a heading of FILE (or its words before a colon or a parenthesis), or the bold run-in
  head of one of its paragraphs (``**Section.**``), and §N a numbered heading. A bare
  ``X.md`` is looked up beside the page, then in docs/.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[1]
RUNS = ROOT / "docs" / "runs"
PAGES = [ROOT / "README.md",  # not what the kept runs hold (tune's tuning.md, outputs)
         *(p for p in sorted((ROOT / "docs").rglob("*.md"))
           if RUNS not in p.parents or p == RUNS / "README.md")]
SCENARIOS = sorted([*(ROOT / "scenarios").rglob("*.toml"), *(ROOT / "docs").glob("*.toml")])
CODE = sorted((ROOT / "simfl").rglob("*.py"))

LINK = re.compile(r"\]\(([^)\s]*)\)")
PATH = re.compile(r"(?<![\w/.<-])(docs/[\w/.-]*\.md|README(?:\.md)?)(?![\w/-])")
FILE = r"(README(?:\.md)?|(?<![\w/.-])[\w/.-]+\.md)"
SECTION = re.compile(FILE + r"\]?(?:\([^)\s]*\))?(?:,| \(|:)(?: section)? \"([^\"]+)\"")
RUN_IN = re.compile(r"(README(?:\.md)?|docs/[\w/.-]+\.md): ([A-Z][\w' -]+)\)")
NUMBERED = re.compile(FILE + r"\]?(?:\([^)\s]*\))?,? §(\d+)")


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[`*]", "", heading).strip().lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def headings(path: Path) -> list[str]:
    return [h.strip() for h in re.findall(r"^#+ (.+)$", path.read_text(), re.M)]


def sections(path: Path) -> set[str]:
    """The names a section pointer may give: a heading, its words before a colon or a
    parenthesis ("Outputs" for "Outputs (`results/<run>/`)"), or a paragraph's bold
    run-in head."""
    heads = headings(path)
    short = {h.split(": ")[0] for h in heads} | {h.split(" (")[0] for h in heads}
    run_in = re.findall(r"^(?:- |\d\. )?\*\*([^*\n]+?)\.?\*\*", path.read_text(), re.M)
    return {*heads, *short, *(h.strip() for h in run_in)}


def resolve(name: str, where: Path) -> Path | None:
    """The file a pointer names: README is the repository's; docs/... from the root; a
    bare name beside the page, then in docs/."""
    if name.startswith("README"):
        return ROOT / "README.md"
    for base in ((ROOT,) if name.startswith("docs/") else (where.parent, ROOT / "docs")):
        if (base / name).is_file():
            return base / name
    return None


def flat(path: Path) -> str:
    """The text a reader reads: toml comments only; lines joined, so that a pointer split
    over two lines (of a comment, a docstring or a concatenated string) is one."""
    text = path.read_text()
    if path.suffix == ".toml":
        text = "\n".join(line.split("#", 1)[1] for line in text.splitlines() if "#" in line)
    if path.suffix == ".py":
        text = re.sub(r"\"\s*\n\s*f?\"", "", text)
    return re.sub(r"\s*\n\s*(?:# ?)?", " ", text)


def broken(path: Path) -> list[str]:
    text, bad = flat(path), []
    if path.suffix == ".md":
        for target in LINK.findall(text):
            if "://" in target or target.startswith("mailto:"):
                continue
            name, _, anchor = target.partition("#")
            file = (path.parent / name) if name else path
            if not file.exists():
                bad.append(f"link {target}: no file")
            elif anchor and anchor not in {slug(h) for h in headings(file)}:
                bad.append(f"link {target}: no heading")
    for name in PATH.findall(text):
        if resolve(name, path) is None:
            bad.append(f"{name}: no file")
    for name, section in [*SECTION.findall(text), *RUN_IN.findall(text)]:
        file = resolve(name, path)
        if file is None:
            bad.append(f"{name}: no file")
        elif section.strip() not in sections(file):
            bad.append(f"{name}, \"{section}\": no such section")
    for name, number in NUMBERED.findall(text):
        file = resolve(name, path)
        if file is None or not re.search(rf"^#+ {number}\. ", file.read_text(), re.M):
            bad.append(f"{name} §{number}: no such section")
    return bad


@pytest.mark.parametrize("path", PAGES + SCENARIOS + CODE,
                         ids=lambda p: str(p.relative_to(ROOT)))
def test_every_pointer_names_a_file_and_section_that_exist(path: Path) -> None:
    assert broken(path) == []


def test_the_checker_finds_what_it_should(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text("# A page\n\n## Getting the data\n\n**Threads.** One.\n\n"
                    "[ok](#getting-the-data) [ok](page.md#a-page) [bad](#threads) "
                    "[bad](nowhere.md)\n(page.md, \"Threads\") (page.md, \"Missing\")\n"
                    "docs/nowhere.md, docs/usage.md, \"Getting the data\"\n"
                    "(README: Getting the data) docs/design.md §8, design.md §42\n"
                    "(docs/usage.md: Getting the data) (docs/usage.md: Getting data)\n")
    assert broken(page) == ["link #threads: no heading", "link nowhere.md: no file",
                            "docs/nowhere.md: no file",
                            "page.md, \"Missing\": no such section",
                            "README, \"Getting the data\": no such section",
                            "docs/usage.md, \"Getting data\": no such section",
                            "design.md §42: no such section"]

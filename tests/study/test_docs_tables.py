"""``make docs-tables`` (simfl.study.docs_tables): the study commands a page shows are read
as the page writes them, run for their tables only, skipped with a reason where they
cannot run here, and three cheap ones print the very table their page shows below the
command (the page's command line is the marker)."""

from __future__ import annotations

from pathlib import Path

import pytest

from simfl.study.docs_tables import (
    PageCommand,
    expand_braces,
    page_commands,
    regenerate,
    table_args,
    table_below,
    why_skipped,
)

ROOT = Path(__file__).parents[2]
PAGE = """# A page

    python -m simfl collect scenarios/x.sweep.toml --results docs/runs
    python -m simfl.study.bias_table docs/runs/x --paired a,b \\
        --digits 4

Prose that names `python -m simfl.study.bias_table docs/runs/x` inline is no command.

```
python -m simfl.study.dose RUN_DIR ... [--figure FILE]   # a placeholder
```
"""


def test_a_page_s_commands_are_its_code_lines_with_their_continuations(tmp_path: Path) -> None:
    (tmp_path / "docs" / "sub").mkdir(parents=True)
    (tmp_path / "docs" / "sub" / "page.md").write_text(PAGE)
    found = page_commands(tmp_path)
    assert [(c.line, c.tool, c.text) for c in found] == [
        (3, None, "python -m simfl collect scenarios/x.sweep.toml --results docs/runs"),
        (5, "bias_table", "python -m simfl.study.bias_table docs/runs/x --paired a,b "
                          "--digits 4"),
        (10, "dose", "python -m simfl.study.dose RUN_DIR ... [--figure FILE]   # a placeholder")]
    assert {c.name for c in found} == {"sub_page"}


def test_a_command_is_run_for_its_tables_only() -> None:
    assert table_args("python -m simfl.study.paper_table s.toml --versus f [--weighted] "
                      "--ecdf e.png --scatter s.png --plot-variants a b --by-size 250") == [
        "s.toml", "--versus", "f", "--weighted", "--plot-variants", "a", "b", "--by-size", "250"]
    assert table_args("python -m simfl.study.drivers_table docs/runs/d --versus v "
                      "[--figure docs/figures/d.png]") == ["docs/runs/d", "--versus", "v"]
    assert table_args("python -m simfl.study.dose RUN_DIR ... [--figure FILE]   # note") == [
        "RUN_DIR", "..."]
    # bash's order: the first group varies slowest
    assert expand_braces("r/{sync,async}_{f,d}") == ["r/sync_f", "r/sync_d", "r/async_f",
                                                     "r/async_d"]
    assert expand_braces("docs/runs/x") == ["docs/runs/x"]


@pytest.mark.parametrize(("text", "args", "reason"), [
    ("python -m simfl.study.dose RUN_DIR ...", ["RUN_DIR", "..."], "a placeholder: RUN_DIR"),
    ("python -m simfl.study.exposure docs/runs --keep docs/runs/x", ["docs/runs", "--keep",
                                                                      "docs/runs/x"],
     "--keep writes kept runs"),
    ("python -m simfl.study.same_seed /tmp/none_here docs", ["/tmp/none_here", "docs"],
     "not here: /tmp/none_here"),
    ("python -m simfl.study.bias_table docs/runs/none_here", ["docs/runs/none_here"],
     "not here: docs/runs/none_here"),
    ("python -m simfl.study.paper_table s --versus a/b", ["docs", "--versus", "a/b"], None),
])
def test_a_command_that_cannot_run_here_says_why(text: str, args: list[str],
                                                 reason: str | None) -> None:
    command = PageCommand(Path("docs/p.md"), 1, text, text.split()[2].rsplit(".", 1)[1])
    assert why_skipped(command, args, ROOT) == reason


def test_a_data_command_is_skipped_without_the_data(monkeypatch: pytest.MonkeyPatch) -> None:
    text = "SIMFL_DATA_DIR=../shared/data python -m simfl.study.ipw_rates --days 7"
    command = PageCommand(Path("docs/p.md"), 1, text, "ipw_rates")
    monkeypatch.delenv("SIMFL_DATA_DIR", raising=False)
    assert why_skipped(command, ["--days", "7"], ROOT) == "needs SIMFL_DATA_DIR"
    monkeypatch.setenv("SIMFL_DATA_DIR", "/somewhere")
    assert why_skipped(command, ["--days", "7"], ROOT) is None


# Three cheap commands, each with the table its page shows below it: the family-wise
# reading of the habits page (no runs), the sample-weighted shift of the linear paper runs
# (25 kept runs) and the small drivers sweep against FedAvg (collected from docs/runs).
CHEAP = ("bias_limits_1.md", "reproduction_causes_1.md", "bias_tail_3.md")


def test_three_cheap_tables_are_the_tables_their_pages_show(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)
    index = regenerate(Path("."), tmp_path, only=list(CHEAP))
    rows = [[c.strip() for c in row.strip("|").split("|", 2)] for row in index[2:]]
    assert sorted(row[0] for row in rows) == sorted(CHEAP)
    for name, where, command in rows:
        page, line = where.rsplit(":", 1)
        table = table_below(ROOT / page, int(line))
        assert len(table) > 3, where
        assert "\n".join(table) in (tmp_path / name).read_text(), (where, command)


@pytest.mark.slow
def test_every_command_the_pages_show_runs_or_cannot_run_on_any_clone(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Only placeholders, --keep, data and runs made in /tmp are skipped: a page naming a
    kept run or a sweep file that is not there fails here (ipw_rates: tests/test_ipw_rates)."""
    monkeypatch.chdir(ROOT)
    monkeypatch.delenv("SIMFL_DATA_DIR", raising=False)
    index = regenerate(Path("."), tmp_path)
    reasons = [row.split(" | ")[0].removeprefix("| skipped: ") for row in index[2:]
               if row.startswith("| skipped")]
    assert len(index) - 2 - len(reasons) > 60
    assert [r for r in reasons if not r.startswith(("a placeholder", "--keep", "needs SIMFL",
                                                    "not here: /tmp/"))] == []

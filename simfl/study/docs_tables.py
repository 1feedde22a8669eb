"""Every table the documentation's study commands print, made again from the kept runs
(``make docs-tables``).

    python -m simfl.study.docs_tables [--out build/docs-tables] [--only NAME ...]

The pages are the list: every ``python -m simfl.study.<tool> ...`` command that a page
under docs/ shows as code (an indented or fenced line; a trailing ``\\`` continues it) is
run as the page writes it, from the repository root, and what it prints is written to
``OUT/<page>_<k>.md`` (the page's path under docs/ with ``/`` as ``_``, k its k-th
command), with ``OUT/index.md`` naming each file's command. Before that, each sweep a page
collects (``python -m simfl collect SWEEP --results docs/runs``) is gathered as collect
gathers it, but into ``OUT/runs/<sweep>``, and a command's ``docs/runs/<sweep>`` reads that
folder: docs/runs stays as the clone has it (collect's merged tables there are git-ignored,
yet count in its size budget, tests/test_runs_budget.py).

A command is run for its tables only: the files it would write (``--figure``, ``--ecdf``,
``--scatter``, ``--trajectory``, ``--errors``) are left out, and so is an optional part in
brackets that takes a value (``[--figure FILE]``; a bare ``[--weighted]`` is kept). Shell
braces are expanded (``{sync,async}_fedavg``). It is skipped, and said so in the index,
when it names a placeholder (``RUN_DIR``, ``...``), a path that is not there (a run made
in /tmp, a results/ folder; a ``sweep/variant`` name is no path) or ``--keep`` (it would
write kept runs), or needs ``SIMFL_DATA_DIR`` where it is not set.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import io
import itertools
import os
import re
import shlex
import sys
from dataclasses import dataclass
from pathlib import Path

from simfl.errors import InputError
from simfl.runs.sweep import COLLECTED_TABLES, Sweep, gathered, lacking, load_sweep
from simfl.study import run_command

COMMAND = re.compile(r"^\s*((?:SIMFL_DATA_DIR=\S+ )?"
                     r"python -m simfl(?:\.study\.(\w+)| collect) .*)$")
WRITES = ("--figure", "--ecdf", "--scatter", "--trajectory", "--errors")  # each takes a file
PLACEHOLDER = re.compile(r"^(?:[A-Z][A-Z_]+|\.\.\.)$")


@dataclass(frozen=True)
class PageCommand:
    """A command a page shows: its page (relative to the root), the line it ends on, the
    text as printed (continuation lines joined) and the study tool, None for collect."""

    page: Path
    line: int
    text: str
    tool: str | None

    @property
    def name(self) -> str:
        """The page's path under docs/ without ``.md``, ``/`` as ``_``."""
        return "_".join(self.page.relative_to("docs").with_suffix("").parts)


def page_commands(root: Path) -> list[PageCommand]:
    """Every study and collect command the pages under ``root``/docs show, in page order."""
    found = []
    for page in sorted((root / "docs").rglob("*.md")):
        lines = page.read_text().splitlines()
        i = 0
        while i < len(lines):
            match = COMMAND.match(lines[i])
            if match:
                text = match.group(1)
                while text.rstrip().endswith("\\") and i + 1 < len(lines):
                    i += 1
                    text = text.rstrip()[:-1].rstrip() + " " + lines[i].strip()
                found.append(PageCommand(page.relative_to(root), i + 1, text, match.group(2)))
            i += 1
    return found


def table_below(page: Path, line: int) -> list[str]:
    """The first markdown table after line ``line`` (1-based) of ``page``: the table a
    page shows below a command."""
    lines = page.read_text().splitlines()[line:]
    start = next(i for i, text in enumerate(lines) if text.startswith("|"))
    end = next((i for i, text in enumerate(lines[start:], start) if not text.startswith("|")),
               len(lines))
    return lines[start:end]


def collect_kept(sweep: Sweep, into: Path) -> Path:
    """The sweep's complete runs (as :func:`simfl.runs.sweep.load_sweep` found them)
    gathered as ``python -m simfl collect`` gathers them, but into ``into/<sweep name>``:
    the tables every complete run has, and a link to each run."""
    folder = into / sweep.name
    folder.mkdir(parents=True, exist_ok=True)
    skipped = lacking(sweep)
    for table in (t for t in COLLECTED_TABLES if t not in skipped):
        gathered(sweep, table).write_parquet(folder / f"{table}.parquet")
    for run in sweep.runs:
        link = folder / run.run_id
        if run.run_dir.is_dir() and not link.exists():
            link.symlink_to(run.run_dir.resolve(), target_is_directory=True)
    return folder


def collected_sweeps(commands: list[PageCommand], root: Path, into: Path,
                     wanted: set[str]) -> dict[str, Path]:
    """``docs/runs/<sweep>`` -> its folder gathered into ``into``, for each sweep a page
    collects from docs/runs that is ``wanted`` (by that name)."""
    folders = {}
    for command in (c for c in commands if c.tool is None):
        words = shlex.split(command.text, comments=True)
        sweep_file = root / words[words.index("collect") + 1]
        if words[-2:] != ["--results", "docs/runs"] or not sweep_file.is_file():
            continue
        sweep = load_sweep(sweep_file, root / "docs" / "runs")
        if f"docs/runs/{sweep.name}" in wanted:
            folders[f"docs/runs/{sweep.name}"] = collect_kept(sweep, into)
    return folders


def expand_braces(word: str) -> list[str]:
    """The shell's brace expansion of one word: ``a{b,c}d{e,f}`` -> abde, abdf, acde, acdf."""
    parts = re.split(r"\{([^{}]*,[^{}]*)\}", word)
    choices = [[p] if i % 2 == 0 else p.split(",") for i, p in enumerate(parts)]
    return ["".join(c) for c in itertools.product(*choices)]


def table_args(text: str) -> list[str]:
    """The command's arguments after ``python -m simfl.study.<tool>``, braces expanded,
    without the files it would write and without an optional part that takes a value."""
    text = re.sub(r"\[(--[\w-]+)\]", r"\1", text)  # a bare optional flag is kept
    words = shlex.split(re.sub(r"\[[^\]]*\]", "", text), comments=True)
    args: list[str] = []
    written = False  # the word is the file of an option in WRITES
    for word in words[words.index("-m") + 2:]:
        if not written and word not in WRITES:
            args += expand_braces(word)
        written = word in WRITES
    return args


def why_skipped(command: PageCommand, args: list[str], root: Path) -> str | None:
    """Why the command cannot be run here for its tables (None: it can)."""
    if command.text.startswith("SIMFL_DATA_DIR=") and not os.environ.get("SIMFL_DATA_DIR"):
        return "needs SIMFL_DATA_DIR"
    if "--keep" in args:
        return "--keep writes kept runs"
    placeholders = [a for a in args if PLACEHOLDER.match(a)]
    if placeholders:
        return f"a placeholder: {placeholders[0]}"
    paths = [Path(a) for a in args if "/" in a and not a.startswith("-")]
    missing = [p for p in paths if (p.is_absolute() or (root / p.parts[0]).is_dir())
               and not (root / p).exists()]  # a/b naming no folder here is a variant
    return f"not here: {missing[0]}" if missing else None


def printed(tool: str, args: list[str]) -> str:
    """What ``python -m simfl.study.<tool> ARGS`` prints, run in this process; InputError
    when it fails."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        status = importlib.import_module(f"simfl.study.{tool}").main(args)
    if status != 0:
        raise InputError(f"python -m simfl.study.{tool} {shlex.join(args)}: exit {status}")
    return out.getvalue()


def regenerate(root: Path, out: Path, only: list[str] | None = None) -> list[str]:
    """Write each page command's tables into ``out`` (only the files named ``only``, when
    given) and ``out/index.md``; the index's lines."""
    commands = page_commands(root)
    runs: list[tuple[str, PageCommand, list[str]]] = []  # (file name, command, arguments)
    count: dict[str, int] = {}
    for command in (c for c in commands if c.tool is not None):
        count[command.name] = count.get(command.name, 0) + 1
        name = f"{command.name}_{count[command.name]}.md"
        if not only or name in only:
            runs.append((name, command, table_args(command.text)))
    folders = collected_sweeps(commands, root, out / "runs",
                               {a for _, _, args in runs for a in args})
    index = ["| file | page | command |", "|---|---|---|"]
    for name, command, words in runs:
        args = [str(folders.get(a, a)) for a in words]
        reason = why_skipped(command, args, root)
        if reason is None and command.tool is not None:
            (out / name).write_text(printed(command.tool, args))
        index.append(f"| {name if reason is None else f'skipped: {reason}'} | "
                     f"{command.page}:{command.line} | `{command.text}` |")
    (out / "index.md").write_text("\n".join(index) + "\n")
    return index


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m simfl.study.docs_tables",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path("build/docs-tables"),
                        help="where the tables go (made if missing)")
    parser.add_argument("--only", nargs="+", metavar="NAME",
                        help="only these files (e.g. bias_limits_1.md)")
    args = parser.parse_args(argv)

    def work() -> None:
        if not (Path("docs").is_dir() and Path("docs/runs").is_dir()):
            raise InputError(f"{Path.cwd()}: not the repository root (no docs/runs)")
        args.out.mkdir(parents=True, exist_ok=True)
        index = regenerate(Path("."), args.out, args.only)
        print(f"{args.out}: {sum(not row.startswith('| skipped') for row in index[2:])} "
              f"tables, {sum(row.startswith('| skipped') for row in index[2:])} commands "
              "skipped (index.md says why)")

    return run_command(work)


if __name__ == "__main__":
    sys.exit(main())

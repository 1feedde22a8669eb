"""A sweep's runs kept in docs/runs (bench/archive_runs.py), gathered as ``python -m simfl
collect --results docs/runs`` gathers them, but into a temporary folder: collect's merged
tables are not kept in the repository (.gitignore), so a test of a page's figures builds
them from the runs themselves (as ``make docs-tables`` does, simfl.study.docs_tables)."""

from __future__ import annotations

import atexit
import shutil
import tempfile
from functools import cache
from pathlib import Path

from simfl.runs.sweep import load_sweep
from simfl.study.docs_tables import collect_kept

ROOT = Path(__file__).parents[1]


@cache
def collected(sweep_file: str) -> Path:
    """A folder with the sweep's collected tables (those every kept run has) and a link
    to each kept run, read as ``docs/runs/<sweep name>/`` after collect."""
    sweep = load_sweep(ROOT / sweep_file, ROOT / "docs" / "runs")
    into = Path(tempfile.mkdtemp(prefix=f"kept_{sweep.name}_"))
    atexit.register(shutil.rmtree, into, True)
    return collect_kept(sweep, into)

"""A sweep's runs kept in docs/runs (bench/archive_runs.py), gathered as ``python -m simfl
collect --results docs/runs`` gathers them, but into a temporary folder: collect's merged
tables are not kept in the repository (.gitignore), so a test of a page's figures builds
them from the runs themselves."""

from __future__ import annotations

import atexit
import shutil
import tempfile
from functools import cache
from pathlib import Path

from simfl.runs.sweep import COLLECTED_TABLES, gathered, lacking, load_sweep

ROOT = Path(__file__).parents[1]


@cache
def collected(sweep_file: str) -> Path:
    """A folder with the sweep's collected tables (those every kept run has) and a link
    to each kept run, read as ``docs/runs/<sweep name>/`` after collect."""
    sweep = load_sweep(ROOT / sweep_file, ROOT / "docs" / "runs")
    folder = Path(tempfile.mkdtemp(prefix=f"kept_{sweep.name}_")) / sweep.name
    atexit.register(shutil.rmtree, folder.parent, True)
    folder.mkdir()
    skipped = lacking(sweep)
    for table in (t for t in COLLECTED_TABLES if t not in skipped):
        gathered(sweep, table).write_parquet(folder / f"{table}.parquet")
    for run in sweep.runs:
        if run.run_dir.is_dir():
            (folder / run.run_id).symlink_to(run.run_dir, target_is_directory=True)
    return folder

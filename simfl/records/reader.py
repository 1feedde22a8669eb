"""Reading a run's tables, merged (a complete run) or in parts (any other)."""

from __future__ import annotations

from pathlib import Path

import polars as pl

from simfl.records.schemas import SCHEMAS
from simfl.records.writer import part_files
from simfl.rundir import PARTS_DIR


def table_exists(run_dir: Path, name: str) -> bool:
    """Whether ``run_dir`` holds table ``name``, merged or in parts."""
    return (run_dir / f"{name}.parquet").is_file() or (run_dir / PARTS_DIR / name).is_dir()


def read_table(run_dir: str | Path, name: str) -> pl.DataFrame:
    """Table ``name`` of a run: ``<name>.parquet`` once the run is complete, else the
    rows its parts hold (a running, failed, interrupted or killed run; a table of the
    schemas without parts yet is empty).

    Raises FileNotFoundError when the run has neither.
    """
    run_dir = Path(run_dir)
    path = run_dir / f"{name}.parquet"
    if path.is_file():
        return pl.read_parquet(path)
    parts = part_files(run_dir / PARTS_DIR / name)
    if parts:
        table = pl.concat([pl.read_parquet(p) for p in parts], how="diagonal_relaxed")
        if name in SCHEMAS:  # parts written before a column was added lack it: null there
            empty = pl.DataFrame(pl.from_arrow(SCHEMAS[name].empty_table()))
            table = pl.concat([empty, table], how="diagonal_relaxed").select(empty.columns)
        return table
    if name in SCHEMAS and (run_dir / PARTS_DIR).is_dir():
        return pl.DataFrame(pl.from_arrow(SCHEMAS[name].empty_table()))
    raise FileNotFoundError(f"{path}: no such table (nor parts in {run_dir / PARTS_DIR})")

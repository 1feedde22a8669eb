"""``python -m simfl collect``: a sweep's complete runs gathered into one table per kind
in ``results/<sweep name>/``, every file marked as collect's own
(:data:`simfl.rundir.COLLECT_MARK`), so that collect replaces its own files and
nothing else."""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial
from pathlib import Path

import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
from PIL import Image

from simfl.errors import InputError
from simfl.rundir import COLLECT_MARK, PLOTS_DIR, SWEEP_FIGURES, write_atomically
from simfl.runs.sweep.spec import Sweep
from simfl.runs.sweep.status import is_complete

COLLECTED_TABLES = ("rounds", "bias", "eval")


def lacking(sweep: Sweep, tables: Sequence[str] = COLLECTED_TABLES) -> dict[str, int]:
    """Of ``tables``, those some complete run lacks (a run archived with ``bench/
    archive_runs.py --lean`` keeps no ``eval.parquet``), with how many runs lack each."""
    done = [r for r in sweep.runs if is_complete(r.run_dir)]
    counts = {t: sum(not (r.run_dir / f"{t}.parquet").is_file() for r in done)
              for t in tables}
    return {t: n for t, n in counts.items() if n}


def collect(sweep: Sweep, tables: Sequence[str] = COLLECTED_TABLES) -> dict[str, int]:
    """Concatenate each complete run's tables into ``results/<sweep>/<table>.parquet``,
    with the run id and the sweep's axes as extra columns; returns rows per table. Each
    file it writes is marked as its own, and one that is there without the mark (a file
    simfl did not write), or a figure :func:`simfl.plots.study.plot_sweep` would replace,
    stops it before it writes anything. A table some complete run lacks
    (:func:`lacking`) is not collected, so that no collected table covers part of the
    runs: it is left out of the returned rows, and collect's own earlier copy of it is
    removed rather than left stale."""
    rows = {}
    done = [r for r in sweep.runs if is_complete(r.run_dir)]
    if not done:
        raise InputError(f"{sweep.out_dir}: no run of sweep '{sweep.name}' is complete yet "
                         f"(python -m simfl sweep --status shows where they stand)")
    skipped = lacking(sweep, tables)
    targets = [sweep.out_dir / f"{table}.parquet" for table in tables]
    for path in [*targets, *(sweep.out_dir / PLOTS_DIR / name for name in SWEEP_FIGURES)]:
        if (path.exists() or path.is_symlink()) and not written_by_collect(path):
            raise InputError(f"{path}: exists and was not written by simfl collect, which "
                             f"would replace it: move it away, then collect again (nothing "
                             f"was written)")
    for table in skipped:
        (sweep.out_dir / f"{table}.parquet").unlink(missing_ok=True)  # collect's own
    for table in (t for t in tables if t not in skipped):
        frame = gathered(sweep, table)
        marked = frame.to_arrow().replace_schema_metadata(COLLECT_MARK)
        write_atomically(sweep.out_dir / f"{table}.parquet", partial(pq.write_table, marked))
        rows[table] = frame.height
    return rows


def gathered(sweep: Sweep, table: str) -> pl.DataFrame:
    """The complete runs' ``table`` concatenated, with the run id and the sweep's axes as
    extra columns: what :func:`collect` writes (a column some run lacks, from before it
    was added, is null there)."""
    frames = [pl.read_parquet(r.run_dir / f"{table}.parquet").with_columns(
                  pl.lit(r.run_id).alias("run_id"),
                  *(pl.lit(v).alias(k) for k, v in r.params.items()))
              for r in sweep.runs if is_complete(r.run_dir)]
    return pl.concat(frames, how="diagonal_relaxed") if frames else pl.DataFrame()


def written_by_collect(path: Path) -> bool:
    """Whether ``path`` is a file that collect wrote: a Parquet table or (``.png``) a
    figure with :data:`~simfl.rundir.COLLECT_MARK`."""
    if path.is_symlink() or not path.is_file():
        return False
    try:
        if path.suffix == ".png":
            with Image.open(path) as image:
                found = {k: image.info.get(k) for k in COLLECT_MARK}
        else:
            metadata = pq.read_schema(path).metadata or {}
            found = {k: metadata.get(k.encode(), b"").decode() for k in COLLECT_MARK}
    except (OSError, ValueError, pa.ArrowException, Image.DecompressionBombError):
        return False  # not a file simfl can read
    return found == COLLECT_MARK

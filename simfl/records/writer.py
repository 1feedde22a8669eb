"""Writing a run's tables: buffered, in numbered Parquet parts, merged as the run ends.

Rows are appended column-wise (numpy arrays or scalars broadcast to the batch
length) and buffered. A run writes each table in parts as it goes:
``parts/<table>/part-000000.parquet``, ... (one part per checkpoint, or per
``flush_every`` appends), each written atomically, so a crash or a kill leaves
readable files with every row flushed so far. A finished run merges the parts
into ``<table>.parquet`` (one file whose bytes depend on its rows only, so a
resumed run ends with the same file as an uninterrupted one; merged part by part, in
the memory of about a part, :func:`merge_parts`) and removes them once
its manifest says complete. The files' names and atomic writes are
:mod:`simfl.rundir`'s.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from simfl.errors import InputError
from simfl.records.schemas import SCHEMAS, Rows
from simfl.rundir import PARTS_DIR, PARTS_LAYOUT, remove_written, write_atomically

ROW_GROUP_ROWS = 1 << 17  # rows per row group of a merged table


@dataclass(frozen=True)
class Committed:
    """How much of a table is on disk as part files."""

    num_parts: int = 0
    num_rows: int = 0


def part_path(parts_dir: Path, index: int) -> Path:
    return parts_dir / f"part-{index:06d}.parquet"


def part_files(parts_dir: Path) -> list[Path]:
    """A table's part files, in the order they were written."""
    return sorted(parts_dir.glob("part-*.parquet"))  # zero-padded: name order = write order


class TableWriter:
    """Buffered, append-only writer of one table as numbered Parquet parts."""

    def __init__(self, run_dir: Path, name: str, flush_every: int,
                 committed: Committed | None = None) -> None:
        self.name, self.schema, self.flush_every = name, SCHEMAS[name], flush_every
        self.path = run_dir / f"{name}.parquet"  # the merged table of a finished run
        self.parts_dir = run_dir / PARTS_DIR / name
        if committed is not None:
            _restore_parts(self.path, self.parts_dir, committed)
        on_disk = committed or Committed()
        self.num_parts, self.num_rows = on_disk.num_parts, on_disk.num_rows  # in parts
        self.muted = False  # drop appended rows (a resumed run replaying committed rounds)
        self._chunks: list[pa.RecordBatch] = []

    def append(self, **columns: Any) -> None:
        """Append a batch of rows; array columns set the length, scalars are broadcast."""
        if set(columns) != set(self.schema.names):
            missing = set(self.schema.names) ^ set(columns)
            raise ValueError(f"{self.path.name}: columns differ from the schema: {sorted(missing)}")
        if self.muted:
            return
        length = max((len(v) for v in columns.values() if isinstance(v, np.ndarray | list)),
                     default=1)
        arrays = [_column(columns[f.name], f.type, length) for f in self.schema]
        self._chunks.append(pa.RecordBatch.from_arrays(arrays, schema=self.schema))
        if len(self._chunks) >= self.flush_every:
            self.flush()

    def flush(self) -> Committed:
        """Write the buffered rows as the next part; return what is now on disk."""
        if self._chunks:
            table = pa.Table.from_batches(self._chunks, schema=self.schema)
            self.parts_dir.mkdir(parents=True, exist_ok=True)
            write_atomically(part_path(self.parts_dir, self.num_parts),
                             lambda tmp: pq.write_table(table, tmp))
            self.num_parts += 1
            self.num_rows += table.num_rows
            self._chunks = []
        return Committed(self.num_parts, self.num_rows)

    def merge(self) -> None:
        """Flush, and merge the parts into ``<table>.parquet`` (rows in round order,
        stable: a round's rows are written once its stragglers are done, so rounds can
        end out of order). The parts stay: the run's last checkpoint counts on them
        until the run is complete."""
        self.flush()
        write_atomically(self.path, lambda tmp: merge_parts(
            part_files(self.parts_dir), self.schema, tmp))


def merge_parts(parts: list[Path], schema: pa.Schema, path: Path) -> None:
    """The rows of ``parts``, in that order and stably sorted by round when the table has
    one, as one Parquet file of :data:`ROW_GROUP_ROWS`-row groups: the bytes of the whole
    table sorted and written at once, in the memory of about a part. After reading part
    i, the rows of a round below every later part's first round can come from no later
    part: they are written, sorted, and the rest wait."""
    rounds = "round" in schema.names
    lows = [pc.min(pq.read_table(p, columns=["round"]).column(0)).as_py() if rounds else None
            for p in parts]
    bounds = [min((low for low in lows[i + 1:] if low is not None), default=None)
              for i in range(len(parts))]  # the lowest round of a later part
    waiting, pending = schema.empty_table(), schema.empty_table()
    with pq.ParquetWriter(path, schema) as writer:
        groups = 0
        for part, bound in zip(parts, bounds, strict=True):
            waiting = pa.concat_tables([waiting, pq.read_table(part, schema=schema)])
            if rounds:
                column = waiting.column("round").to_numpy()
                done = column < bound if bound is not None else np.ones(len(column), bool)
                index = np.flatnonzero(done)
                ready = waiting.take(index[np.argsort(column[index], kind="stable")])
                waiting = waiting.filter(pa.array(~done))
            else:
                ready, waiting = waiting, schema.empty_table()
            pending = pa.concat_tables([pending, ready])
            while pending.num_rows >= ROW_GROUP_ROWS:
                writer.write_table(pending.slice(0, ROW_GROUP_ROWS), ROW_GROUP_ROWS)
                pending, groups = pending.slice(ROW_GROUP_ROWS), groups + 1
        if pending.num_rows or not groups:  # pq.write_table writes an empty table's group
            writer.write_table(pending, ROW_GROUP_ROWS)


def _restore_parts(path: Path, parts_dir: Path, committed: Committed) -> None:
    """Leave exactly the ``committed`` parts on disk: remove the parts written after the
    checkpoint and a merged file of an unfinished merge. InputError, with nothing
    removed, if the committed parts are not all there."""
    kept = part_files(parts_dir)[:committed.num_parts]
    expected = [part_path(parts_dir, i) for i in range(committed.num_parts)]
    num_rows = -1
    if kept == expected:
        try:
            num_rows = sum(pq.read_metadata(p).num_rows for p in kept)
        except (OSError, pa.ArrowException) as e:
            raise InputError(f"{parts_dir}: a part file is unreadable ({e})") from None
    if num_rows != committed.num_rows:
        raise InputError(f"{parts_dir}: the part files do not hold the {committed.num_parts} "
                         f"parts and {committed.num_rows} rows that the checkpoint committed")
    path.unlink(missing_ok=True)
    for part in part_files(parts_dir)[committed.num_parts:]:
        part.unlink()
    for tmp in parts_dir.glob("*.tmp"):
        tmp.unlink()


def _column(value: Any, type_: pa.DataType, length: int) -> pa.Array:
    if isinstance(value, np.ma.MaskedArray):  # masked: null (not applicable); NaN stays NaN
        return pa.array(value.data, type=type_, mask=np.ma.getmaskarray(value))
    if isinstance(value, np.ndarray | list):
        return pa.array(value, type=type_, from_pandas=True)  # NaN -> null for floats
    return pa.array([value] * length, type=type_)


class Recorder:
    """The run's tables, one :class:`TableWriter` each, in ``run_dir``.

    ``committed`` (a resumed run): per table, the parts its checkpoint committed;
    later parts are removed, and tables missing from it start empty.
    """

    def __init__(self, run_dir: Path, flush_every: int = 100,
                 committed: Mapping[str, Committed] | None = None) -> None:
        self.parts_dir = run_dir / PARTS_DIR
        self.parts_dir.mkdir(parents=True, exist_ok=True)  # the mark of a run in progress
        self.tables = {
            name: TableWriter(run_dir, name, flush_every,
                              None if committed is None else committed.get(name, Committed()))
            for name in SCHEMAS
        }

    def append(self, table: str, **columns: Any) -> None:
        self.tables[table].append(**columns)

    def write(self, rows: Rows) -> None:
        """Append typed rows to their table."""
        self.append(rows.TABLE, **{f.name: getattr(rows, f.name) for f in fields(rows)})

    def mute(self, muted: bool) -> None:
        """While muted, appended rows are dropped (they are on disk already)."""
        for writer in self.tables.values():
            writer.muted = muted

    def flush(self) -> dict[str, Committed]:
        """Write every buffered row as parts; return what is on disk per table."""
        return {name: writer.flush() for name, writer in self.tables.items()}

    def merge(self) -> None:
        """The run is finished: merge each table's parts into ``<table>.parquet``."""
        for writer in self.tables.values():
            writer.merge()

    def remove_parts(self) -> None:
        """The run is complete (its manifest says so): its parts are not needed any more."""
        remove_written(self.parts_dir, PARTS_LAYOUT)

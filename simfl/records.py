"""Row schemas and Parquet writing: one long-format table per event kind.

Rows are appended column-wise (numpy arrays or scalars broadcast to the batch
length) and buffered. A run writes each table in parts as it goes:
``parts/<table>/part-000000.parquet``, ... (one part per checkpoint, or per
``flush_every`` appends), each written atomically, so a crash or a kill leaves
readable files with every row flushed so far. A finished run merges the parts
into ``<table>.parquet`` (one file whose bytes depend on its rows only, so a
resumed run ends with the same file as an uninterrupted one; merged part by part, in
the memory of about a part, :func:`merge_parts`) and removes them once
its manifest says complete.
:func:`read_table` reads either form. Schemas are fixed here, so every run
writes the same types; the tables' names (:data:`simfl.rundir.TABLES`), the files'
and atomic writes are :mod:`simfl.rundir`'s.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from simfl.errors import InputError
from simfl.rundir import PARTS_DIR, PARTS_LAYOUT, remove_written, write_atomically

ROW_GROUP_ROWS = 1 << 17  # rows per row group of a merged table

SCHEMAS: dict[str, pa.Schema] = {
    "rounds": pa.schema([
        ("round", pa.int64()),
        ("t_start_s", pa.float64()),
        ("t_end_s", pa.float64()),
        ("num_online", pa.int64()),
        ("num_selected", pa.int64()),
        ("num_kept", pa.int64()),
        ("num_aggregated", pa.int64()),
        ("num_dropped", pa.int64()),
        ("quantile_estimate", pa.float64()),
        ("lr", pa.float64()),
        ("bytes_down", pa.int64()),
        ("bytes_up", pa.int64()),
    ]),
    "clients": pa.schema([
        ("round", pa.int64()),
        ("client_id", pa.string()),
        ("client_idx", pa.int64()),
        ("status", pa.string()),  # aggregated / filtered / dropped / late / nonfinite / stale
        # F_k(w_t); null when the device reported none (the rule needs no losses, or it
        # left first); NaN when it reported a NaN/Inf loss (a diverged model)
        ("loss_reported", pa.float64()),
        # mean minibatch loss of local training; null when the device did not train; NaN
        # for a NaN/Inf update (status nonfinite)
        ("train_loss", pa.float64()),
        ("num_samples", pa.int64()),
        ("bytes_down", pa.int64()),
        ("bytes_up", pa.int64()),
        ("t_dispatch_s", pa.float64()),
        ("t_done_s", pa.float64()),
        ("staleness", pa.int64()),  # server updates since model_version (sync: 0)
        ("model_version", pa.int64()),  # the model the device started from (sync: round)
    ]),
    "comm": pa.schema([
        ("round", pa.int64()),
        ("client_idx", pa.int64()),
        ("direction", pa.string()),  # down / up
        ("kind", pa.string()),  # model / update / loss / quantile_protocol / secagg
        ("bytes", pa.int64()),
        ("t_start_s", pa.float64()),  # null: a shadow message (not sent, so not timed)
        ("t_end_s", pa.float64()),
        # null: sent; else the shadowing estimator whose protocol would send it (not sent,
        # not in rounds.bytes_*; bias.parquet's protocol_bytes per device, as messages)
        ("shadow", pa.string()),
        # false: cut short when its device went offline or failed (``bytes`` then counts
        # what had arrived); null for a shadow message
        ("completed", pa.bool_()),
    ]),
    "bias": pa.schema([
        ("round", pa.int64()),
        ("t_s", pa.float64()),  # when the cohort reported its losses
        ("estimator", pa.string()),
        ("driver", pa.bool_()),  # this estimator's threshold filtered the round
        ("theta", pa.float64()),
        ("estimate", pa.float64()),  # η̂
        ("cohort_size", pa.int64()),
        ("secure_sums", pa.int64()),
        ("protocol_bytes", pa.int64()),  # per device, up + down, beyond the model
        ("oracle_quantile", pa.float64()),  # Q_pop(w_t) over all training devices (bias rounds)
        ("bias", pa.float64()),  # estimate - oracle_quantile
        ("realized_conformity", pa.float64()),  # α-weight of the population with F_k >= η̂
        # bias = sampling_bias + availability_bias + selection_bias (bias rounds; else null):
        # E[η̂ | random cohort of all devices] − Q_pop, E[η̂ | random cohort of those online]
        # − the former, and this round's η̂ − the latter (simfl.quantile.panel)
        ("sampling_bias", pa.float64()),
        ("availability_bias", pa.float64()),
        ("selection_bias", pa.float64()),
        ("mc_draws", pa.int64()),  # random cohorts behind each expectation (0: none)
        # the dose added to the estimator's threshold (simfl.quantile.dose; 0 for others)
        ("offset_nats", pa.float64()),
        ("level_shift", pa.float64()),
        # 95 % Woodruff interval of the estimate from its weights (simfl.quantile.woodruff;
        # null where the estimator has none)
        ("ci_low", pa.float64()),
        ("ci_high", pa.float64()),
    ]),
    "availability": pa.schema([
        ("t_s", pa.float64()),  # start of the simulated hour
        ("region", pa.string()),
        ("num_online", pa.int64()),
    ]),
    "devices": pa.schema([  # one row per device, training and unseen test, as the run ends
        ("client_idx", pa.int64()),  # training devices (as in clients / comm / eval); null for test
        ("client_id", pa.string()),
        ("split", pa.string()),  # train / test (eval's split: join eval on client_id, split)
        ("region", pa.string()),
        ("utc_offset_h", pa.float64()),
        # long-run online share (the day's mean of its profile; always 1; null: a trace)
        ("propensity", pa.float64()),
        ("logit_shift", pa.float64()),  # habits: z, its profile σ(g(u − phase) + z); else 0
        ("phase_h", pa.float64()),  # habits: its profile shifted later by this; else 0
        ("session_mean_s", pa.float64()),  # mean online session (null: always, trace)
        ("engaged_share", pa.float64()),  # habits' bursts: share of time engaged (else 1)
        ("charge_start_h", pa.float64()),  # habits: local hour its charging opens (null: none)
        ("speed_rel", pa.float64()),  # training speed relative to the median phone
        ("train_s_per_sample", pa.float64()),
        ("down_bytes_per_s", pa.float64()),
        ("up_bytes_per_s", pa.float64()),
        ("latency_s", pa.float64()),
        ("num_samples", pa.int64()),
        ("covariate", pa.float64()),  # population.covariate of its data (manifest names it)
    ]),
    "eval": pa.schema([
        ("round", pa.int64()),  # rounds completed when evaluated (0 = initial model)
        ("t_s", pa.float64()),
        ("client_id", pa.string()),
        ("client_idx", pa.int64()),  # training devices (as in clients / comm); null for test
        ("split", pa.string()),  # train / test
        ("num_samples", pa.int64()),
        ("loss", pa.float64()),
        ("error", pa.float64()),
    ]),
}


# Typed builders of the simulator's rows: one dataclass per table, its fields the
# table's columns in schema order (a test checks). A field holds a scalar (broadcast to
# the batch) or a (K,) array; a masked array's masked entries are null.
Column = np.ndarray | list[Any]


@dataclass(frozen=True)
class RoundRow:
    """One row of rounds.parquet: a round (async: a server update)."""

    TABLE: ClassVar[str] = "rounds"
    round: int
    t_start_s: float
    t_end_s: float
    num_online: int
    num_selected: int
    num_kept: int
    num_aggregated: int
    num_dropped: int
    quantile_estimate: float | None
    lr: float
    bytes_down: int
    bytes_up: int


@dataclass(frozen=True)
class ClientRows:
    """clients.parquet rows: the selected devices of a round (async: the tasks ended in an
    update interval)."""

    TABLE: ClassVar[str] = "clients"
    round: int
    client_id: Column
    client_idx: Column
    status: Column
    loss_reported: np.ma.MaskedArray
    train_loss: np.ma.MaskedArray
    num_samples: Column
    bytes_down: Column
    bytes_up: Column
    t_dispatch_s: float | Column
    t_done_s: Column
    staleness: int | Column
    model_version: int | Column


@dataclass(frozen=True)
class CommRows:
    """comm.parquet rows: the messages of a round (async: of an update interval)."""

    TABLE: ClassVar[str] = "comm"
    round: int
    client_idx: Column
    direction: Column
    kind: Column
    bytes: Column
    t_start_s: Column | None
    t_end_s: Column | None
    shadow: str | None = None
    completed: Column | None = None  # None: shadow messages (not sent)


@dataclass(frozen=True)
class EvalRows:
    """eval.parquet rows: one evaluation of the global model on one split's devices."""

    TABLE: ClassVar[str] = "eval"
    round: int
    t_s: float
    client_id: Column
    client_idx: np.ma.MaskedArray
    split: str
    num_samples: Column
    loss: Column
    error: Column


@dataclass(frozen=True)
class AvailabilityRows:
    """availability.parquet rows: devices online per (simulated hour, region)."""

    TABLE: ClassVar[str] = "availability"
    t_s: Column
    region: Column
    num_online: Column


@dataclass(frozen=True)
class DeviceRows:
    """devices.parquet rows: every device of one split (training or unseen test), its
    habits, links and data size."""

    TABLE: ClassVar[str] = "devices"
    client_idx: Column
    client_id: Column
    split: str
    region: Column
    utc_offset_h: Column
    propensity: np.ma.MaskedArray
    logit_shift: Column
    phase_h: Column
    session_mean_s: np.ma.MaskedArray
    engaged_share: Column
    charge_start_h: np.ma.MaskedArray
    speed_rel: Column
    train_s_per_sample: Column
    down_bytes_per_s: Column
    up_bytes_per_s: Column
    latency_s: Column
    num_samples: Column
    covariate: Column


Rows = RoundRow | ClientRows | CommRows | EvalRows | AvailabilityRows | DeviceRows


@dataclass(frozen=True)
class Committed:
    """How much of a table is on disk as part files."""

    num_parts: int = 0
    num_rows: int = 0


def part_path(parts_dir: Path, index: int) -> Path:
    return parts_dir / f"part-{index:06d}.parquet"


def _part_files(parts_dir: Path) -> list[Path]:
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
            _part_files(self.parts_dir), self.schema, tmp))


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
    kept = _part_files(parts_dir)[:committed.num_parts]
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
    for part in _part_files(parts_dir)[committed.num_parts:]:
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
    parts = _part_files(run_dir / PARTS_DIR / name)
    if parts:
        table = pl.concat([pl.read_parquet(p) for p in parts], how="diagonal_relaxed")
        if name in SCHEMAS:  # parts written before a column was added lack it: null there
            empty = pl.DataFrame(pl.from_arrow(SCHEMAS[name].empty_table()))
            table = pl.concat([empty, table], how="diagonal_relaxed").select(empty.columns)
        return table
    if name in SCHEMAS and (run_dir / PARTS_DIR).is_dir():
        return pl.DataFrame(pl.from_arrow(SCHEMAS[name].empty_table()))
    raise FileNotFoundError(f"{path}: no such table (nor parts in {run_dir / PARTS_DIR})")

"""Row schemas and Parquet writing: one long-format table per event kind.

Rows are appended column-wise (numpy arrays or scalars broadcast to the batch
length) and buffered; every ``flush_every`` appends the buffer becomes one row
group of the table's Parquet file, so writing costs microseconds per round and
files stay compact. Schemas are fixed here, so every run writes the same types.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

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
        ("status", pa.string()),  # aggregated / filtered / dropped / late
        ("loss_reported", pa.float64()),  # F_k(w_t); null when the rule needs no losses
        ("train_loss", pa.float64()),  # mean minibatch loss during local training
        ("num_samples", pa.int64()),
        ("bytes_down", pa.int64()),
        ("bytes_up", pa.int64()),
        ("t_dispatch_s", pa.float64()),
        ("t_done_s", pa.float64()),
        ("staleness", pa.int64()),
    ]),
    "comm": pa.schema([
        ("round", pa.int64()),
        ("client_idx", pa.int64()),
        ("direction", pa.string()),  # down / up
        ("kind", pa.string()),  # model / update / loss / quantile_protocol / secagg
        ("bytes", pa.int64()),
        ("t_start_s", pa.float64()),
        ("t_end_s", pa.float64()),
    ]),
    "availability": pa.schema([
        ("t_s", pa.float64()),  # start of the simulated hour
        ("region", pa.string()),
        ("num_online", pa.int64()),
    ]),
    "eval": pa.schema([
        ("round", pa.int64()),  # rounds completed when evaluated (0 = initial model)
        ("t_s", pa.float64()),
        ("client_id", pa.string()),
        ("split", pa.string()),  # train / test
        ("num_samples", pa.int64()),
        ("loss", pa.float64()),
        ("error", pa.float64()),
    ]),
}


class TableWriter:
    """Buffered, append-only writer of one Parquet table."""

    def __init__(self, path: Path, schema: pa.Schema, flush_every: int) -> None:
        self.path, self.schema, self.flush_every = path, schema, flush_every
        self._chunks: list[pa.RecordBatch] = []
        self._writer: pq.ParquetWriter | None = None
        self.num_rows = 0

    def append(self, **columns: Any) -> None:
        """Append a batch of rows; array columns set the length, scalars are broadcast."""
        if set(columns) != set(self.schema.names):
            missing = set(self.schema.names) ^ set(columns)
            raise ValueError(f"{self.path.name}: columns differ from the schema: {sorted(missing)}")
        length = max((len(v) for v in columns.values() if isinstance(v, np.ndarray | list)),
                     default=1)
        arrays = [_column(columns[f.name], f.type, length) for f in self.schema]
        self._chunks.append(pa.RecordBatch.from_arrays(arrays, schema=self.schema))
        self.num_rows += length
        if len(self._chunks) >= self.flush_every:
            self.flush()

    def flush(self) -> None:
        if not self._chunks:
            return
        if self._writer is None:
            self._writer = pq.ParquetWriter(self.path, self.schema)
        self._writer.write_table(pa.Table.from_batches(self._chunks, schema=self.schema))
        self._chunks = []

    def close(self) -> None:
        self.flush()
        if self._writer is None:  # no rows at all: still write a valid, empty file
            pq.write_table(self.schema.empty_table(), self.path)
        else:
            self._writer.close()


def _column(value: Any, type_: pa.DataType, length: int) -> pa.Array:
    if isinstance(value, np.ndarray | list):
        return pa.array(value, type=type_, from_pandas=True)  # NaN -> null for floats
    return pa.array([value] * length, type=type_)


class Recorder:
    """The run's tables, one :class:`TableWriter` each, in ``run_dir``."""

    def __init__(self, run_dir: Path, flush_every: int = 100) -> None:
        self.tables = {
            name: TableWriter(run_dir / f"{name}.parquet", schema, flush_every)
            for name, schema in SCHEMAS.items()
        }

    def append(self, table: str, **columns: Any) -> None:
        self.tables[table].append(**columns)

    def close(self) -> None:
        for writer in self.tables.values():
            writer.close()

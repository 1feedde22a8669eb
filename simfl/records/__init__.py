"""A run's Parquet records: one long-format table per event kind.

The schemas and the typed rows that fill them are :mod:`simfl.records.schemas`'s
(fixed here, so every run writes the same types); writing them, in numbered parts
as the run goes and merged into ``<table>.parquet`` as it ends, is
:mod:`simfl.records.writer`'s; reading either form, :mod:`simfl.records.reader`'s.
The tables' names (:data:`simfl.rundir.TABLES`), the files' and atomic writes are
:mod:`simfl.rundir`'s. Every name below is importable from ``simfl.records``.
"""

from __future__ import annotations

from simfl.records.reader import read_table, table_exists
from simfl.records.schemas import (
    SCHEMAS,
    AvailabilityRows,
    ClientRows,
    Column,
    CommRows,
    DeviceRows,
    EvalRows,
    RoundRow,
    Rows,
)
from simfl.records.writer import Committed, Recorder, TableWriter, merge_parts, part_path

__all__ = [
    "SCHEMAS", "AvailabilityRows", "ClientRows", "Column", "CommRows", "Committed", "DeviceRows",
    "EvalRows", "Recorder", "RoundRow", "Rows", "TableWriter", "merge_parts", "part_path",
    "read_table", "table_exists",
]

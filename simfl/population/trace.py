"""Availability traces: per-device online intervals in Parquet or CSV.

Format (one row per online interval; the file type follows the suffix, ``.parquet``
or ``.csv``):

| column | type | meaning |
|---|---|---|
| client_idx | integer | device index, 0 <= client_idx < number of training devices (the
  `client_idx` of clients.parquet and comm.parquet) |
| t_on_s | float | simulated UTC seconds at which the device comes online |
| t_off_s | float | when it goes offline (> t_on_s; may be ``inf``) |
| client_id | string, optional | the device's id in the source of a converted trace
  (simfl.population.trace_formats); ignored when the trace is read |

A device is online on ``[t_on_s, t_off_s)``. Intervals of one device must not
overlap (touching is allowed); devices without a row are never online; the rows may
come in any order. :func:`write_trace` writes this format (e.g. from the diurnal model
through ``Availability.intervals()``), :func:`read_trace` checks and reads it.

A Parquet trace may record two facts that its rows cannot tell, as key-value metadata
(:func:`trace_metadata`; a CSV trace records none): ``simfl.num_clients``, the devices
of the trace, the never-online ones included (``trace convert``: the source's clients;
a scenario's draws: its devices), and ``simfl.end_s``, the end of the window
``[0, end_s)`` the trace covers (``trace convert``: the latest end of a source's
recorded span, FedScale's ``finish_time``, or ``--horizon-s``; a scenario's draws: its
``horizon_s``). Without them a trace has ``max(client_idx) + 1`` devices and its window
ends at its latest finite switch time.
"""

from __future__ import annotations

import math
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import polars as pl

from simfl.errors import InputError, first_paragraph

TRACE_COLUMNS = ("client_idx", "t_on_s", "t_off_s")
NUM_CLIENTS_KEY = "simfl.num_clients"
END_KEY = "simfl.end_s"


@dataclass(frozen=True)
class TraceMetadata:
    """What a Parquet trace records beside its rows (None: not recorded)."""

    num_clients: int | None = None  # its devices, the never-online ones included
    end_s: float | None = None  # the end of the window [0, end_s) it covers


def _suffix(path: Path) -> str:
    suffix = path.suffix.lower()
    if suffix not in (".parquet", ".csv"):
        raise InputError(f"{path}: a trace must be a .parquet or .csv file")
    return suffix


def write_trace(path: str | Path, device: np.ndarray, t_on_s: np.ndarray,
                t_off_s: np.ndarray, client_id: np.ndarray | None = None,
                metadata: TraceMetadata = TraceMetadata()) -> None:
    """Write online intervals as a trace file (Parquet or CSV by suffix); ``client_id``,
    one per row, keeps a converted trace's source ids beside the indices; ``metadata``
    is recorded in a Parquet file (a CSV file has no place for it)."""
    path = Path(path)
    frame = pl.DataFrame({"client_idx": np.asarray(device, dtype=np.int64),
                          "t_on_s": np.asarray(t_on_s, dtype=np.float64),
                          "t_off_s": np.asarray(t_off_s, dtype=np.float64)})
    if client_id is not None:
        frame = frame.with_columns(client_id=pl.Series(np.asarray(client_id, dtype=str)))
    if _suffix(path) == ".parquet":
        recorded: dict[str, str] = {}
        if metadata.num_clients is not None:
            recorded[NUM_CLIENTS_KEY] = str(int(metadata.num_clients))
        if metadata.end_s is not None:
            recorded[END_KEY] = repr(float(metadata.end_s))
        frame.write_parquet(path, metadata=recorded)
    else:
        frame.write_csv(path, float_precision=None)


def _load(path: Path) -> pl.DataFrame:
    suffix = _suffix(path)
    if not path.is_file():
        raise InputError(f"{path}: trace file not found")
    try:
        if suffix == ".parquet":
            return pl.read_parquet(path)
        return pl.read_csv(path, schema_overrides={"client_idx": pl.Int64, "t_on_s": pl.Float64,
                                                    "t_off_s": pl.Float64, "client_id": pl.String})
    except (OSError, pl.exceptions.PolarsError) as e:
        raise InputError(f"{path}: cannot read trace ({first_paragraph(e)})") from None


def trace_metadata(path: str | Path) -> TraceMetadata:
    """The client count and window end a Parquet trace records (module docstring), read
    from its footer alone; nothing for a CSV trace. InputError for a value that is not a
    count >= 1 or a finite end > 0."""
    path = Path(path)
    if _suffix(path) == ".csv" or not path.is_file():
        return TraceMetadata()
    try:
        stored = pl.read_parquet_metadata(path)
    except (OSError, pl.exceptions.PolarsError) as e:
        raise InputError(f"{path}: cannot read trace ({first_paragraph(e)})") from None
    count, end = stored.get(NUM_CLIENTS_KEY), stored.get(END_KEY)
    good_count = count is None or count.isdigit() and int(count) >= 1
    try:
        good_end = end is None or 0 < float(end) < math.inf
    except ValueError:
        good_end = False
    if not (good_count and good_end):
        raise InputError(f"{path}: its metadata {NUM_CLIENTS_KEY} = {count!r}, {END_KEY} = "
                         f"{end!r} must be a count >= 1 and a finite time > 0")
    return TraceMetadata(None if count is None else int(count),
                         None if end is None else float(end))


def trace_device_count(path: str | Path) -> int:
    """The devices of a trace: its recorded client count, else its highest client_idx
    + 1 (a Parquet file's column alone is read; InputError as :func:`read_trace` for a
    file it cannot read)."""
    path = Path(path)
    recorded = trace_metadata(path).num_clients
    if recorded is not None:
        return recorded
    if _suffix(path) == ".parquet" and path.is_file():
        with suppress(OSError, pl.exceptions.PolarsError):  # read_trace's errors below
            top = pl.scan_parquet(path).select(
                pl.col("client_idx").cast(pl.Int64, strict=True).max()).collect().item()
            return 0 if top is None else max(int(top) + 1, 0)
    return int(_columns(_load(path), path)[0].max(initial=-1)) + 1


def _columns(frame: pl.DataFrame, path: Path) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    missing = [c for c in TRACE_COLUMNS if c not in frame.columns]
    if "client_idx" in missing and "device" in frame.columns:
        raise InputError(f"{path}: the device column of a trace is now 'client_idx' (as in "
                         "clients.parquet); rename 'device'")
    if missing:
        raise InputError(f"{path}: trace lacks column(s) {missing}; needs {list(TRACE_COLUMNS)}")
    try:
        device = frame["client_idx"].cast(pl.Int64, strict=True).to_numpy()
        t_on = frame["t_on_s"].cast(pl.Float64, strict=True).to_numpy()
        t_off = frame["t_off_s"].cast(pl.Float64, strict=True).to_numpy()
    except pl.exceptions.PolarsError as e:
        raise InputError(f"{path}: trace columns must be numeric ({first_paragraph(e)})") from None
    return device, t_on, t_off


def _check(path: Path, device: np.ndarray, t_on: np.ndarray, t_off: np.ndarray,
           num_devices: int | None) -> None:
    def fail(row: int, why: str) -> None:
        raise InputError(f"{path}: row {row} (client_idx {device[row]}, [{t_on[row]}, "
                         f"{t_off[row]})): {why}")

    outside = device < 0 if num_devices is None else (device < 0) | (device >= num_devices)
    bad = np.flatnonzero(outside)
    if bad.size:
        bound = "inf" if num_devices is None else num_devices
        fail(int(bad[0]), f"device index outside [0, {bound})")
    bad = np.flatnonzero(~np.isfinite(t_on) | np.isnan(t_off) | ~(t_off > t_on))
    if bad.size:
        fail(int(bad[0]), "needs a finite t_on_s and t_off_s > t_on_s")


def read_trace(path: str | Path, num_devices: int | None
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Read and check a trace; returns (device, t_on_s, t_off_s) sorted by device, time,
    a device's intervals that touch ([a, b) then [b, c)) joined into one ([a, c)): the
    device stays online, and ``online_until`` reads one interval. ``num_devices`` bounds
    the device indices (None: any index >= 0)."""
    path = Path(path)
    device, t_on, t_off = _columns(_load(path), path)
    _check(path, device, t_on, t_off, num_devices)
    order = np.lexsort((t_on, device))
    device, t_on, t_off = device[order], t_on[order], t_off[order]
    same = device[1:] == device[:-1]
    overlap = np.flatnonzero(same & (t_on[1:] < t_off[:-1]))
    if overlap.size:
        row = int(order[overlap[0] + 1])
        raise InputError(f"{path}: row {row}: device {device[overlap[0]]} has overlapping "
                         "online intervals")
    starts = np.ones(len(device), dtype=bool)  # rows that begin a joined interval
    starts[1:] = ~(same & (t_on[1:] == t_off[:-1]))
    ends = np.append(starts[1:], True) if len(device) else starts
    return device[starts], t_on[starts], t_off[ends]

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
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import polars as pl

from simfl.errors import InputError, first_paragraph

TRACE_COLUMNS = ("client_idx", "t_on_s", "t_off_s")


def _suffix(path: Path) -> str:
    suffix = path.suffix.lower()
    if suffix not in (".parquet", ".csv"):
        raise InputError(f"{path}: a trace must be a .parquet or .csv file")
    return suffix


def write_trace(path: str | Path, device: np.ndarray, t_on_s: np.ndarray,
                t_off_s: np.ndarray, client_id: np.ndarray | None = None) -> None:
    """Write online intervals as a trace file (Parquet or CSV by suffix); ``client_id``,
    one per row, keeps a converted trace's source ids beside the indices."""
    path = Path(path)
    frame = pl.DataFrame({"client_idx": np.asarray(device, dtype=np.int64),
                          "t_on_s": np.asarray(t_on_s, dtype=np.float64),
                          "t_off_s": np.asarray(t_off_s, dtype=np.float64)})
    if client_id is not None:
        frame = frame.with_columns(client_id=pl.Series(np.asarray(client_id, dtype=str)))
    if _suffix(path) == ".parquet":
        frame.write_parquet(path)
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

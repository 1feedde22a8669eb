"""Statistics of device availability, the same for a trace and for a model's draws.

Over a window ``[0, end_s)`` of simulated time (intervals are cut to it):

- **online share by hour of the day**: of all device-seconds in local hour h (UTC +
  the device's offset; UTC where no offset is known, as for a trace), the share online;
- **device online share**: each device's online seconds / ``end_s``, devices never
  online included (quantiles over the devices);
- **session length**: the length of each online interval that lies inside the window
  (one that starts at 0 or ends at ``end_s`` or later is cut, its length unseen: left
  out); a device's touching intervals count as one session;
- **gap length**: each offline span between two sessions of a device (within the
  window);
- **devices online per day**: for each whole UTC day of the window, the number of
  distinct devices online at some time in it;
- **weekday and weekend online share**: of all device-seconds of the window on local
  weekdays (Monday to Friday) and on local weekends (Saturday and Sunday), the share
  online. Simulated t = 0 is Monday 00:00 UTC; a device's local day is its UTC day
  shifted by its offset (day ``floor((t + offset) / 1 day)``, Monday when 0 mod 7), UTC
  where no offset is known. NaN where the window holds no such time.

Torch-free and numpy/polars only, so a fit of the availability model can reuse it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import polars as pl

from simfl.errors import InputError
from simfl.population.availability import Availability, check_work_bytes
from simfl.population.trace import read_trace, trace_metadata

DAY_S = 86400.0
HOUR_S = 3600.0
WEEK_S = 7 * DAY_S  # simulated t = 0 is Monday 00:00 UTC
QUANTILES = (0.05, 0.25, 0.5, 0.75, 0.95)
STATISTICS = ("device online share", "session length (s)", "gap length (s)",
              "devices online per day")
# Peak bytes of availability_stats (check_stats_size) for each interval, device, whole
# day of the window and day a device is online (its arrays and their temporaries).
_BYTES_PER_INTERVAL = 96
_BYTES_PER_DEVICE = 48
_BYTES_PER_DAY = 24
_BYTES_PER_DEVICE_DAY = 80
SUMMARY_SCHEMA = {"statistic": pl.String, "count": pl.Int64, "mean": pl.Float64,
                  **{f"q{round(q * 100):02d}": pl.Float64 for q in QUANTILES}}


@dataclass(frozen=True)
class AvailabilityStats:
    """``hourly``: hour (0..23), online_share, and the same on weekdays and on weekend
    days (weekday_share, weekend_share). ``summary``: one row per STATISTICS entry with
    its count, mean and quantiles q05 .. q95 (null where count is 0). ``device_share``:
    (N,) each device's online share of the window."""

    hourly: pl.DataFrame
    summary: pl.DataFrame
    device_share: np.ndarray
    num_devices: int
    end_s: float
    local_time: bool  # hours and days are the devices' local ones (else UTC)
    weekday_share: float  # online share on local Monday to Friday (NaN: none in the window)
    weekend_share: float  # on local Saturday and Sunday

    @property
    def weekend_ratio(self) -> float:
        """The weekend's online share over the weekdays' (NaN where either is missing)."""
        if self.weekday_share > 0 and math.isfinite(self.weekend_share):
            return self.weekend_share / self.weekday_share
        return math.nan


def window_end(t_on_s: np.ndarray, t_off_s: np.ndarray, horizon_s: float = math.inf) -> float:
    """The end of the window of statistics: ``horizon_s`` when finite, else the latest
    finite switch time of the intervals, else one day (devices online throughout)."""
    if math.isfinite(horizon_s):
        return horizon_s
    times = np.concatenate([t_on_s, t_off_s])
    times = times[np.isfinite(times)]
    return float(times.max()) if times.size and times.max() > 0 else DAY_S


def _seconds_in_hour(local_s: np.ndarray, hour: int) -> np.ndarray:
    """Seconds of local hour ``hour`` (every day) in [0, local_s), for local_s >= 0 and
    more: a cumulative count, so that F(b) - F(a) is the count in [a, b)."""
    days = np.floor(local_s / DAY_S)
    return days * HOUR_S + np.clip(local_s - days * DAY_S - hour * HOUR_S, 0.0, HOUR_S)


def _weekend_seconds_in_hour(local_s: np.ndarray, hour: int) -> np.ndarray:
    """Seconds of local hour ``hour`` of Saturdays and Sundays in [0, local_s): a
    cumulative count, as :func:`_seconds_in_hour`."""
    weeks = np.floor(local_s / WEEK_S)
    rest = local_s - weeks * WEEK_S
    return weeks * 2 * HOUR_S + sum(np.clip(rest - day * DAY_S - hour * HOUR_S, 0.0, HOUR_S)
                                    for day in (5, 6))


def _hourly(device: np.ndarray, on: np.ndarray, off: np.ndarray, end_s: float,
            offset_s: np.ndarray) -> pl.DataFrame:
    shift = offset_s[device]

    def ratio(online: float, exposure: float) -> float:
        return online / exposure if exposure > 0 else math.nan

    columns: dict[str, list[float]] = {"online_share": [], "weekday_share": [],
                                       "weekend_share": []}
    for hour in range(24):
        online = np.sum(_seconds_in_hour(off + shift, hour) - _seconds_in_hour(on + shift, hour))
        exposure = np.sum(_seconds_in_hour(end_s + offset_s, hour)
                          - _seconds_in_hour(offset_s, hour))
        weekend = np.sum(_weekend_seconds_in_hour(off + shift, hour)
                         - _weekend_seconds_in_hour(on + shift, hour))
        weekend_exposure = np.sum(_weekend_seconds_in_hour(end_s + offset_s, hour)
                                  - _weekend_seconds_in_hour(offset_s, hour))
        columns["online_share"].append(ratio(online, exposure))
        columns["weekday_share"].append(ratio(online - weekend, exposure - weekend_exposure))
        columns["weekend_share"].append(ratio(weekend, weekend_exposure))
    return pl.DataFrame({"hour": np.arange(24, dtype=np.int64), **columns})


def _seconds_in_weekend(local_s: np.ndarray | float) -> np.ndarray:
    """Seconds of local Saturdays and Sundays (days 5 and 6 of each week from local
    time 0, a Monday 00:00) in [0, local_s): a cumulative count, so that F(b) - F(a) is
    the count in [a, b) for any a <= b, negative ones too."""
    weeks = np.floor(np.asarray(local_s, dtype=float) / WEEK_S)
    return weeks * 2 * DAY_S + np.clip(local_s - weeks * WEEK_S - 5 * DAY_S, 0.0, 2 * DAY_S)


def _weekly(device: np.ndarray, on: np.ndarray, off: np.ndarray, end_s: float,
            offset_s: np.ndarray) -> tuple[float, float]:
    """(weekday, weekend) online share of the intervals, cut to [0, end_s), on the local
    days of the devices at ``offset_s``."""
    shift = offset_s[device]
    weekend_online = float(np.sum(_seconds_in_weekend(off + shift)
                                  - _seconds_in_weekend(on + shift)))
    weekend = float(np.sum(_seconds_in_weekend(end_s + offset_s)
                           - _seconds_in_weekend(offset_s)))
    weekday = offset_s.size * end_s - weekend
    weekday_online = float(np.sum(off - on)) - weekend_online
    return (weekday_online / weekday if weekday > 0 else math.nan,
            weekend_online / weekend if weekend > 0 else math.nan)


def _row(name: str, values: np.ndarray) -> dict[str, object]:
    row: dict[str, object] = {"statistic": name, "count": int(values.size),
                              "mean": float(values.mean()) if values.size else None}
    qs = np.quantile(values, QUANTILES) if values.size else [None] * len(QUANTILES)
    row.update({name: None if v is None else float(v)
                for name, v in zip(list(SUMMARY_SCHEMA)[3:], qs, strict=True)})
    return row


def _sessions_and_gaps(device: np.ndarray, on: np.ndarray, off: np.ndarray,
                       end_s: float) -> tuple[np.ndarray, np.ndarray]:
    """Sessions seen whole in the window, and gaps between a device's sessions; the
    intervals sorted by (device, on), disjoint, cut to the window."""
    inside = (on > 0) & (off < end_s)
    same = device[1:] == device[:-1]
    return (off - on)[inside], (on[1:] - off[:-1])[same & (on[1:] > off[:-1])]


def _per_day(device: np.ndarray, on: np.ndarray, off: np.ndarray, end_s: float,
             num_devices: int) -> np.ndarray:
    """Distinct devices online in each whole UTC day of the window."""
    num_days = int(end_s // DAY_S)
    first = np.floor(on / DAY_S).astype(np.int64)
    last = np.minimum(np.ceil(off / DAY_S).astype(np.int64) - 1, num_days - 1)
    spans = np.maximum(last - first + 1, 0)
    rows = np.repeat(np.arange(device.size), spans)
    starts = np.cumsum(spans) - spans
    day = first[rows] + np.arange(rows.size) - starts[rows]
    pairs = np.unique(day * num_devices + device[rows])  # (day, device), each once
    return np.bincount(pairs // num_devices, minlength=num_days)


def check_stats_size(t_on_s: np.ndarray, t_off_s: np.ndarray, num_devices: int,
                     end_s: float, source: str, devices: str = "") -> None:
    """InputError (one line) when :func:`availability_stats` of these intervals would
    take more than MAX_WORK_BYTES, estimated before it allocates from what its arrays
    scale with: the intervals, the devices (their online shares), the window's whole
    days and the (device, day) pairs of the devices online per day, each interval one
    for every day it touches. ``source`` names the trace or key, ``devices`` where
    ``num_devices`` comes from."""
    num_days = float(end_s // DAY_S)
    on, off = np.clip(t_on_s, 0.0, end_s), np.clip(t_off_s, 0.0, end_s)
    days_touched = np.minimum(np.ceil(off / DAY_S) - 1, num_days - 1) - np.floor(on / DAY_S) + 1
    pairs = float(np.sum(np.maximum(days_touched, 0.0)[on < off]))
    terms = {f"its {on.size} intervals": _BYTES_PER_INTERVAL * on.size,
             f"{num_devices} device{'s' * (num_devices != 1)}{devices}":
                 _BYTES_PER_DEVICE * float(num_devices),
             f"{num_days:.3g} whole days (to {end_s:.3g} s)": _BYTES_PER_DAY * num_days,
             f"the devices online per day ({pairs:.3g} device-days)":
                 _BYTES_PER_DEVICE_DAY * pairs}
    top = max(terms, key=lambda k: terms[k])
    check_work_bytes(sum(terms.values()), f"{source}: statistics over {top}")


def availability_stats(device: np.ndarray, t_on_s: np.ndarray, t_off_s: np.ndarray,
                       num_devices: int, end_s: float,
                       utc_offset_s: np.ndarray | None = None,
                       source: str = "availability") -> AvailabilityStats:
    """Statistics (module docstring) of online intervals sorted by (device, t_on_s),
    a device's intervals disjoint, as ``read_trace`` and ``Availability.intervals``
    give them; ``utc_offset_s`` (num_devices,) makes the hours local. InputError,
    naming ``source``, where they would take too much memory (:func:`check_stats_size`)."""
    check_stats_size(t_on_s, t_off_s, num_devices, end_s, source)
    on, off = np.clip(t_on_s, 0.0, end_s), np.clip(t_off_s, 0.0, end_s)
    keep = on < off
    device, on, off = device[keep], on[keep], off[keep]
    joined = np.ones(device.size, dtype=bool)  # touching intervals: one session
    joined[1:] = ~((device[1:] == device[:-1]) & (on[1:] == off[:-1]))
    ends = np.append(np.flatnonzero(joined)[1:] - 1, device.size - 1) if device.size else joined
    device, on, off = device[joined], on[joined], off[ends]
    offsets = np.zeros(num_devices) if utc_offset_s is None else np.asarray(utc_offset_s, float)
    share = np.bincount(device, weights=off - on, minlength=num_devices) / end_s
    sessions, gaps = _sessions_and_gaps(device, on, off, end_s)
    summary = pl.DataFrame(schema=SUMMARY_SCHEMA, data=[
        _row(STATISTICS[0], share), _row(STATISTICS[1], sessions), _row(STATISTICS[2], gaps),
        _row(STATISTICS[3], _per_day(device, on, off, end_s, num_devices).astype(np.float64))])
    return AvailabilityStats(_hourly(device, on, off, end_s, offsets), summary, share,
                             num_devices, end_s, utc_offset_s is not None,
                             *_weekly(device, on, off, end_s, offsets))


def trace_file_stats(path: Path, num_devices: int | None = None) -> AvailabilityStats:
    """Statistics of a trace file over [0, its recorded window end, else its latest
    finite switch time), hours in UTC; ``num_devices`` counts the devices never online
    too (default: its recorded client count, else the highest client_idx + 1: a trace
    names only devices that are online at some time; simfl.population.trace's metadata).
    InputError where they would take too much memory, judged before they are made (for a
    ``num_devices`` beyond it, before the trace is read)."""
    recorded = trace_metadata(path)
    given = " (--num-devices)" if num_devices is not None else " (recorded in the trace)"
    num_devices = num_devices if num_devices is not None else recorded.num_clients
    if num_devices is not None:
        check_work_bytes(_BYTES_PER_DEVICE * float(num_devices),
                         f"{path}: statistics of num_devices = {num_devices} devices{given}")
    device, on, off = read_trace(path, num_devices)
    if not device.size:
        raise InputError(f"{path}: the trace holds no online interval")
    count = int(device.max(initial=-1)) + 1 if num_devices is None else num_devices
    end_s = window_end(on, off, recorded.end_s or math.inf)
    check_stats_size(on, off, count, end_s, str(path),
                     given if num_devices is not None else f" (client_idx up to {count - 1})")
    return availability_stats(device, on, off, count, end_s, source=str(path))


def model_stats(availability: Availability, utc_offset_s: np.ndarray,
                end_s: float = math.inf) -> AvailabilityStats:
    """Statistics of a population's availability (e.g. the diurnal model's draws) over
    [0, its horizon) (or [0, ``end_s``): a replayed trace's window), hours local to each
    device's UTC offset."""
    device, on, off = availability.intervals()
    window = end_s if math.isfinite(end_s) else window_end(on, off, availability.horizon_s)
    return availability_stats(device, on, off, availability.num_devices, window, utc_offset_s,
                              source="population.availability")

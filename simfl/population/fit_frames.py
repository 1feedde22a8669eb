"""What a fit of the habits model reads: online intervals and what frames them (devices,
UTC offsets, window, regions), from a trace file or a built population, and whether the
fit fits in memory (simfl.population.fit; docs/design.md §3)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from simfl.errors import InputError
from simfl.population.availability import Availability, check_work_bytes
from simfl.population.diurnal import DAY_S
from simfl.population.trace import read_trace, trace_metadata

# Peak bytes of a fit (check_fit_size) per device and local hour of the window (its
# online and observed seconds, the copies that set time aside or keep weekdays, the
# bursts' hourly series and lag sums, and their temporaries: 95 to 99 measured with
# every component asked for, 55 to 68 with none), and per interval.
_BYTES_PER_DEVICE_HOUR = 112
_BYTES_PER_INTERVAL = 128


def check_fit_size(num_devices: int, horizon_s: float, num_intervals: int, source: str,
                   devices: str = "") -> None:
    """InputError (one line) when a fit of ``num_devices`` devices over [0, horizon_s)
    would take more than MAX_WORK_BYTES: it holds each device's online and observed
    seconds in every local hour of the window (simfl.population.fit_moments). Judged before
    anything is allocated; ``source`` names the trace or key, ``devices`` where
    ``num_devices`` comes from."""
    hours = 24 * (math.ceil(horizon_s / DAY_S) + 2) if math.isfinite(horizon_s) else math.inf
    check_work_bytes(_BYTES_PER_DEVICE_HOUR * float(num_devices) * hours
                     + _BYTES_PER_INTERVAL * num_intervals,
                     f"{source}: a fit of {num_devices} device{'s' * (num_devices != 1)}"
                     f"{devices} hour by hour over {horizon_s / DAY_S:.3g} days "
                     f"({num_devices * hours:.3g} device-hours)")


@dataclass(frozen=True)
class Observed:
    """Online intervals to fit (and to check the fit against), sorted by (device, t_on_s)
    as read_trace and Availability.intervals give them, and what frames them."""

    device: np.ndarray
    t_on_s: np.ndarray
    t_off_s: np.ndarray
    utc_offset_s: np.ndarray  # (N,) devices 0..N-1; zeros for a trace
    horizon_s: float  # the window [0, horizon_s)
    local_time: bool  # the offsets are known (a scenario's devices); else UTC (a trace)
    source: str  # the trace or key, for messages
    region: np.ndarray | None = None  # (N,) each device's region (a scenario's); None: one
    num_regions: int = 1

    @property
    def num_devices(self) -> int:
        return int(self.utc_offset_s.shape[0])


def availability_observed(availability: Availability, utc_offset_s: np.ndarray,
                          region: np.ndarray | None = None, num_regions: int = 1
                          ) -> Observed:
    """A built population's availability (e.g. a scenario's) over its horizon, or, for a
    replayed trace (no horizon), the whole days up to its last start; its devices'
    regions where given."""
    device, t_on, t_off = availability.intervals()
    horizon_s = availability.horizon_s
    if not math.isfinite(horizon_s):
        horizon_s = _days_to_last_start(t_on)
    return Observed(device, t_on, t_off, np.asarray(utc_offset_s, dtype=float), horizon_s,
                    True, "population.availability", region, num_regions)


def trace_observed(path: str | Path, horizon_s: float | None = None,
                   num_devices: int | None = None) -> Observed:
    """A trace file (simfl.population.trace): devices 0..``num_devices`` − 1 (default: its
    recorded client count, else up to its highest client_idx), local time = UTC (a trace
    has no offsets), over [0, horizon_s), by default its recorded window, else the whole
    days up to the last interval's start."""
    recorded = trace_metadata(path)
    given = " (--num-devices)" if num_devices else " (recorded in the trace)"
    num_devices = num_devices or recorded.num_clients
    device, t_on, t_off = read_trace(path, num_devices or int(np.iinfo(np.int64).max))
    if device.size == 0:
        raise InputError(f"{path}: the trace holds no online interval")
    horizon_s = horizon_s or recorded.end_s or _days_to_last_start(t_on)
    count = int(device.max()) + 1 if num_devices is None else num_devices
    check_fit_size(count, horizon_s, int(device.size), str(path),
                   given if num_devices else f" (client_idx up to {count - 1})")
    return Observed(device, t_on, t_off, np.zeros(count), horizon_s, False, str(path))


def _days_to_last_start(t_on_s: np.ndarray) -> float:
    """The whole days [0, k days) that hold every interval's start."""
    if t_on_s.size == 0:
        raise InputError("no online interval to fit")
    return max(1, math.ceil(float(t_on_s.max()) / DAY_S)) * DAY_S

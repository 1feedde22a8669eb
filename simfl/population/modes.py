"""simfl's own availability modes: one factory each, and the hooks each declares in its
row of simfl.plugins.AVAILABILITY (what simfl asks a mode beyond its intervals; a
plug-in declares the same hooks: docs/extending.md).

- ``always``: one interval ``[0, inf)`` a device. Hooks: rates (a profile of ones),
  profile, intervals.
- ``diurnal``: the diurnal model (simfl.population.diurnal): online by the local hour's
  probability, sessions of mean ``session_mean_s``. Hooks: rates, profile, intervals.
- ``habits``: the diurnal model with each device's own propensity, phase and session
  length (simfl.population.habits). Hooks: populate, habits, rates, intervals.
- ``trace``: a trace replayed (simfl.population.trace_map). Hooks: populate, rates,
  intervals, check_devices (simfl.population.trace_map.check_trace_devices).

The hooks (simfl.plugins.HOOKS): ``populate`` draws the training devices' availability
together with what the run keeps beside it (:class:`~simfl.population.availability.
Drawn`), given each device's population.covariate; ``habits`` draws each device's own
habits (the unseen test devices' too); ``rates`` gives each device's true online
probability (the ``ipw_known`` oracle); ``profile`` a device's long-run online share and
mean session for devices.parquet where it has no habits or trace of its own;
``intervals`` a device's expected online intervals for the memory guard
(simfl.runs.memory); ``check_devices`` refuses a device count the mode cannot serve
before the data are loaded.
"""

from __future__ import annotations

import math
from contextlib import suppress
from pathlib import Path

import numpy as np

from simfl.errors import InputError
from simfl.population.availability import (
    Availability,
    Drawn,
    always_online,
    check_diurnal_work,
    from_csr,
    trace_availability,
)
from simfl.population.diurnal import ProfileRates, diurnal_intervals
from simfl.population.habits import Habits, draw_habits, habit_intervals
from simfl.population.table import DeviceTable
from simfl.population.trace_map import MappedTrace, TraceRates
from simfl.rng import Streams
from simfl.scenario import AvailabilityConfig

# A CSV trace's bytes a row, to count its intervals from its size (simfl.runs.memory)
CSV_ROW_BYTES = 40


def always(cfg: AvailabilityConfig, devices: DeviceTable, streams: Streams) -> Availability:
    """Every device online on ``[0, inf)``."""
    return always_online(devices.region_idx, len(devices.region_names))


def diurnal(cfg: AvailabilityConfig, devices: DeviceTable, streams: Streams) -> Availability:
    """The diurnal model: online by ``online_prob_by_hour`` at the device's local time,
    sessions of mean ``session_mean_s``, drawn up to ``horizon_s`` from the stream
    ``availability`` (simfl.population.diurnal)."""
    check_diurnal_work(cfg, devices.num_devices)
    return _drawn(cfg, devices, diurnal_intervals(
        devices.utc_offset_s, cfg.online_prob_by_hour, cfg.session_mean_s, cfg.horizon_s,
        streams.numpy("availability")))


def habits(cfg: AvailabilityConfig, devices: DeviceTable, streams: Streams) -> Availability:
    """The habits mode with habits drawn apart from any covariate (a run ties them to
    population.covariate: :func:`populate_habits`)."""
    return populate_habits(cfg, devices, streams, None).availability


def populate_habits(cfg: AvailabilityConfig, devices: DeviceTable, streams: Streams,
                    covariate: np.ndarray | None) -> Drawn:
    """Each device's habits (:func:`device_habits`), then its intervals under them from
    the stream ``availability`` (simfl.population.habits)."""
    own = device_habits(cfg, devices, covariate, streams)
    check_diurnal_work(cfg, devices.num_devices, own)
    intervals = habit_intervals(devices.utc_offset_s, own, cfg.horizon_s,
                                streams.numpy("availability"))
    return Drawn(_drawn(cfg, devices, intervals), habits=own)


def device_habits(cfg: AvailabilityConfig, devices: DeviceTable, covariate: np.ndarray | None,
                  streams: Streams) -> Habits:
    """Each device's propensity, phase and session length, rank-correlated with
    ``covariate`` within its region as configured, from the stream ``population.habits``."""
    return draw_habits(cfg.habits, cfg.online_prob_by_hour, cfg.session_mean_s,
                       devices.region_idx, covariate, streams.numpy("population.habits"))


def _drawn(cfg: AvailabilityConfig, devices: DeviceTable,
           intervals: tuple[np.ndarray, np.ndarray, np.ndarray]) -> Availability:
    """The drawn CSR intervals as an Availability; InputError when none is online."""
    availability = from_csr(*intervals, devices.region_idx, len(devices.region_names),
                            cfg.horizon_s)
    if availability.t_on_s.size == 0:
        raise InputError("population.availability: no device is ever online before "
                         f"horizon_s = {cfg.horizon_s:.0f} s (online_prob_by_hour too low "
                         f"for {devices.num_devices} devices)")
    return availability


def trace(cfg: AvailabilityConfig, devices: DeviceTable, streams: Streams) -> Availability:
    """The trace at ``trace_path`` replayed, mapped apart from any covariate (a run
    ties the mapping to population.covariate: :func:`populate_trace`)."""
    return trace_availability(cfg, devices, streams)[0]


def populate_trace(cfg: AvailabilityConfig, devices: DeviceTable, streams: Streams,
                   covariate: np.ndarray | None) -> Drawn:
    """The trace replayed, each device's trace device kept (devices.parquet, ipw_known)."""
    availability, mapped = trace_availability(cfg, devices, streams, covariate)
    return Drawn(availability, trace=mapped)


def always_rates(cfg: AvailabilityConfig, devices: DeviceTable,
                 mapped: MappedTrace | None) -> ProfileRates:
    """Online with probability 1 at every hour."""
    return ProfileRates(devices.utc_offset_s, (1.0,) * 24)


def profile_rates(cfg: AvailabilityConfig, devices: DeviceTable,
                  mapped: MappedTrace | None) -> ProfileRates:
    """``online_prob_by_hour`` at each device's local time (diurnal; habits without a
    device's own habits)."""
    return ProfileRates(devices.utc_offset_s, cfg.online_prob_by_hour)


def trace_rates(cfg: AvailabilityConfig, devices: DeviceTable,
                mapped: MappedTrace | None) -> TraceRates | None:
    """The trace's own empirical rates by local hour (None: no mapped trace given)."""
    return None if mapped is None else TraceRates(mapped, devices.utc_offset_s)


def always_profile(cfg: AvailabilityConfig) -> tuple[float, float]:
    """Online throughout, in no session."""
    return 1.0, math.nan


def diurnal_profile(cfg: AvailabilityConfig) -> tuple[float, float]:
    """The profile's mean, sessions of ``session_mean_s``."""
    return float(np.mean(cfg.online_prob_by_hour)), cfg.session_mean_s


def always_interval_count(cfg: AvailabilityConfig, train_devices: int) -> float:
    """One interval a device, ``[0, inf)``."""
    return 1.0


def diurnal_interval_count(cfg: AvailabilityConfig, train_devices: int) -> float:
    """The online share over the mean session across the horizon, plus the session under
    way at the horizon."""
    return cfg.horizon_s * float(np.mean(cfg.online_prob_by_hour)) / cfg.session_mean_s + 1.0


def habits_interval_count(cfg: AvailabilityConfig, train_devices: int) -> float:
    """As diurnal, with sessions lognormal around the mean, whose inverse has mean
    exp(sd^2) / mean."""
    spread = math.exp(cfg.habits.session_log_sd ** 2)
    return cfg.horizon_s * float(np.mean(cfg.online_prob_by_hour)) * spread \
        / cfg.session_mean_s + 1.0


def trace_interval_count(cfg: AvailabilityConfig, train_devices: int) -> float:
    """The trace's rows over the training devices (0 where they are not known)."""
    return _trace_rows(Path(cfg.trace_path)) / train_devices if train_devices else 0.0


def _trace_rows(path: Path) -> float:
    """Intervals of a trace file: a Parquet file's rows (from its footer), a CSV file's
    by its size; 0 if it cannot be read (its loader says why)."""
    with suppress(Exception):
        if path.suffix.lower() == ".parquet":
            import pyarrow.parquet as pq

            return float(pq.ParquetFile(path).metadata.num_rows)
        return path.stat().st_size / CSV_ROW_BYTES
    return 0.0


"""Which devices are online, by availability mode, and what drawing it may cost.

A mode is a row of simfl.plugins.AVAILABILITY (simfl's own: simfl.population.modes):
its factory draws the devices' online intervals, and its hooks say what a run keeps
beside them (:func:`populate`: the habits or mapped trace), each device's own habits
(:func:`device_habits`), the true online rates of the ``ipw_known`` oracle
(:func:`known_rates`) and a device's profile for devices.parquet
(:func:`habit_columns`). A trace is replayed by :func:`trace_availability`. Before any
interval is drawn the work is judged from each device's expected number of intervals
(:func:`expected_intervals`) and refused in one line above MAX_SESSION_STEPS steps or
MAX_WORK_BYTES of memory (:func:`check_diurnal_work`, :func:`check_work_bytes`).

The intervals themselves and the exact queries over them (:class:`Availability`, the
servers' :func:`sample_online`) are simfl.population.online, whose names this module
also gives.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from simfl.errors import InputError
from simfl.plugins import AVAILABILITY, build
from simfl.population.diurnal import (
    DAY_S,
    GRID_STEP_S,
    ProfileRates,
    diurnal_hazards,
    online_prob,
)
from simfl.population.habits import (
    HabitRates,
    Habits,
    class_sessions_per_day,
    propensity,
)
from simfl.population.online import (
    Availability,
    PastHorizon,
    always_online,
    from_csr,
    from_intervals,
    sample_online,
)
from simfl.population.table import DeviceTable
from simfl.population.trace_map import (
    MappedTrace,
    TraceRates,
    assign,
    load_trace_devices,
    map_trace,
)
from simfl.rng import Streams
from simfl.scenario import AvailabilityConfig

__all__ = [
    "INTERVAL_BYTES",
    "MAX_INTERVALS",
    "MAX_SESSION_STEPS",
    "MAX_WORK_BYTES",
    "Availability",
    "Drawn",
    "PastHorizon",
    "always_online",
    "build_availability",
    "check_diurnal_work",
    "check_work_bytes",
    "device_habits",
    "expected_intervals",
    "from_csr",
    "from_intervals",
    "habit_columns",
    "known_rates",
    "overlay_intervals",
    "populate",
    "sample_online",
    "trace_availability",
]

_KEY = "population.availability.mode"
# The diurnal precomputation holds ~48 bytes per online interval at its peak: refuse a
# configuration that needs more than this many intervals (~5 GB) before drawing any.
MAX_INTERVALS = 100_000_000
INTERVAL_BYTES = 48
# The most memory one precomputation of availability, or of its statistics or fit, may
# take by its estimate (MAX_INTERVALS intervals of the diurnal model's draw, 4.5 GiB):
# refused above it before anything is allocated (check_work_bytes).
MAX_WORK_BYTES = INTERVAL_BYTES * MAX_INTERVALS
# The diurnal and habits draws advance every device one session a step (0.06 to 0.2 ms a
# step once few devices are left, measured at one thread on a 2-core CPU), so the device
# with the most sessions sets the number of steps: refused above this (3 to 10 s).
MAX_SESSION_STEPS = 50_000
# A habit class's hazard tables (simfl.population.diurnal.exact_hazards): about 8 arrays
# of the day's grid at their peak (measured: 83 kB a class at 28,000 classes).
_CLASS_TABLE_BYTES = 8 * 8 * (DAY_S / GRID_STEP_S + 1)


@dataclass(frozen=True)
class Drawn:
    """What an availability mode draws for the training devices: their availability and
    what a run keeps beside it (devices.parquet, the ipw_known oracle)."""

    availability: Availability
    habits: Habits | None = None  # each device's own habits (mode habits)
    trace: MappedTrace | None = None  # the trace device each replays (mode trace)


def build_availability(cfg: AvailabilityConfig, devices: DeviceTable,
                       streams: Streams) -> Availability:
    """The availability of ``devices`` for the configured mode: its factory's
    (simfl.plugins.AVAILABILITY; simfl's own are in simfl.population.modes)."""
    mode = AVAILABILITY.lookup(cfg.mode, _KEY)
    made: Availability = build(mode, _KEY, cfg, cfg, devices, streams, expect=Availability)
    return made


def populate(cfg: AvailabilityConfig, devices: DeviceTable, streams: Streams,
             covariate: np.ndarray | None = None) -> Drawn:
    """The training devices' availability and what the mode keeps beside it: its
    ``populate`` hook's (habits, a trace: tied to each device's population.covariate),
    else its factory's intervals alone. A plug-in's hook that returns no Drawn is an
    InputError naming it."""
    mode = AVAILABILITY.lookup(cfg.mode, _KEY)
    made = mode.hook("populate", _KEY)
    if made is None:
        return Drawn(build_availability(cfg, devices, streams))
    drawn = made(cfg, devices, streams, covariate)
    if not isinstance(drawn, Drawn):
        raise InputError(f"'{_KEY}' = {mode.name!r}: its populate hook returned a "
                         f"{type(drawn).__name__}, not a simfl.population.availability.Drawn")
    return drawn


def device_habits(cfg: AvailabilityConfig, devices: DeviceTable, covariate: np.ndarray | None,
                  streams: Streams) -> Habits | None:
    """Each device's own habits where the mode draws them (its ``habits`` hook); None
    otherwise."""
    draw = AVAILABILITY.lookup(cfg.mode, _KEY).hook("habits", _KEY)
    return None if draw is None else draw(cfg, devices, covariate, streams)


def trace_availability(cfg: AvailabilityConfig, devices: DeviceTable, streams: Streams,
                       covariate: np.ndarray | None = None) -> tuple[Availability, MappedTrace]:
    """A trace replayed by ``devices``: each data device replays the trace device that
    ``trace_mapping`` (coupled to ``covariate`` by ``trace_covariate_correlation``)
    gives it, drawn from the stream ``population.trace_map`` (simfl.population.trace_map).
    InputError (one line) where the counts do not fit the mapping, where the copies a
    mapping makes would take more than MAX_WORK_BYTES (counted before any is made) and
    where no device is ever online."""
    if not cfg.trace_path:
        raise InputError("population.availability.mode = 'trace' needs "
                         "population.availability.trace_path")
    trace = load_trace_devices(cfg.trace_path)
    given = assign(trace, cfg, devices.region_idx, covariate, streams.numpy("population.trace_map"))
    total = float(np.diff(trace.offsets)[given].sum())
    check_work_bytes(INTERVAL_BYTES * total,
                     f"population.availability.trace_mapping = {cfg.trace_mapping!r}: the "
                     f"{devices.num_devices} training devices' {total:.3g} intervals (copies of "
                     f"{cfg.trace_path}'s {trace.t_on_s.size})", "use a shorter trace")
    mapped = map_trace(trace, given, cfg.trace_mapping)
    if mapped.t_on_s.size == 0:
        raise InputError(f"{cfg.trace_path}: no training device's trace device is ever online "
                         "(population.availability.trace_path)")
    traced = from_csr(mapped.offsets, mapped.t_on_s, mapped.t_off_s, devices.region_idx,
                      len(devices.region_names))
    return traced, mapped


def known_rates(cfg: AvailabilityConfig, devices: DeviceTable, habits: Habits | None = None,
                trace: MappedTrace | None = None
                ) -> ProfileRates | HabitRates | TraceRates | None:
    """The true online probability of each device, for a mode that states it (its
    ``rates`` hook): each device's ``habits`` where given, else the mode's (a trace's:
    its own empirical rates by local hour, ``trace`` the trace mapped onto ``devices``,
    None without it; simfl.population.trace_map.TraceRates); None for a mode without
    rates. The oracle of the ``ipw_known`` estimator."""
    rates = AVAILABILITY.lookup(cfg.mode, _KEY).hook("rates", _KEY)
    if rates is None:
        return None
    if habits is not None:
        return HabitRates(devices.utc_offset_s, habits)
    stated: ProfileRates | TraceRates | None = rates(cfg, devices, trace)
    return stated


def check_work_bytes(need_bytes: float, what: str, fix: str = "") -> None:
    """InputError (one line) when a computation's estimated peak memory ``need_bytes``,
    made before any of it is allocated, exceeds MAX_WORK_BYTES; ``what`` names the key
    or file and what the estimate counts, ``fix`` what to change."""
    if need_bytes <= MAX_WORK_BYTES:
        return
    raise InputError(f"{what} would take about {need_bytes / 2**30:.3g} GiB of memory "
                     f"(limit {MAX_WORK_BYTES / 2**30:.3g} GiB)" + (f": {fix}" if fix else ""))


def expected_intervals(cfg: AvailabilityConfig, num_devices: int,
                       habits: Habits | None = None) -> np.ndarray:
    """(N,) each device's expected number of online intervals over ``[0, horizon_s)``
    in the diurnal model, or in habits mode with each device's own ``habits``: its
    sessions a day, ``∫ p(u) μ(u) du`` (online probability times off-hazard, which the
    exact-marginal construction makes the rate of online -> offline switches), times
    the horizon's days, plus one (a session under way at the horizon). Exact for each
    device's drawn habits: the tail of short sessions a wide ``session_log_sd`` gives
    counts as it is, not through the devices' mean."""
    days = cfg.horizon_s / DAY_S
    if habits is not None:
        return (class_sessions_per_day(habits)[habits.habit_class] * days + 1
                + overlay_intervals(habits, cfg.horizon_s))
    _, off_hazard = diurnal_hazards(cfg.online_prob_by_hour, cfg.session_mean_s)
    mid = np.arange(GRID_STEP_S / 2, DAY_S, GRID_STEP_S)
    per_day = float(online_prob(cfg.online_prob_by_hour, mid)
                    @ np.diff(off_hazard.cumulative[0]))
    return np.full(num_devices, per_day * days + 1)


def overlay_intervals(habits: Habits, horizon_s: float, charging: bool = True
                      ) -> np.ndarray:
    """(N,) each device's expected number of engaged spells (bursts) and, with
    ``charging``, charging windows over ``[0, horizon_s)`` (simfl.population.overlays),
    each plus one (a spell or window under way at 0)."""
    n = habits.habit_class.shape[0]
    count = np.zeros(n)
    if habits.dormant_mean_s > 0:
        a = habits.engaged
        cycle = habits.dormant_mean_s / np.maximum(1 - a, 1e-300)  # engaged + dormant mean
        count += np.where(a < 1, horizon_s / cycle + 1, 1.0)
    if charging and habits.charge_prob > 0:
        count += habits.charge_prob * horizon_s / DAY_S + 2
    return count


def check_diurnal_work(cfg: AvailabilityConfig, num_devices: int,
                       habits: Habits | None = None) -> None:
    """InputError (one line, naming the key) when drawing the diurnal or habits model's
    intervals would take too long or too much memory, judged before any is drawn from
    each device's expected number of intervals (:func:`expected_intervals`).

    The draw takes one step per session of the device with the most (refused above
    MAX_SESSION_STEPS: a wide ``habits.session_log_sd`` gives a few devices sessions
    of milliseconds, millions of them, however few devices there are); its memory is
    INTERVAL_BYTES an interval and, in habits mode, each habit class's hazard tables
    (refused above MAX_WORK_BYTES)."""
    per_device = expected_intervals(cfg, num_devices, habits)
    if not per_device.size:
        return
    spread = habits is not None and cfg.habits.session_log_sd > 0
    horizon = f"horizon_s = {cfg.horizon_s:.6g} s"
    sessions = per_device  # of the habits process, drawn a step each
    if habits is not None and (habits.dormant_mean_s > 0 or habits.charge_prob > 0):
        sessions = per_device - overlay_intervals(habits, cfg.horizon_s)
        spells = float(np.max(overlay_intervals(habits, cfg.horizon_s, charging=False)))
        if not spells <= MAX_SESSION_STEPS:
            raise InputError(
                f"population.availability.habits.dormant_mean_h = "
                f"{cfg.habits.dormant_mean_h!r}: a device would have about {spells:.3g} "
                f"engaged spells over {horizon}, drawn one step each (limit "
                f"{MAX_SESSION_STEPS:.0e} steps): raise dormant_mean_h or engaged_share")
    busiest = int(np.argmax(sessions))
    steps = float(sessions[busiest])
    if not steps <= MAX_SESSION_STEPS:
        if habits is not None and spread and \
                habits.session_mean_s[busiest] < cfg.session_mean_s:
            raise InputError(
                f"population.availability.habits.session_log_sd = "
                f"{cfg.habits.session_log_sd!r}: its device with the most sessions (of "
                f"mean {habits.session_mean_s[busiest]:.3g} s against session_mean_s = "
                f"{cfg.session_mean_s!r} s) would have about {steps:.3g} online sessions "
                f"over {horizon}, drawn one step each (limit {MAX_SESSION_STEPS:.0e} steps, "
                f"seconds of work): lower session_log_sd, raise session_mean_s or shorten "
                f"horizon_s")
        raise InputError(
            f"population.availability.session_mean_s = {cfg.session_mean_s!r} s: a device "
            f"would have about {steps:.3g} online sessions over {horizon}, drawn one step "
            f"each (limit {MAX_SESSION_STEPS:.0e} steps, seconds of work): raise "
            f"session_mean_s or shorten horizon_s")
    total = float(per_device.sum())
    num_classes = 0 if habits is None else int(habits.class_shift.shape[0])
    days_a_table = 1 if habits is None else habits.period_s / DAY_S
    tables = _CLASS_TABLE_BYTES * days_a_table * num_classes
    if tables > INTERVAL_BYTES * total:
        check_work_bytes(
            INTERVAL_BYTES * total + tables,
            f"population.availability.habits.propensity_logit_sd = "
            f"{cfg.habits.propensity_logit_sd!r} with session_log_sd = "
            f"{cfg.habits.session_log_sd!r}: the hazard tables of the {num_devices} devices' "
            f"{num_classes} habit classes", "lower the spreads or use fewer devices")
    key = (f"population.availability.habits.session_log_sd = {cfg.habits.session_log_sd!r} "
           f"with session_mean_s = {cfg.session_mean_s!r} s" if spread else
           f"population.availability.session_mean_s = {cfg.session_mean_s!r} s")
    check_work_bytes(
        INTERVAL_BYTES * total + tables,
        f"{key}: the {num_devices} devices' {total:.3g} online sessions over {horizon}",
        "raise session_mean_s or shorten horizon_s"
        + (" or lower session_log_sd" if spread else ""))


def habit_columns(cfg: AvailabilityConfig, num_devices: int, habits: Habits | None,
                  trace: MappedTrace | None = None) -> dict[str, np.ndarray]:
    """Each device's availability habits as devices.parquet columns: propensity (its
    long-run online share; a trace's: over the trace's window, NaN without ``trace``),
    logit_shift, phase_h and session_mean_s (NaN where the mode has no sessions; a
    trace's: of the sessions wholly in its window), engaged_share (bursts; else 1) and
    charge_start_h (NaN without charging windows). Without habits every device has the
    mode's."""
    plain = {"engaged_share": np.ones(num_devices), "charge_start_h": np.full(num_devices,
                                                                              math.nan)}
    if trace is not None:
        return {"propensity": trace.propensity, "logit_shift": np.zeros(num_devices),
                "phase_h": np.zeros(num_devices), "session_mean_s": trace.session_mean_s,
                **plain}
    if habits is not None:
        return {"propensity": propensity(habits), "logit_shift": habits.logit_shift,
                "phase_h": habits.phase_s / 3600.0, "session_mean_s": habits.session_mean_s,
                "engaged_share": habits.engaged, "charge_start_h": habits.charge_start_h}
    profile = AVAILABILITY.lookup(cfg.mode, _KEY).hook("profile", _KEY)
    share, session = (math.nan, math.nan) if profile is None else profile(cfg)
    return {"propensity": np.full(num_devices, share),
            "logit_shift": np.zeros(num_devices), "phase_h": np.zeros(num_devices),
            "session_mean_s": np.full(num_devices, session), **plain}

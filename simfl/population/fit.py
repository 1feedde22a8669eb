"""Fitting the habits availability model to online intervals (docs/design.md §3).

Given every device's online intervals over an observation window [0, T), its UTC offset
(zeros for a plain trace: local time is then taken to be UTC), T and, where known, its
region (simfl.population.fit_frames), :func:`fit_observed` (:func:`fit_habits` on bare
arrays) estimates the parameters of ``availability.mode = "habits"``
(simfl.population.habits):

1. **Charging windows** (simfl.population.fit_charging), from each device's long
   sessions; where found, each device's windows are set aside (neither online nor
   observed) for everything below, and long sessions left out of the session lengths.
2. **Weekly rhythm** (simfl.population.fit_phones): where the devices' weekend shares
   differ from their weekday ones, the profile, phases and propensities below read
   weekdays only.
3. **Profile, phases, propensities, sessions** (simfl.population.fit_moments): the base
   moments, each with the finite window's noise taken off.
4. **Device classes** (fit_phones): a mixture of normals fitted to the ẑ_d by EM, its
   number of classes chosen by BIC; the weekend's logit shift per region (or one for
   all) given the fitted distribution of z.
5. **Bursts** (fit_phones), from the correlation of a device's daily shares a day and
   more apart; where found, the propensities' noise takes the days' correlation in and
   step 4 is done again.

Each component is fitted only where asked (``components``, ``trace fit --components``)
and kept only where its test finds it (:class:`simfl.population.fit_phones.Decision`);
a trace where none is found is fitted exactly as the plain habits model was.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from simfl.errors import InputError
from simfl.population.availability import Availability
from simfl.population.diurnal import DAY_S, HOUR_S
from simfl.population.fit_bursts import (
    BUFFER_SESSIONS,
    Bursts,
    burst_variance,
    device_bursts,
    engaged_shares,
    top_prob,
)
from simfl.population.fit_charging import MIN_KEPT_SHARE, Charging, fit_charging, restored
from simfl.population.fit_frames import (
    Observed,
    availability_observed,
    check_fit_size,
    trace_observed,
)
from simfl.population.fit_moments import (
    DeviceSessions,
    DeviceShares,
    LocalHours,
    device_sessions,
    device_shares,
    inside_days,
    local_hours,
    noisy_shifts,
    phase_sd_h,
    session_moments,
    weekend_days,
)
from simfl.population.fit_phones import (
    COMPONENTS,
    Components,
    Decision,
    Mixture,
    propensity_mixture,
    weekend_shifts,
    weekend_test,
)
from simfl.population.fit_profile import deconvolved_profile, noise_power
from simfl.population.habits import calibrated_logits
from simfl.scenario import AvailabilityConfig, HabitsConfig


@dataclass(frozen=True)
class FittedHabits:
    """The habits model's parameters fitted to online intervals (see simfl.population.
    fit_moments for each base estimator, fit_phones and fit_charging for components)."""

    online_prob_by_hour: tuple[float, ...]  # p(h), the phase's smoothing deconvolved
    population_share_by_hour: tuple[float, ...]  # y(h), all devices' share, as observed
    session_mean_s: float
    propensity_logit_sd: float  # within each class where classes are found
    phase_sd_h: float
    session_log_sd: float
    num_devices: int  # devices in the window (all of utc_offset_s)
    num_days: float  # window length in days
    num_sessions: int  # sessions wholly inside the window, of devices with >= 2 of them
    components: Components = field(default_factory=Components)


def check_components(components: Sequence[str], name: str = "components"
                     ) -> tuple[str, ...]:
    """The components asked for, in COMPONENTS' order (InputError naming ``name`` and the
    first that is not one of them)."""
    bad = [c for c in components if c not in COMPONENTS]
    if bad:
        raise InputError(f"{name}: unknown component {bad[0]!r}; choose from "
                         f"{', '.join(COMPONENTS)}, or all, or none")
    return tuple(c for c in COMPONENTS if c in components)


def parse_components(text: str) -> tuple[str, ...]:
    """``trace fit --components``: all, none, or a comma-separated list."""
    if text.strip() in ("all", "none"):
        return COMPONENTS if text.strip() == "all" else ()
    return check_components([c.strip() for c in text.split(",")], "--components")


def fit_habits(device: np.ndarray, t_on_s: np.ndarray, t_off_s: np.ndarray,
               utc_offset_s: np.ndarray, horizon_s: float, source: str = "availability"
               ) -> FittedHabits:
    """:func:`fit_observed` of online intervals ``[t_on_s, t_off_s)`` of ``device`` (as
    read_trace returns them: non-overlapping within a device) observed over [0,
    horizon_s), devices 0..N−1 at UTC offsets ``utc_offset_s`` (N,) seconds (zeros:
    local time is UTC), in one region, every component asked for."""
    return fit_observed(Observed(np.asarray(device), np.asarray(t_on_s), np.asarray(t_off_s),
                                 np.asarray(utc_offset_s, dtype=float), horizon_s, True,
                                 source))


@dataclass(frozen=True)
class _Reading:
    """What the fit reads: the local hours with the charging windows found set aside,
    and the days it reads (weekdays only where a weekly rhythm is found)."""

    hours: LocalHours
    used: LocalHours
    weekend: np.ndarray  # (N, days)
    charging: Charging | None  # None: not found (or not asked for)
    weekly: bool
    decisions: tuple[Decision, ...]


def _reading(observed: Observed, components: tuple[str, ...]) -> _Reading:
    """Steps 1 and 2 of the module docstring."""
    offsets, end = observed.utc_offset_s, observed.horizon_s
    decisions = []
    charging = None
    if "charging" in components:
        found = fit_charging(observed.device, observed.t_on_s, observed.t_off_s, offsets, end)
        decisions.append(Decision("charging", "share of devices with a window",
                                  found.kept_share, MIN_KEPT_SHARE, found.found))
        charging = found if found.found else None
    hours = local_hours(observed.device, observed.t_on_s, observed.t_off_s, offsets, end,
                        charging.excluded if charging else None)
    weekend = weekend_days(offsets, hours.online_s.shape[1])
    weekly = False
    if "weekly" in components:
        decisions.append(weekend_test(hours, weekend,
                                      inside_days(offsets, weekend.shape[1], end)))
        weekly = decisions[-1].found
    return _Reading(hours, hours.on_days(~weekend) if weekly else hours, weekend, charging,
                    weekly, tuple(decisions))


@dataclass(frozen=True)
class _Base:
    """The base fit's profile (knots p and the population's share y) and shares."""

    profile: np.ndarray
    population: np.ndarray
    shares: DeviceShares
    region: np.ndarray  # (N,) the group of each device for the weekend's shift
    num_regions: int


def _weekend(read: _Reading, base: _Base, mixture: Mixture
             ) -> tuple[tuple[float, ...], np.ndarray]:
    """(each group's weekend shift, g calibrated over ``mixture``)."""
    g = calibrated_logits(tuple(base.profile), mixture.sd, mixture.shares, mixture.means)
    if not read.weekly:
        return (0.0,), g
    return weekend_shifts(read.hours, read.weekend, base.region, base.num_regions, mixture,
                          g), g


def _rhythm_and_bursts(read: _Reading, base: _Base, mixture: Mixture, session_mean_s: float,
                       bursts_asked: bool
                       ) -> tuple[Mixture, tuple[float, ...], Bursts | None]:
    """Steps 4 and 5 of the module docstring: the weekend's shifts, the bursts (None: not
    asked for) and, where these are found, the distribution of z fitted again."""
    shifts, g = _weekend(read, base, mixture)
    if not bursts_asked:
        return mixture, shifts, None
    z = noisy_shifts(base.shares, g)[0]
    device_shift = np.asarray(shifts)[base.region % len(shifts)]
    unread = ~read.charging.readable if read.charging else np.zeros(z.shape, dtype=bool)
    buffer_h = float(np.clip(BUFFER_SESSIONS * session_mean_s / HOUR_S, 4, 12))
    bursts = device_bursts(read.hours, g, device_shift, read.weekend, unread, buffer_h)
    if bursts.decision.found:
        extra = burst_variance(base.shares.share, engaged_shares(
            top_prob(g, z, device_shift), bursts.engaged_share), bursts.dormant_mean_h,
            read.used.observed_s.sum(axis=(1, 2)) / DAY_S, base.population)
        classes = len(mixture.means) > 1
        mixture = propensity_mixture(base.shares, base.profile, classes, extra,
                                     mixture if classes else None)[0]
        shifts = _weekend(read, base, mixture)[0]
    return mixture, shifts, bursts


def _components(mixture: Mixture, shifts: tuple[float, ...], read: _Reading,
                bursts: Bursts | None, decisions: tuple[Decision, ...]) -> Components:
    """The components found, the others at their off values."""
    fitted = Components(decisions=decisions)
    if len(mixture.means) > 1:
        fitted = replace(fitted, class_shares=mixture.shares, class_logit_means=mixture.means)
    if read.weekly:
        fitted = replace(fitted, weekend_logit_shift=shifts)
    if bursts is not None and bursts.decision.found:
        fitted = replace(fitted, dormant_mean_h=bursts.dormant_mean_h,
                         engaged_share=bursts.engaged_share)
    if read.charging:
        c = read.charging
        fitted = replace(fitted, charge_prob=c.charge_prob, charge_start_h=c.start_h,
                         charge_start_sd_h=c.start_sd_h, charge_hours=c.hours)
    return fitted


def fit_observed(observed: Observed, components: Sequence[str] = COMPONENTS) -> FittedHabits:
    """The habits model's parameters from ``observed`` (its intervals, devices' UTC
    offsets, window and, for the weekend's shift, the devices' regions where known),
    with the ``components`` asked for (the module docstring). The window must span at
    least 3 days (two whole local days per device, two halves of every hour of the
    day), and the fit fit in memory (:func:`check_fit_size`, naming its source)."""
    end = observed.horizon_s
    if not end >= 3 * DAY_S or not math.isfinite(end):
        raise InputError(f"fitting habits needs a finite window of at least 3 days, "
                         f"not {end} s")
    components = check_components(components)
    check_fit_size(observed.num_devices, end, int(observed.t_on_s.shape[0]), observed.source)
    read = _reading(observed, components)
    used = read.used
    population = used.online_s.sum(axis=(0, 1)) / used.observed_s.sum(axis=(0, 1))
    phase = phase_sd_h(used, population)
    profile = deconvolved_profile(population, phase, noise_power(
        used.online_s.sum(axis=0), used.observed_s.sum(axis=0)))
    shares = device_shares(used, None if read.charging or read.weekly else end / DAY_S)
    if read.charging:
        shares = restored(shares, read.charging.share_loss)
    mixture, chosen = propensity_mixture(shares, profile, "classes" in components)
    groups = observed.num_regions if read.weekly and observed.region is not None else 1
    region = np.zeros(observed.num_devices, dtype=np.int64) if groups == 1 else \
        np.asarray(observed.region) % groups
    session_mean, session_log_sd, used_sessions = session_moments(_sessions(observed,
                                                                            read.charging))
    mixture, shifts, bursts = _rhythm_and_bursts(
        read, _Base(profile, population, shares, region, groups), mixture, session_mean,
        "bursts" in components)
    decisions = (*read.decisions, *([chosen] if chosen else []),
                 *([bursts.decision] if bursts else []))
    return FittedHabits(
        online_prob_by_hour=tuple(float(p) for p in profile),
        population_share_by_hour=tuple(float(p) for p in population),
        session_mean_s=session_mean, propensity_logit_sd=mixture.sd, phase_sd_h=phase,
        session_log_sd=session_log_sd, num_devices=observed.num_devices,
        num_days=end / DAY_S, num_sessions=used_sessions,
        components=_components(mixture, shifts, read, bursts, decisions))


def _sessions(observed: Observed, charging: Charging | None) -> DeviceSessions:
    """The sessions wholly inside the window; with charging windows found, without the
    long ones, each device's mean divided by its truncated exponential's factor."""
    device, t_on, t_off = observed.device, observed.t_on_s, observed.t_off_s
    n, end = observed.num_devices, observed.horizon_s
    if charging is None:
        return device_sessions(device, t_on, t_off, n, end)
    keep = np.ones(t_on.shape, dtype=bool)
    keep[np.flatnonzero((t_on > 0) & (t_off < end))[charging.long_session]] = False
    sessions = device_sessions(device[keep], t_on[keep], t_off[keep], n, end)
    return DeviceSessions(sessions.count, sessions.mean_s / charging.session_factor)


def fit_availability(availability: Availability, utc_offset_s: np.ndarray) -> FittedHabits:
    """fit_observed on a built population's availability (:func:`availability_observed`)."""
    return fit_observed(availability_observed(availability, utc_offset_s))


def fit_trace(path: str | Path, horizon_s: float | None = None) -> FittedHabits:
    """fit_observed on a trace file (:func:`trace_observed`)."""
    return fit_observed(trace_observed(path, horizon_s))


# The scenario's checks (simfl.scenario.HabitsConfig): fitted values are clipped into them.
_BOUNDS = {"propensity_logit_sd": 5.0, "phase_sd_h": 12.0, "session_log_sd": 3.0}
_COMPONENT_KEYS = {"classes": ("class_shares", "class_logit_means"),
                   "weekly": ("weekend_logit_shift",),
                   "bursts": ("dormant_mean_h", "engaged_share"),
                   "charging": ("charge_prob", "charge_start_h", "charge_start_sd_h",
                                "charge_hours")}


def _written(components: Components) -> dict[str, float | tuple[float, ...]]:
    """The components' keys as written (4 decimals), within the scenario's bounds: the
    class shares positive and summing to 1, the dormant mean at least 0.0001 h."""
    shares = [max(round(s, 4), 1e-4) for s in components.class_shares]
    shares[int(np.argmax(shares))] += 1 - sum(shares)
    return {"class_shares": tuple(shares),
            "class_logit_means": tuple(round(float(np.clip(m, -10, 10)), 4)
                                       for m in components.class_logit_means),
            "weekend_logit_shift": tuple(round(w, 4) for w in components.weekend_logit_shift),
            "dormant_mean_h": round(min(components.dormant_mean_h, 8760.0), 4),
            "engaged_share": round(min(max(components.engaged_share, 1e-4), 1.0), 4),
            "charge_prob": round(min(components.charge_prob, 1.0), 4),
            "charge_start_h": round(components.charge_start_h, 4) % 24.0,
            "charge_start_sd_h": round(min(components.charge_start_sd_h, 12.0), 4),
            "charge_hours": round(min(max(components.charge_hours, 1e-4), 23.9999), 4)}


def fitted_config(fitted: FittedHabits) -> AvailabilityConfig:
    """The availability the fitted tables (:func:`to_toml`) give a scenario: mode habits,
    the values as written (4 decimals; the session mean 1), spreads clipped into the
    scenario's bounds, the components found, everything else at its default."""
    spreads = {name: round(min(getattr(fitted, name), bound), 4)
               for name, bound in _BOUNDS.items()}
    written = _written(fitted.components)
    keys = {key: written[key] for component, names in _COMPONENT_KEYS.items()
            if fitted.components.found(component) for key in names}
    return AvailabilityConfig(
        mode="habits", online_prob_by_hour=tuple(round(p, 4) for p in
                                                 fitted.online_prob_by_hour),
        session_mean_s=round(fitted.session_mean_s, 1),
        habits=HabitsConfig(**spreads, **keys))  # type: ignore[arg-type]


def _toml_value(value: float | tuple[float, ...]) -> str:
    if isinstance(value, tuple):
        return "[" + ", ".join(f"{v:.4f}" for v in value) + "]"
    return f"{value:.4f}"


def to_toml(fitted: FittedHabits) -> str:
    """The fitted parameters as the ``[population.availability]`` (mode "habits") and
    ``[population.availability.habits]`` tables of a scenario (:func:`fitted_config`),
    the components found written (and named in the first line's comment)."""
    cfg = fitted_config(fitted)
    p = cfg.online_prob_by_hour
    hours = ",\n    ".join(", ".join(f"{v:.4f}" for v in p[i:i + 8]) for i in (0, 8, 16))
    found = [d.component for d in fitted.components.decisions if d.found]
    fitted_ones = "none fitted" if not fitted.components.decisions else \
        f"found: {', '.join(found) or 'none'}"
    lines = [
        f"# Fitted to {fitted.num_devices} devices over {fitted.num_days:g} days "
        f"({fitted.num_sessions} whole sessions) by simfl.population.fit; heavy-tailed "
        f"components {fitted_ones}",
        "[population.availability]",
        'mode = "habits"',
        f"online_prob_by_hour = [\n    {hours},\n]",
        f"session_mean_s = {cfg.session_mean_s:.1f}",
        "",
        "[population.availability.habits]",
    ]
    lines += [f"{name} = {getattr(cfg.habits, name):.4f}" for name in _BOUNDS]
    lines += [f"{key} = {_toml_value(getattr(cfg.habits, key))}"
              for component, names in _COMPONENT_KEYS.items()
              if fitted.components.found(component) for key in names]
    return "\n".join(lines) + "\n"

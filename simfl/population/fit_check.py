"""How well a fitted availability model reproduces what it was fitted to: ``trace fit``'s
diagnostics (docs/design.md §3).

The fitted model is simulated over the same devices (their number and UTC offsets) and
the same window as the observed intervals, from a named random stream, and
simfl.population.trace_stats' ``availability_stats`` summarises both sides alike. The
two are compared statistic by statistic (:func:`compare`), each as the ratio fitted /
observed:

- levels: the mean online share, the online shares on weekdays and on weekends;
- the spread between devices: the 5 %, 50 % and 95 % quantiles of device online share;
- the sessions and gaps: the 50 % and 95 % quantiles of session and of gap length;
- the reach: the mean number of distinct devices online in a whole UTC day;
- the shape of the day and of the week: the range (max − min) of the online share by
  hour of the day, and weekend / weekday online share (a contrast near 1).

A statistic is **off** when the ratio is beyond ``FACTOR`` = 1.5 either way, a shape
beyond ``SHAPE_FACTOR`` = 1.2 (the fit reproduces the daily range by construction,
simfl.population.fit_profile, and the weekly rhythm where the fit finds one, so a
weekend 20 % busier than the fitted model's is already a misfit). The simulation draws
the heavy-tailed components the fit found (simfl.population.fit_phones), so a trace of
the full model is compared with the full model. Inside the model the
ratios stay within a few per cent for a thousand devices and more over two weeks (the
fit's known biases, at most −22 % on the session mean with 8 h sessions,
simfl.population.fit, and one draw's noise; measured 0.03 to 0.09 in |log ratio|):
the factors are wide enough that a trace the model drew is not flagged
(tests/population/test_fit_check.py, over several seeds) and narrow enough that the
misfit seen on a heavy-tailed phone population (sessions 3.7× off, gaps 4×, a daily
range flattened to a quarter) is. A statistic missing on either side (no whole
session, no weekend in the window) is not compared.

Any fitted model that can be simulated can be checked: :func:`check_fit` takes the
simulation as a function ``simulate(fitted, utc_offset_s, horizon_s, rng, region=...) ->
(device, t_on_s, t_off_s)`` (``region``: the observed devices' regions, or None);
:func:`simulate_habits` is the habits model's.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from simfl.population.availability import check_diurnal_work, from_csr
from simfl.population.fit import FittedHabits, Observed, fitted_config
from simfl.population.habits import draw_habits, habit_intervals
from simfl.population.trace_stats import STATISTICS, AvailabilityStats, availability_stats

FACTOR = 1.5
SHAPE_FACTOR = 1.2
STREAM = "fit.check"  # the simulation's stream (simfl.rng.Streams.numpy)
Intervals = tuple[np.ndarray, np.ndarray, np.ndarray]
Simulate = Callable[..., Intervals]  # (fitted, utc_offset_s, horizon_s, rng, region=)


def simulate_habits(fitted: FittedHabits, utc_offset_s: np.ndarray, horizon_s: float,
                    rng: np.random.Generator, region: np.ndarray | None = None) -> Intervals:
    """Online intervals (device, t_on_s, t_off_s), sorted by device and time, of devices
    at ``utc_offset_s`` (in regions ``region``, for a weekend shift per region; None:
    one) over [0, horizon_s) under the fitted habits model as its scenario tables state
    it (simfl.population.fit.fitted_config, its heavy-tailed components included):
    habits drawn, then intervals, both from ``rng``; refused in one line, before
    drawing, where that would take too long or too much memory (check_diurnal_work)."""
    cfg = replace(fitted_config(fitted), horizon_s=horizon_s)
    n = int(utc_offset_s.shape[0])
    if region is None or len(cfg.habits.weekend_logit_shift) == 1:
        region = np.zeros(n, dtype=np.int64)
    habits = draw_habits(cfg.habits, cfg.online_prob_by_hour, cfg.session_mean_s, region,
                         None, rng)
    check_diurnal_work(cfg, n, habits)
    offsets, t_on, t_off = habit_intervals(utc_offset_s, habits, horizon_s, rng)
    return from_csr(offsets, t_on, t_off, np.zeros(n, dtype=np.int64), 1,
                    horizon_s).intervals()


@dataclass(frozen=True)
class Check:
    """One statistic, observed and of the fitted model (None: not measured)."""

    statistic: str
    observed: float | None
    fitted: float | None
    factor: float  # off beyond this ratio either way

    @property
    def ratio(self) -> float | None:
        """fitted / observed, None where either is missing or observed is 0."""
        if self.observed is None or self.fitted is None or not self.observed > 0:
            return None
        return self.fitted / self.observed

    @property
    def off(self) -> bool:
        ratio = self.ratio
        return ratio is not None and not 1 / self.factor <= ratio <= self.factor

    def warning(self) -> str:
        """The one line that says how far it is off."""
        return (f"the fitted model's {self.statistic} is {self.ratio:.3g}x the observed "
                f"({self.fitted:.4g} against {self.observed:.4g}; off beyond "
                f"{self.factor:g}x)")


@dataclass(frozen=True)
class FitCheck:
    """Both sides' statistics and their comparison."""

    observed: AvailabilityStats
    fitted: AvailabilityStats
    checks: tuple[Check, ...]

    def warnings(self) -> list[str]:
        return [check.warning() for check in self.checks if check.off]


def _value(stats: AvailabilityStats, statistic: str, column: str) -> float | None:
    value = stats.summary.row(STATISTICS.index(statistic), named=True)[column]
    return None if value is None else float(value)


def _finite(value: float) -> float | None:
    return value if math.isfinite(value) else None


def compare(observed: AvailabilityStats, fitted: AvailabilityStats) -> list[Check]:
    """The statistics of the module docstring, each observed against fitted."""
    def both(get: Callable[[AvailabilityStats], float | None], name: str,
             factor: float = FACTOR) -> Check:
        return Check(name, get(observed), get(fitted), factor)

    def hourly(stats: AvailabilityStats) -> np.ndarray:
        return stats.hourly["online_share"].to_numpy()

    share, sessions, gaps, per_day = STATISTICS
    checks = [
        both(lambda s: _value(s, share, "mean"), "mean online share"),
        both(lambda s: float(np.ptp(hourly(s))), "range of the online share by hour",
             SHAPE_FACTOR),
        both(lambda s: _finite(s.weekday_share), "online share on weekdays"),
        both(lambda s: _finite(s.weekend_share), "online share on weekends"),
        both(lambda s: _finite(s.weekend_ratio), "weekend / weekday online share",
             SHAPE_FACTOR),
    ]
    for statistic, columns in ((share, ("q05", "q50", "q95")), (sessions, ("q50", "q95")),
                               (gaps, ("q50", "q95"))):
        checks += [Check(f"{statistic} {int(column[1:])}%", _value(observed, statistic, column),
                         _value(fitted, statistic, column), FACTOR) for column in columns]
    checks.append(both(lambda s: _value(s, per_day, "mean"), f"{per_day}, mean"))
    return checks


def check_fit(observed: Observed, fitted: Any, rng: np.random.Generator,
              simulate: Simulate = simulate_habits) -> FitCheck:
    """The fitted model simulated (``simulate``, from ``rng``) over ``observed``'s
    devices, UTC offsets and window, and both sides' statistics (hours and days local
    where the offsets are known, else UTC) compared (:func:`compare`)."""
    offsets = observed.utc_offset_s if observed.local_time else None
    n, end = observed.num_devices, observed.horizon_s
    seen = availability_stats(observed.device, observed.t_on_s, observed.t_off_s, n, end,
                              offsets, observed.source)
    device, t_on, t_off = simulate(fitted, observed.utc_offset_s, end, rng,
                                   region=observed.region)
    model = availability_stats(device, t_on, t_off, n, end, offsets, "the fitted model")
    return FitCheck(seen, model, tuple(compare(seen, model)))


def report_lines(check: FitCheck) -> list[str]:
    """The comparison as a table: the hourly shares side by side, then each statistic
    observed, fitted, their ratio and whether it is off."""
    clock = "local" if check.observed.local_time else "UTC"
    seen = check.observed.hourly["online_share"].to_list()
    model = check.fitted.hourly["online_share"].to_list()
    lines = [f"observed against the fitted model simulated ({check.observed.num_devices} "
             f"devices over {check.observed.end_s / 86400:g} days; stream {STREAM!r}); "
             f"off: beyond {FACTOR:g}x ({SHAPE_FACTOR:g}x for the two shapes)",
             f"online share by hour of the day ({clock}), observed / fitted:"]
    lines += ["  " + "  ".join(f"{h:02d}h {seen[h]:.3f}/{model[h]:.3f}"
                               for h in range(row, row + 6)) for row in range(0, 24, 6)]
    lines.append(f"{'statistic':<38}{'observed':>10}{'fitted':>10}{'ratio':>8}")
    for c in check.checks:
        ratio = "-" if c.ratio is None else f"{c.ratio:.3g}"
        lines.append(f"{c.statistic:<38}{_number(c.observed):>10}{_number(c.fitted):>10}"
                     f"{ratio:>8}{'  OFF' if c.off else ''}")
    return lines


def _number(value: float | None) -> str:
    return "-" if value is None else f"{value:.4g}"

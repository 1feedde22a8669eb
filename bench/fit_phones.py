"""Does ``trace fit`` recover the heavy-tailed components of the habits model from traces
the model drew? (simfl.population.fit; docs/design.md §3, the fit paragraph.)

    python bench/fit_phones.py [--devices 1000] [--days 14] [--seeds 0 1 ... 9]

Two populations, each drawn over ``--days`` days for ``--devices`` devices in three
regions (UTC −5, +1, +8; device i in region i mod 3) with half-hour sessions, once per
seed (habits from seed s, intervals from seed s + 1000), and fitted with every component
asked for:

- ``phones``: the habits model with every component on (:data:`PHONES`): three device
  classes, a weekend shift per region (0.6, 0.3, 0), bursts and nightly charging;
- ``plain``: the habits model's defaults, every component off.

Printed per population: each parameter's truth (the configured value; class means with
their share-weighted mean taken off, the convention the fit writes them in), the mean ±
sd of the fitted values over the seeds, and how many seeds found each component.
tests/population/test_fit_phones.py asserts tolerances on the phones population's
seeds 0–9 (and on fewer of the plain one's).
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass

import numpy as np

from simfl.population.fit import FittedHabits, Observed, fit_observed
from simfl.population.habits import draw_habits, habit_intervals
from simfl.scenario import DEFAULT_ONLINE_PROB_BY_HOUR, HabitsConfig

DAY_S = 86400.0
SESSION_MEAN_S = 1800.0
OFFSETS_H = (-5.0, 1.0, 8.0)
PHONES = HabitsConfig(propensity_logit_sd=0.8, phase_sd_h=1.0, session_log_sd=0.8,
                      class_shares=(0.1, 0.5, 0.4), class_logit_means=(3.0, 0.0, -2.5),
                      weekend_logit_shift=(0.6, 0.3, 0.0), dormant_mean_h=30.0,
                      engaged_share=0.4, charge_prob=0.15, charge_start_h=22.5,
                      charge_start_sd_h=1.5, charge_hours=6.0)
PLAIN = HabitsConfig()
POPULATIONS = {"phones": PHONES, "plain": PLAIN}


def draw(cfg: HabitsConfig, seed: int, num_devices: int = 1000, days: int = 14) -> Observed:
    """The population's intervals over ``days`` days, framed for the fit (regions known)."""
    region = np.arange(num_devices) % len(OFFSETS_H)
    offsets = np.array(OFFSETS_H)[region] * 3600.0
    habits = draw_habits(cfg, DEFAULT_ONLINE_PROB_BY_HOUR, SESSION_MEAN_S, region, None,
                         np.random.default_rng(seed))
    csr, t_on, t_off = habit_intervals(offsets, habits, days * DAY_S,
                                       np.random.default_rng(seed + 1000))
    device = np.repeat(np.arange(num_devices), np.diff(csr))
    return Observed(device, t_on, t_off, offsets, days * DAY_S, True, "drawn", region,
                    len(OFFSETS_H))


def parameters(cfg: HabitsConfig, session_mean_s: float = SESSION_MEAN_S
               ) -> dict[str, float]:
    """The parameters by name as the fit reports them (class means centred, largest
    first; one weekend shift per region; components off at their off values)."""
    order = np.argsort(cfg.class_logit_means)[::-1]
    shift = float(np.dot(cfg.class_shares, cfg.class_logit_means))
    weekend = cfg.weekend_logit_shift * (len(OFFSETS_H) if len(cfg.weekend_logit_shift) == 1
                                         else 1)
    values = {"propensity_logit_sd": cfg.propensity_logit_sd, "phase_sd_h": cfg.phase_sd_h,
              "session_mean_s": session_mean_s, "session_log_sd": cfg.session_log_sd,
              "dormant_mean_h": cfg.dormant_mean_h, "engaged_share": cfg.engaged_share,
              "charge_prob": cfg.charge_prob}
    if cfg.charge_prob > 0:
        values |= {"charge_start_h": cfg.charge_start_h,
                   "charge_start_sd_h": cfg.charge_start_sd_h,
                   "charge_hours": cfg.charge_hours}
    values |= {f"class_share_{i}": cfg.class_shares[c] for i, c in enumerate(order)}
    values |= {f"class_mean_{i}": cfg.class_logit_means[c] - shift
               for i, c in enumerate(order)}
    values |= {f"weekend_logit_shift_{r}": w for r, w in enumerate(weekend)}
    return values


def fitted_parameters(fitted: FittedHabits) -> dict[str, float]:
    """The same names from a fit (a component not found at its off value)."""
    c = fitted.components
    weekend = c.weekend_logit_shift * (len(OFFSETS_H) if len(c.weekend_logit_shift) == 1
                                       else 1)
    values = {"propensity_logit_sd": fitted.propensity_logit_sd,
              "phase_sd_h": fitted.phase_sd_h, "session_mean_s": fitted.session_mean_s,
              "session_log_sd": fitted.session_log_sd, "dormant_mean_h": c.dormant_mean_h,
              "engaged_share": c.engaged_share, "charge_prob": c.charge_prob,
              "charge_start_h": c.charge_start_h, "charge_start_sd_h": c.charge_start_sd_h,
              "charge_hours": c.charge_hours}
    values |= {f"class_share_{i}": s for i, s in enumerate(c.class_shares)}
    values |= {f"class_mean_{i}": m for i, m in enumerate(c.class_logit_means)}
    values |= {f"weekend_logit_shift_{r}": w for r, w in enumerate(weekend)}
    return values


@dataclass(frozen=True)
class Recovery:
    """Per parameter: the truth and the fitted values over the seeds; per component, how
    many seeds found it; per seed, how many classes the fit chose."""

    truth: dict[str, float]
    values: dict[str, list[float]]
    found: dict[str, int]
    classes: list[int]

    @property
    def seeds(self) -> int:
        return len(self.classes)


def recover(cfg: HabitsConfig, seeds: list[int], num_devices: int = 1000, days: int = 14
            ) -> Recovery:
    truth = parameters(cfg)
    values: dict[str, list[float]] = {name: [] for name in truth}
    found: dict[str, int] = {}
    classes = []
    for seed in seeds:
        fitted = fit_observed(draw(cfg, seed, num_devices, days))
        got = fitted_parameters(fitted)
        for name in truth:
            values[name].append(got.get(name, float("nan")))
        for decision in fitted.components.decisions:
            found[decision.component] = found.get(decision.component, 0) + decision.found
        classes.append(len(fitted.components.class_shares))
    return Recovery(truth, values, found, classes)


def table(name: str, recovery: Recovery) -> list[str]:
    """Mean ± sd per parameter; the classes' and the within-class spread's over the
    seeds that chose the truth's number of classes."""
    want = sum(1 for key in recovery.truth if key.startswith("class_share_"))
    alike = np.array(recovery.classes) == want
    lines = [f"{name}: {recovery.seeds} seeds; found: " + ", ".join(
        f"{c} {k}/{recovery.seeds}" for c, k in recovery.found.items())
        + f"; {int(alike.sum())} chose {want} class(es) (their classes and spread below)",
        f"  {'parameter':<24}{'truth':>10}{'mean':>11}{'sd':>9}"]
    for key, truth in recovery.truth.items():
        v = np.array(recovery.values[key])
        if key.startswith("class_") or key == "propensity_logit_sd":
            v = v[alike]
        lines.append(f"  {key:<24}{truth:>10.4g}{np.mean(v):>11.4g}{np.std(v, ddof=1):>9.3g}")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--devices", type=int, default=1000)
    parser.add_argument("--days", type=int, default=14)
    parser.add_argument("--seeds", type=int, nargs="+", default=list(range(10)))
    parser.add_argument("--populations", nargs="+", default=list(POPULATIONS),
                        choices=list(POPULATIONS))
    args = parser.parse_args()
    for name in args.populations:
        recovery = recover(POPULATIONS[name], args.seeds, args.devices, args.days)
        print("\n".join(table(name, recovery)))


if __name__ == "__main__":
    main()

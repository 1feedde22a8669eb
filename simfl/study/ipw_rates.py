"""How well do IPW's estimated online rates correct who is online? No training, only the
population's availability.

    SIMFL_DATA_DIR=../shared/data python -m simfl.study.ipw_rates [--days 7] \
        [--strength 1.0] [--seeds 0 1 2]

The estimation study's cell (scenarios/diurnal_emnist.toml: all FEMNIST training
writers, six regions sorted by the writers' share of digits at the given covariate
strength, diurnal availability with one-hour sessions). A round opens every 600 s (the
scenario's round interval; a real run opens some rounds later, when it waits for
devices). At each opening the devices online are weighted four ways, and each
weighting implies every region's share of the population:

- ``unweighted``: the online devices as they are (what ``cohort_exact`` sees);
- ``known``: 1 / π, π the availability model's true online probability (``ipw_known``);
- ``ipw``: 1 / π̂, π̂ from the check-ins of every earlier round at that UTC hour with a
  Beta(1, 1) prior (simfl's ``CheckIns``);
- ``earlier_days``: the same from the check-ins of earlier UTC days only (``CheckIns``
  with ``earlier_days=True``), so that a device's check-ins earlier in today's session
  do not count.

Printed per seed and simulated day: the mean over its rounds of the total-variation
distance between the implied region shares and the population's (0 for a perfect
correction), of the implied mean covariate minus the population's, and, for the two
estimates, the mean of π̂ / π over the online devices. With more than one seed, then
docs/bias/ipw.md's table: the distances and ratios, each cell the seeds' values joined by
" / " (tests/test_ipw_rates.py checks that the page holds it). :func:`daily` gives a
seed's figures as plain dicts; :func:`seed_table` and :func:`doc_table` print them.
"""

from __future__ import annotations

import argparse
import sys

import numpy as np

from simfl.data import load_data
from simfl.data.covariates import client_covariate
from simfl.population import known_rates
from simfl.population.build import build_population
from simfl.quantile.estimators import CheckIns
from simfl.rng import Streams
from simfl.scenario import load_scenario
from simfl.study import run_command

DAY_S = 86400.0
ROUND_S = 600.0
ESTIMATES = ("ipw", "earlier_days")
NAMES = ("unweighted", "known", *ESTIMATES)
# docs/bias/ipw.md's names for the weightings: the estimators ipw_known, ipw, ipw_days.
DOC_NAMES = {"unweighted": "unweighted", "known": "true rates (`ipw_known`)", "ipw": "`ipw`",
             "earlier_days": "`ipw_days`"}
Day = dict[str, dict[str, float]]


def daily(seed: int, days: int, strength: float) -> tuple[str, list[Day]]:
    """The population in words, and per simulated day the means over its openings:
    ``tv`` and ``gap`` per weighting, ``ratio`` (π̂ / π) per estimate."""
    scenario = load_scenario("scenarios/diurnal_emnist.toml", [
        f"seed={seed}", 'population.region_assignment="covariate"',
        'population.covariate="digit_share"', f"population.covariate_strength={strength}"])
    streams = Streams(scenario.seed)
    data = load_data(scenario.data, streams)
    cfg = scenario.population
    covariate = client_covariate(data.train, cfg.covariate, data.num_classes)
    assert covariate is not None
    population = build_population(cfg, data.train.num_clients, covariate, streams,
                                  scenario.model.name)
    region = population.devices.region_idx
    truth = known_rates(cfg.availability, population.devices)
    assert truth is not None
    num_regions = int(region.max()) + 1
    pop_share = np.bincount(region, minlength=num_regions) / len(region)
    pop_cov = float(covariate.mean())
    estimates = {name: CheckIns(len(region), 1.0, earlier_days=name == "earlier_days")
                 for name in ESTIMATES}
    table: list[Day] = []
    for day in range(days):
        tv: dict[str, list[float]] = {n: [] for n in NAMES}
        gap: dict[str, list[float]] = {n: [] for n in NAMES}
        ratio: dict[str, list[float]] = {n: [] for n in ESTIMATES}
        for t in np.arange(day * DAY_S, (day + 1) * DAY_S, ROUND_S):
            online = population.availability.online_devices(float(t))
            if online.size == 0:
                continue
            pi = truth.online_prob(online, float(t))
            weights = {"unweighted": np.ones(online.size), "known": 1.0 / pi}
            for name, checkins in estimates.items():
                checkins.observe(float(t), online)
                pi_hat = checkins.online_prob(online, float(t))
                weights[name] = 1.0 / pi_hat
                ratio[name].append(float(np.mean(pi_hat / pi)))
            for name, w in weights.items():
                share = np.bincount(region[online], weights=w, minlength=num_regions) / w.sum()
                tv[name].append(0.5 * float(np.abs(share - pop_share).sum()))
                gap[name].append(float(np.average(covariate[online], weights=w)) - pop_cov)
        table.append({"tv": {n: float(np.mean(v)) for n, v in tv.items()},
                      "gap": {n: float(np.mean(v)) for n, v in gap.items()},
                      "ratio": {n: float(np.mean(v)) for n, v in ratio.items()}})
    return f"{len(region)} training devices, {num_regions} regions", table


def seed_table(population: str, seed: int, strength: float, table: list[Day]) -> str:
    """One seed's figures, a row per day."""
    lines = [f"{population}, covariate strength {strength}, a round every "
             f"{ROUND_S:.0f} s, seed {seed}",
             "| day | " + " | ".join(f"TV {n}" for n in NAMES) + " | "
             + " | ".join(f"covariate gap {n}" for n in NAMES) + " | "
             + " | ".join(f"π̂/π {n}" for n in ESTIMATES) + " |",
             "|---" * (1 + 2 * len(NAMES) + len(ESTIMATES)) + "|"]
    for day, row in enumerate(table, start=1):
        lines.append(f"| {day} | " + " | ".join(f"{row['tv'][n]:.3f}" for n in NAMES) + " | "
                     + " | ".join(f"{row['gap'][n]:+.4f}" for n in NAMES) + " | "
                     + " | ".join(f"{row['ratio'][n]:.2f}" for n in ESTIMATES) + " |")
    return "\n".join(lines)


def doc_table(tables: list[list[Day]]) -> str:
    """docs/bias/ipw.md's table: per day, each cell the seeds' values joined by " / "."""
    lines = ["| day | " + " | ".join(f"TV {DOC_NAMES[n]}" for n in NAMES) + " | "
             + " | ".join(f"π̂ / π {DOC_NAMES[n]}" for n in ESTIMATES) + " |",
             "|---" * (1 + len(NAMES) + len(ESTIMATES)) + "|"]
    for day in range(len(tables[0])):
        rows = [table[day] for table in tables]
        cells = [" / ".join(f"{row['tv'][n]:.3f}" for row in rows) for n in NAMES]
        cells += [" / ".join(f"{row['ratio'][n]:.2f}" for row in rows) for n in ESTIMATES]
        lines.append(f"| {day + 1} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m simfl.study.ipw_rates",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--days", type=int, default=7)
    parser.add_argument("--strength", type=float, default=1.0)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    args = parser.parse_args(argv)

    def work() -> None:
        tables = []
        for seed in args.seeds:
            population, table = daily(seed, args.days, args.strength)
            tables.append(table)
            print(seed_table(population, seed, args.strength, table) + "\n", flush=True)
        if len(tables) > 1:
            print(f"seeds {' / '.join(map(str, args.seeds))}:")
            print(doc_table(tables))

    return run_command(work)


if __name__ == "__main__":
    sys.exit(main())

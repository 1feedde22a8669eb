"""Is the availability term the recency of training? A test of one cause of the bias.

    SIMFL_DATA_DIR=../shared/data python bench/recency.py --theta 0.1 --regions random \
        --seeds 0 1 2 [--scenario scenarios/diurnal_emnist.toml] [--k 50] [--rounds 150] \
        [--fresh 1] [--window 6] [--draws 200] [--reuse] [--set KEY=VALUE ...] [--label L]

docs/bias/definitions.md splits the bias of the Δ-FL threshold into sampling,
availability and selection terms; the availability term is E_online − E_all, the
estimator's mean on random cohorts of the devices online when the round opened minus its
mean on random cohorts of all training devices, both on the population's losses F_k(w_t).
Regions drawn at random make who is online independent of the data, yet at θ = 0.1 the
term is negative (−0.018 to −0.022 at K = 10-100, docs/bias/decomposition.md). The
candidate cause tested here is *exposure*: cohorts are drawn from the online devices and sessions
last about an hour while rounds open every 10 minutes, so a device online now has
usually been online, sampled and perhaps trained on earlier in its session; the devices
that just came online have not.

The run is by default the study's cell (scenarios/diurnal_emnist.toml, all FEMNIST
training writers, K = 50, 150 rounds, ``cohort_exact`` driving, the population's losses
every 5 rounds; ``--scenario``, ``--k`` and ``--rounds`` change it, and covariate
regions are sorted by the writers' digit share at strength 1). Wrappers around
``EstimatorPanel.bias_columns`` and ``observe_online`` copy what simfl computes
anyway: on each bias round every training device's loss and weight, and at every
round's opening who was online. Pools on a bias round:

- ``fresh``: online now but at none of the ``--fresh`` previous openings (not yet
  exposed in this session; under random regions a random draw of the population);
- ``exposed``: the other online devices;
- ``control``: as many devices as are fresh, drawn uniformly from all of them (what
  a pool of that size gives when it is a random draw: its small size alone moves
  the estimator's mean a little).

With ``cohort_exact`` on ``--draws`` random cohorts of size K from each pool:
``A`` = E_online − E_all (the run's bias.parquet logs the same from 50 draws: ``A
logged``), ``A fresh`` = E_fresh − E_all, ``A exposed`` = E_exposed − E_all and
``A control`` = E_control − E_all, and the paired differences ``exposed − fresh`` and
``fresh − control``. If exposure is the cause, ``fresh − control`` is about 0 and
``exposed − fresh`` carries the term. The captured rounds are saved as
``recency.npz`` in the run directory; ``--reuse`` analyses them again without
simulating. Also
printed: the share of fresh devices among the online ones and the mean loss of fresh,
exposed and offline devices, and of the online devices whose update was aggregated in
the ``--window`` rounds before (clients.parquet, status ``aggregated``). Rounds before
20 % of the run are burn-in, as in simfl.study.bias_table; the last line gives the mean
over seeds ± the half-width of the 95 % t-interval.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from simfl.quantile.estimators import Cohort, CohortExact
from simfl.quantile.panel import EstimatorPanel
from simfl.runs.run import run_scenario
from simfl.scenario import load_scenario
from simfl.study.intervals import ci

BURN_IN = 0.2  # as simfl.study.bias_table


@dataclass
class BiasRound:
    round_idx: int
    losses: np.ndarray  # (N,) F_k(w_t) of every training device
    weights: np.ndarray  # (N,) α_k
    online: np.ndarray  # indices of the devices online when the round opened
    before: list[np.ndarray]  # who was online at the earlier openings, latest first


def _run(args: argparse.Namespace, seed: int) -> tuple[Path, list[BiasRound]]:
    overrides = [f"seed={seed}", f"server.num_rounds={args.rounds}",
                 f"server.clients_per_round={args.k}", f"eval.every={args.rounds}",
                 "estimator.bias_every=5", "estimator.decomposition_draws=50",
                 "estimator.shadow=[]", f"aggregator.theta={args.theta}",
                 f'population.region_assignment="{args.regions}"']
    if args.regions == "covariate":
        overrides += ['population.covariate="digit_share"', "population.covariate_strength=1.0"]
    scenario = load_scenario(args.scenario, overrides + args.set)
    label = args.label or args.scenario.stem
    run_dir = args.out / f"{label}_{args.regions}_k{args.k}_theta{args.theta:g}" / f"seed={seed}"
    if args.reuse:
        return run_dir, _load(run_dir)
    kept: list[BiasRound] = []
    openings: list[np.ndarray] = []  # who was online at each opening so far
    original, observe = EstimatorPanel.bias_columns, EstimatorPanel.observe_online

    def seen(panel: EstimatorPanel, t_s: float, online_idx: np.ndarray) -> None:
        openings.append(np.asarray(online_idx).copy())
        observe(panel, t_s, online_idx)

    def keep(panel: EstimatorPanel, round_idx: int, cohort: Any, estimates: Any,
             population: tuple[np.ndarray, np.ndarray] | None) -> dict[str, object]:
        if population is not None:
            kept.append(BiasRound(round_idx, population[0].copy(), population[1].copy(),
                                  panel.presence.online.copy(), openings[-2::-1][:args.fresh]))
        return original(panel, round_idx, cohort, estimates, population)

    setattr(EstimatorPanel, "bias_columns", keep)  # noqa: B010 (restored below)
    setattr(EstimatorPanel, "observe_online", seen)  # noqa: B010
    try:
        run_scenario(scenario, run_dir, overwrite=True, progress=False)
    finally:
        setattr(EstimatorPanel, "bias_columns", original)  # noqa: B010
        setattr(EstimatorPanel, "observe_online", observe)  # noqa: B010
    _save(run_dir, kept)
    return run_dir, kept


def _save(run_dir: Path, rounds: list[BiasRound]) -> None:
    arrays: dict[str, Any] = {}
    for i, b in enumerate(rounds):
        arrays |= {f"{i}_round": np.array(b.round_idx), f"{i}_losses": b.losses,
                   f"{i}_weights": b.weights, f"{i}_online": b.online}
        arrays |= {f"{i}_before{j}": idx for j, idx in enumerate(b.before)}
    np.savez_compressed(run_dir / "recency.npz", **arrays)


def _load(run_dir: Path) -> list[BiasRound]:
    with np.load(run_dir / "recency.npz") as f:
        count = sum(1 for key in f.files if key.endswith("_round"))
        return [BiasRound(int(f[f"{i}_round"]), f[f"{i}_losses"], f[f"{i}_weights"],
                          f[f"{i}_online"],
                          [f[key] for key in sorted(k for k in f.files
                                                    if k.startswith(f"{i}_before"))])
                for i in range(count)]


def _expected(pool: np.ndarray, b: BiasRound, level: float, size: int,
              rng: np.random.Generator, draws: int) -> float:
    """cohort_exact's mean η̂ over random cohorts of ``size`` from ``pool`` (of all of it
    when it is smaller; NaN when it is empty)."""
    if len(pool) == 0:
        return float("nan")
    alpha = b.weights / b.weights.mean()
    k = min(size, len(pool))
    return float(np.mean([
        CohortExact().estimate(Cohort(b.losses[idx], alpha[idx], idx, 0.0), level, rng).threshold
        for idx in (np.sort(rng.choice(pool, size=k, replace=False)) for _ in range(draws))]))


def _mean(values: np.ndarray) -> float:
    return float(values.mean()) if len(values) else float("nan")


def _analyse(args: argparse.Namespace, seed: int, run_dir: Path, rounds: list[BiasRound],
             window: int) -> dict[str, float]:
    clients = pl.read_parquet(run_dir / "clients.parquet").filter(
        pl.col("status") == "aggregated")
    logged = pl.read_parquet(run_dir / "bias.parquet").filter(pl.col("driver"))
    rng = np.random.default_rng(seed)
    level = 1.0 - args.theta
    rows = []
    for b in rounds:
        if b.round_idx < BURN_IN * args.rounds:
            continue
        n = len(b.losses)
        recent = np.zeros(n, dtype=bool)
        recent[clients.filter(pl.col("round").is_between(b.round_idx - window,
                                                          b.round_idx - 1))["client_idx"]] = True
        online = np.zeros(n, dtype=bool)
        online[b.online] = True
        earlier = np.zeros(n, dtype=bool)
        for idx in b.before:
            earlier[idx] = True
        fresh = online & ~earlier
        pools = {"all": np.arange(n), "online": b.online, "fresh": np.flatnonzero(fresh),
                 "exposed": np.flatnonzero(online & earlier),
                 "control": np.sort(rng.choice(n, size=int(fresh.sum()), replace=False))}
        e = {name: _expected(pool, b, level, args.k, rng, args.draws)
             for name, pool in pools.items()}
        rows.append({
            "A logged": logged.filter(pl.col("round") == b.round_idx)["availability_bias"][0],
            "A": e["online"] - e["all"],
            "A fresh": e["fresh"] - e["all"],
            "A exposed": e["exposed"] - e["all"],
            "A control": e["control"] - e["all"],
            "exposed − fresh": e["exposed"] - e["fresh"],
            "fresh − control": e["fresh"] - e["control"],
            "fresh devices": float(fresh.sum()),
            "fresh among online": fresh[online].mean(),
            "loss fresh": _mean(b.losses[fresh]),
            "loss exposed": _mean(b.losses[online & earlier]),
            "loss offline": _mean(b.losses[~online]),
            "loss online aggregated": _mean(b.losses[online & recent]),
        })
    return {key: float(np.nanmean([r[key] for r in rows])) for key in rows[0]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scenario", type=Path, default=Path("scenarios/diurnal_emnist.toml"))
    parser.add_argument("--k", type=int, default=50, help="server.clients_per_round")
    parser.add_argument("--theta", type=float, default=0.1)
    parser.add_argument("--regions", choices=("random", "covariate"), default="random")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--rounds", type=int, default=150)
    parser.add_argument("--window", type=int, nargs="+", default=[6],
                        help="rounds before a bias round in which an aggregated device is "
                             "recent (one table per value)")
    parser.add_argument("--fresh", type=int, default=1,
                        help="a device online now is fresh when it was offline at this many "
                             "previous openings")
    parser.add_argument("--draws", type=int, default=200)
    parser.add_argument("--out", type=Path, default=Path("results/recency"))
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="a further scenario override (repeatable), e.g. "
                             "population.availability.mode=\"habits\"")
    parser.add_argument("--label", help="the run folders' prefix (default: the scenario's "
                                        "stem); name it when --set changes the scenario")
    parser.add_argument("--reuse", action="store_true",
                        help="analyse the rounds an earlier run saved (recency.npz)")
    args = parser.parse_args()
    runs = [_run(args, seed) for seed in args.seeds]
    for window in args.window:
        per_seed = [_analyse(args, seed, run_dir, rounds, window)
                    for seed, (run_dir, rounds) in zip(args.seeds, runs, strict=True)]
        _print(args, window, per_seed)


def _print(args: argparse.Namespace, window: int, per_seed: list[dict[str, float]]) -> None:
    keys = list(per_seed[0])
    print(f"\n{args.scenario} {' '.join(args.set)}, regions {args.regions}, "
          f"θ = {args.theta:g}, K = {args.k}, {args.rounds} rounds, fresh = "
          f"offline at the {args.fresh} previous openings, aggregated = in the {window} rounds "
          f"before, {args.draws} draws per pool")
    print("| seed | " + " | ".join(keys) + " |")
    print("|---" * (len(keys) + 1) + "|")
    for seed, r in zip(args.seeds, per_seed, strict=True):
        print(f"| {seed} | " + " | ".join(f"{r[k]:+.4f}" for k in keys) + " |")
    if len(per_seed) > 1:
        print("| mean ± 95 % | " + " | ".join(
            ci(np.array([r[k] for r in per_seed]), digits=4) for k in keys) + " |")


if __name__ == "__main__":
    main()

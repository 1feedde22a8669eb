"""The threshold-estimation study's table: per participation pattern, cohort size and
estimator, the bias of η̂ and its three causes, and the realized-conformity gap, each
as the mean over seeds ± the half-width of a 95 % t-interval (per run: the mean over its
bias rounds after the burn-in, simfl.plots.study.bias_rows).

    python -m simfl collect scenarios/study/bias_v2.sweep.toml
    python bench/bias_table.py results/bias_v2 [--online] [--by-day] [--estimators a,b]
    python bench/bias_table.py results/bias_week --pivot availability_bias

``--online`` adds E_online − Q_pop (sampling + availability): the bias of the estimator on
uniformly random cohorts of the devices online when the round opened, the part an
availability correction (IPW, post-stratification) is meant to remove. ``--by-day`` splits
each run's bias rounds by simulated day (``t_s`` // 86,400 + 1; the burn-in still applies),
for estimators whose quality changes as the days go by, such as IPW's estimated rates.
``--pivot COLUMN`` prints one quantity (bias, sampling_bias, availability_bias,
selection_bias, conformity_gap, online: E_online − Q_pop) with a column per estimator: one
row per cell of the sweep.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import polars as pl
from intervals import ci  # bench/intervals.py

from simfl.plots.study import DECOMPOSITION, bias_rows

COLUMNS = ("bias", *DECOMPOSITION, "conformity_gap")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sweep_dir", type=Path, help="results/<sweep> after collect")
    parser.add_argument("--online", action="store_true",
                        help="add E_online - Q_pop (sampling + availability)")
    parser.add_argument("--by-day", action="store_true", help="one row per simulated day")
    parser.add_argument("--estimators", help="comma-separated: only these estimators")
    parser.add_argument("--pivot", choices=(*COLUMNS, "online"),
                        help="one quantity, a column per estimator")
    args = parser.parse_args()
    bias = pl.read_parquet(args.sweep_dir / "bias.parquet")
    if args.estimators:
        names = args.estimators.split(",")
        unknown = sorted(set(names) - set(bias["estimator"].unique()))
        if unknown:
            parser.error(f"--estimators: not in {args.sweep_dir}: {', '.join(unknown)}")
        bias = bias.filter(pl.col("estimator").is_in(names))
    columns = (*COLUMNS, "online") if args.online or args.pivot == "online" else COLUMNS
    axes = [a for a in ("variant", "clients_per_round", "theta")
            if a in bias.columns and bias[a].n_unique() > 1]
    keys = (*axes, *(["day"] * args.by_day), "estimator")
    rows = bias_rows(bias).with_columns(
        online=pl.col("sampling_bias") + pl.col("availability_bias"),
        day=(pl.col("t_s") // 86400).cast(pl.Int64) + 1)
    per_run = rows.group_by(*keys, "seed").agg(pl.col(c).mean() for c in columns)
    if args.pivot:
        print_pivot(per_run, keys[:-1], args.pivot)
        return
    print("| " + " | ".join([*keys, "seeds", "bias", "sampling", "availability", "selection",
                            "conformity − θ"] + ["E_online − Q_pop"] * args.online) + " |")
    print("|" + "---|" * (len(keys) + 1 + len(columns)))
    for group in per_run.sort(*keys).partition_by(*keys, maintain_order=True):
        row = group.row(0, named=True)
        cells = [str(row[k]) for k in keys] + [str(group.height)]
        print("| " + " | ".join(cells + [ci(group[c].to_numpy()) for c in columns]) + " |")


def print_pivot(per_run: pl.DataFrame, cell: tuple[str, ...], column: str) -> None:
    """One row per cell (its seeds: the fewest any estimator has), a column per estimator."""
    estimators = sorted(per_run["estimator"].unique())
    print("| " + " | ".join([*cell, "seeds", *estimators]) + " |")
    print("|" + "---|" * (len(cell) + 1 + len(estimators)))
    for group in per_run.sort(*cell).partition_by(*cell, maintain_order=True):
        row = group.row(0, named=True)
        by = {e: g[column].to_numpy()
              for (e,), g in group.partition_by("estimator", as_dict=True).items()}
        seeds = min(len(v) for v in by.values())
        cells = [ci(by[e]) if e in by else "" for e in estimators]
        print("| " + " | ".join([*(str(row[k]) for k in cell), str(seeds), *cells]) + " |")


if __name__ == "__main__":
    main()

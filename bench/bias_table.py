"""The threshold-estimation study's table: per participation pattern, cohort size and
estimator, the bias of η̂ and its three causes, and the realized-conformity gap, each
as the mean over seeds ± the half-width of a 95 % t-interval (per run: the mean over its
bias rounds after the burn-in, simfl.plots.study.bias_rows).

    python -m simfl collect scenarios/study/bias_v2.sweep.toml
    python bench/bias_table.py results/bias_v2 [--online] [--by-day] [--estimators a,b]
    python bench/bias_table.py results/bias_week --pivot availability_bias
    python bench/bias_table.py results/bias_week --pivot bias --across theta \
        --estimators cohort_exact

``--online`` adds E_online − Q_pop (sampling + availability): the bias of the estimator on
uniformly random cohorts of the devices online when the round opened, the part an
availability correction (IPW, post-stratification) is meant to remove. ``--by-day`` splits
each run's bias rounds by simulated day (``t_s`` // 86,400 + 1; the burn-in still applies),
for estimators whose quality changes as the days go by, such as IPW's estimated rates.
``--pivot COLUMN`` prints one quantity (bias, sampling_bias, availability_bias,
selection_bias, conformity_gap, online: E_online − Q_pop) with a column per estimator: one
row per cell of the sweep; ``--across theta`` makes the columns the θ values instead (with
``--estimators`` naming one estimator, one row per variant and cohort size). ``--rounds``
pools each cell's bias rounds over its seeds (mean and median conformity gap, share of
rounds with η̂ above Q_pop); ``--largest-gap REF`` prints, per estimator, the largest
difference of a run's mean bias from estimator REF's in the same run.
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
                        help="one quantity, a column per estimator (or per --across value)")
    parser.add_argument("--across", default="estimator",
                        help="with --pivot: the axis whose values are the columns (e.g. theta)")
    parser.add_argument("--rounds", action="store_true",
                        help="per cell, its seeds' bias rounds pooled: median conformity gap, "
                             "share of rounds with the estimate above Q_pop")
    parser.add_argument("--largest-gap", metavar="REF",
                        help="per estimator, the largest |per-run mean bias - REF's| over runs")
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
    if args.rounds:
        print_rounds(rows, list(keys))
        return
    if args.largest_gap:
        print_largest_gap(rows, args.largest_gap)
        return
    per_run = rows.group_by(*keys, "seed").agg(pl.col(c).mean() for c in columns)
    if args.pivot:
        if args.across not in keys:
            parser.error(f"--across: not an axis of {args.sweep_dir}: {args.across}")
        print_pivot(per_run, [k for k in keys if k != args.across], args.across, args.pivot)
        return
    print("| " + " | ".join([*keys, "seeds", "bias", "sampling", "availability", "selection",
                            "conformity − θ"] + ["E_online − Q_pop"] * args.online) + " |")
    print("|" + "---|" * (len(keys) + 1 + len(columns)))
    for group in per_run.sort(*keys).partition_by(*keys, maintain_order=True):
        row = group.row(0, named=True)
        cells = [str(row[k]) for k in keys] + [str(group.height)]
        print("| " + " | ".join(cells + [ci(group[c].to_numpy()) for c in columns]) + " |")


def print_rounds(rows: pl.DataFrame, keys: list[str]) -> None:
    """Per cell, every seed's bias rounds after the burn-in pooled: how many, the mean and the
    median conformity gap, and the share of rounds with η̂ above Q_pop (bias > 0)."""
    table = rows.group_by(keys).agg(
        pl.len().alias("rounds"), pl.col("conformity_gap").mean().alias("mean"),
        pl.col("conformity_gap").median().alias("median"),
        (pl.col("bias") > 0).mean().alias("above")).sort(keys)
    print("| " + " | ".join([*keys, "rounds", "conformity − θ: mean", "median",
                            "share with η̂ > Q_pop"]) + " |")
    print("|" + "---|" * (len(keys) + 4))
    for row in table.iter_rows(named=True):
        print("| " + " | ".join([*(str(row[k]) for k in keys), str(row["rounds"]),
                                f"{row['mean']:+.3f}", f"{row['median']:+.3f}",
                                f"{row['above']:.2f}"]) + " |")


def print_largest_gap(rows: pl.DataFrame, reference: str) -> None:
    """Per estimator, the largest |mean bias of a run − the reference estimator's in the
    same run| over every run (shadows see the same cohorts, so equal keep sets give 0)."""
    per_run = rows.group_by("run_id", "estimator").agg(pl.col("bias").mean())
    ref = per_run.filter(pl.col("estimator") == reference).select("run_id", ref="bias")
    gaps = (per_run.filter(pl.col("estimator") != reference).join(ref, on="run_id")
            .group_by("estimator").agg((pl.col("bias") - pl.col("ref")).abs().max().alias("gap"),
                                       pl.len().alias("runs")).sort("estimator"))
    for row in gaps.iter_rows(named=True):
        print(f"{row['estimator']}: largest |run mean bias - {reference}'s| over "
              f"{row['runs']} runs = {row['gap']:.5f}")


def print_pivot(per_run: pl.DataFrame, cell: list[str], across: str, column: str) -> None:
    """One row per cell (its seeds: the fewest any column has), a column per value of
    ``across`` (the estimators, or a sweep axis such as θ, in descending order)."""
    values = sorted(per_run[across].unique(), reverse=across != "estimator")
    print("| " + " | ".join([*cell, "seeds", *(f"{across} {v}" if across != "estimator"
                                                else str(v) for v in values)]) + " |")
    print("|" + "---|" * (len(cell) + 1 + len(values)))
    for group in per_run.sort(*cell).partition_by(*cell, maintain_order=True):
        row = group.row(0, named=True)
        by = {v: g[column].to_numpy()
              for (v,), g in group.partition_by(across, as_dict=True).items()}
        seeds = min(len(v) for v in by.values())
        cells = [ci(by[v]) if v in by else "" for v in values]
        print("| " + " | ".join([*(str(row[k]) for k in cell), str(seeds), *cells]) + " |")


if __name__ == "__main__":
    main()

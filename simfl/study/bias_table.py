"""The threshold-estimation study's table: per participation pattern, cohort size and
estimator, the bias of η̂ and its three causes, and the realized-conformity gap, each
as the mean over seeds ± the half-width of a 95 % t-interval (per run: the mean over its
bias rounds after the burn-in, simfl.plots.study.bias_rows).

    python -m simfl collect scenarios/study/bias_week.sweep.toml --results docs/runs
    python -m simfl.study.bias_table docs/runs/bias_week [--online] [--by-day] [--estimators a,b]
    python -m simfl.study.bias_table docs/runs/bias_week --pivot availability_bias
    python -m simfl.study.bias_table docs/runs/bias_week --pivot bias --across theta \\
        --estimators cohort_exact

``--online`` adds E_online − Q_pop (sampling + availability): the bias of the estimator on
uniformly random cohorts of the devices online when the round opened, the part an
availability correction (IPW, post-stratification) is meant to remove. ``--by-day`` splits
each run's bias rounds by simulated day (``t_s`` // 86,400 + 1; the burn-in still applies),
for estimators whose quality changes as the days go by, such as IPW's estimated rates.
``--pivot COLUMN`` prints one quantity (bias, sampling_bias, availability_bias,
selection_bias, conformity_gap, online: E_online − Q_pop) with a column per estimator: one
row per cell of the sweep; ``--across theta`` makes the columns the θ values instead (with
``--estimators`` naming one estimator, one row per variant and cohort size, and no
estimator column). ``--rounds`` pools each cell's bias rounds over its seeds (mean and
median conformity gap, share of rounds with η̂ above Q_pop); ``--largest-gap REF`` prints,
per estimator, the largest difference of a run's mean bias from estimator REF's in the
same run.

``--paired A,B`` (repeatable: one column per pair) prints, per cell, estimator A minus
estimator B paired within runs: per run, the mean over the bias rounds both have of A's
quantity minus B's (the ``--pivot`` quantity, E_online − Q_pop when none is given), then
the mean over seeds ± the half-width of the 95 % t-interval of those per-run differences.
Shadow estimators see the same cohorts, so the pairing removes what the runs share:

    python -m simfl.study.bias_table docs/runs/bias_week --paired ipw_days,ipw \\
        --paired ipw,poststrat --digits 4

``--prescribed`` counts every estimator's causes from what Δ-FL's objective prescribes
(simfl.plots.study.against_prescribed): the sampling term is ``cohort_exact``'s for all,
and availability = E_online − E_all(cohort_exact), each estimator's own after its
correction (bias.parquet's split applies a reweighting estimator's weights to uniform
cohorts too).

``--digits N`` sets the decimals of every printed mean and half-width (default 3).
``--only AXIS=VALUE`` (repeatable) keeps the cells whose sweep axis AXIS prints as VALUE
(e.g. ``--only clients_per_round=20 --only theta=0.5``); an axis left with one value is no
longer a column. ``--margin M`` follows every interval with its verdict, the only ones the
study's pages use: *different* (the 95 % interval excludes 0), *equivalent within ±M* (it
lies inside (−M, +M)), both when both hold, else *not detected*.
``--cohort-sizes`` prints, per cohort size K (``clients_per_round``), how many loss reports
the estimators saw (``cohort_size``, every round of every run), in how many rounds fewer
than the most, and from the sweep's ``rounds.parquet`` the fewest devices a round selected
and the longest round (``t_end_s`` − ``t_start_s``).

Every table is a function of the collected bias table returning its markdown lines.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import polars as pl

from simfl.errors import InputError
from simfl.plots.study import DECOMPOSITION, against_prescribed, bias_rows
from simfl.study import run_command
from simfl.study.intervals import ci, paired

COLUMNS = ("bias", *DECOMPOSITION, "conformity_gap")
HEADERS = ("bias", "sampling", "availability", "selection", "conformity − θ")


def verdict(values: np.ndarray, margin: float) -> str:
    """The verdict of the values' 95 % t-interval (:func:`simfl.study.intervals.paired`)
    against 0 and against ± ``margin``; "" with fewer than two values (no interval)."""
    if len(values) < 2:
        return ""
    d = paired(values)
    found = [name for name, holds in (("different", d.low > 0 or d.high < 0),
                                      (f"equivalent within ±{margin:g}",
                                       -margin < d.low and d.high < margin)) if holds]
    return " and ".join(found) or "not detected"


def interval(values: np.ndarray, digits: int, margin: float | None) -> str:
    """A table cell: mean ± 95 % half-width, then the verdict when a margin is given."""
    cell = ci(values, digits)
    judged = verdict(values, margin) if margin is not None else ""
    return f"{cell} ({judged})" if judged else cell


def read_bias(sweep_dir: Path, prescribed: bool = False, only: list[str] | None = None
              ) -> pl.DataFrame:
    """A collected sweep's bias table (``--prescribed``: counted as the objective
    prescribes), keeping the cells whose axis prints as each ``AXIS=VALUE`` of ``only``.
    InputError for a folder without bias.parquet or an ``only`` that keeps nothing."""
    if not (sweep_dir / "bias.parquet").is_file():
        raise InputError(f"{sweep_dir}: no bias.parquet (run python -m simfl collect)")
    bias = pl.read_parquet(sweep_dir / "bias.parquet")
    if prescribed:
        bias = against_prescribed(bias)
    for kept in only or []:
        axis, _, wanted = kept.partition("=")
        if axis not in bias.columns or not wanted:
            raise InputError(f"--only: not AXIS=VALUE with an axis of {sweep_dir}: {kept}")
        bias = bias.filter(pl.col(axis).cast(pl.Utf8) == wanted)
        if bias.is_empty():
            raise InputError(f"--only: no cell of {sweep_dir} has {kept}")
    return bias


def check_estimators(bias: pl.DataFrame, names: list[str], option: str, sweep_dir: Path) -> None:
    """InputError naming the estimators of ``names`` that the table lacks."""
    unknown = sorted(set(names) - set(bias["estimator"].unique()))
    if unknown:
        raise InputError(f"{option}: not in {sweep_dir}: {', '.join(unknown)}")


def cell_axes(bias: pl.DataFrame) -> list[str]:
    """The sweep axes with more than one value: the columns that name a cell."""
    return [a for a in ("variant", "clients_per_round", "theta")
            if a in bias.columns and bias[a].n_unique() > 1]


def round_rows(bias: pl.DataFrame) -> pl.DataFrame:
    """The bias rounds after the burn-in (simfl.plots.study.bias_rows) with ``online``
    (E_online − Q_pop) and ``day`` (the simulated day, from 1)."""
    return bias_rows(bias).with_columns(
        online=pl.col("sampling_bias") + pl.col("availability_bias"),
        day=(pl.col("t_s") // 86400).cast(pl.Int64) + 1)


def per_run(rows: pl.DataFrame, keys: list[str], columns: tuple[str, ...]) -> pl.DataFrame:
    """Per cell (``keys``) and seed: each column's mean over the run's bias rounds."""
    return rows.group_by(*keys, "seed").agg(pl.col(c).mean() for c in columns)


def cells_table(runs: pl.DataFrame, keys: list[str], columns: tuple[str, ...], digits: int = 3,
                margin: float | None = None) -> list[str]:
    """One row per cell (``keys``, from :func:`per_run`): its seeds, then each column's
    mean over seeds ± 95 % half-width (E_online − Q_pop last when ``columns`` has it)."""
    online = ["E_online − Q_pop"] * ("online" in columns)
    lines = ["| " + " | ".join([*keys, "seeds", *HEADERS, *online]) + " |",
             "|" + "---|" * (len(keys) + 1 + len(columns))]
    for group in runs.sort(*keys).partition_by(*keys, maintain_order=True):
        row = group.row(0, named=True)
        cells = [str(row[k]) for k in keys] + [str(group.height)]
        lines.append("| " + " | ".join(cells + [interval(group[c].to_numpy(), digits, margin)
                                                for c in columns]) + " |")
    return lines


def rounds_table(rows: pl.DataFrame, keys: list[str]) -> list[str]:
    """Per cell, every seed's bias rounds after the burn-in pooled: how many, the mean and the
    median conformity gap, and the share of rounds with η̂ above Q_pop (bias > 0)."""
    table = rows.group_by(keys).agg(
        pl.len().alias("rounds"), pl.col("conformity_gap").mean().alias("mean"),
        pl.col("conformity_gap").median().alias("median"),
        (pl.col("bias") > 0).mean().alias("above")).sort(keys)
    lines = ["| " + " | ".join([*keys, "rounds", "conformity − θ: mean", "median",
                               "share with η̂ > Q_pop"]) + " |",
             "|" + "---|" * (len(keys) + 4)]
    for row in table.iter_rows(named=True):
        lines.append("| " + " | ".join([*(str(row[k]) for k in keys), str(row["rounds"]),
                                       f"{row['mean']:+.3f}", f"{row['median']:+.3f}",
                                       f"{row['above']:.2f}"]) + " |")
    return lines


def largest_gap(rows: pl.DataFrame, reference: str) -> list[str]:
    """Per estimator, the largest |mean bias of a run − the reference estimator's in the
    same run| over every run (shadows see the same cohorts, so equal keep sets give 0)."""
    runs = rows.group_by("run_id", "estimator").agg(pl.col("bias").mean())
    ref = runs.filter(pl.col("estimator") == reference).select("run_id", ref="bias")
    gaps = (runs.filter(pl.col("estimator") != reference).join(ref, on="run_id")
            .group_by("estimator").agg((pl.col("bias") - pl.col("ref")).abs().max().alias("gap"),
                                       pl.len().alias("runs")).sort("estimator"))
    return [f"{row['estimator']}: largest |run mean bias - {reference}'s| over "
            f"{row['runs']} runs = {row['gap']:.5f}" for row in gaps.iter_rows(named=True)]


def cohort_sizes(bias: pl.DataFrame, rounds_file: Path) -> list[str]:
    """Per cohort size: the loss reports behind η̂ in every round (the driver's row), the
    rounds with fewer than the most, and (rounds.parquet) the fewest selected, the longest
    round."""
    key = "clients_per_round" if "clients_per_round" in bias.columns else None
    by = [pl.col(key)] if key else [pl.lit("all").alias("clients_per_round")]
    sizes = bias.filter(pl.col("driver")).group_by(by).agg(
        pl.len().alias("rounds"), pl.col("cohort_size").max().alias("most"),
        pl.col("cohort_size").min().alias("fewest"),
        (pl.col("cohort_size") < pl.col("cohort_size").max()).sum().alias("fewer"))
    if rounds_file.exists():
        rounds = pl.read_parquet(rounds_file)
        if key is None or key not in rounds.columns:
            rounds = rounds.with_columns(pl.lit("all").alias("clients_per_round"))
        sizes = sizes.join(rounds.group_by("clients_per_round").agg(
            pl.col("num_selected").min().alias("selected"),
            (pl.col("t_end_s") - pl.col("t_start_s")).max().alias("longest")),
            on="clients_per_round", how="left")
    lines = ["| clients_per_round | rounds | loss reports (most) | fewest | rounds with fewer | "
             "% of rounds | fewest selected | longest round (s) |", "|" + "---|" * 8]
    for row in sizes.sort("clients_per_round").iter_rows(named=True):
        selected, longest = row.get("selected"), row.get("longest")
        lines.append(f"| {row['clients_per_round']} | {row['rounds']} | {row['most']} | "
                     f"{row['fewest']} | {row['fewer']} | "
                     f"{100 * row['fewer'] / row['rounds']:.3f} | "
                     f"{'' if selected is None else selected} | "
                     f"{'' if longest is None else f'{longest:.1f}'} |")
    return lines


def paired_runs(rows: pl.DataFrame, cell: list[str], a: str, b: str,
                column: str) -> pl.DataFrame:
    """Per run (with its cell and seed): the mean over the bias rounds that both estimators
    have of ``column`` of estimator ``a`` minus that of ``b`` (column ``diff``)."""
    left = rows.filter(pl.col("estimator") == a).select(
        *cell, "seed", "run_id", "round", pl.col(column).alias("a"))
    right = rows.filter(pl.col("estimator") == b).select(
        "run_id", "round", pl.col(column).alias("b"))
    return left.join(right, on=["run_id", "round"]).group_by(*cell, "seed", "run_id").agg(
        (pl.col("a") - pl.col("b")).mean().alias("diff"))


def paired_table(rows: pl.DataFrame, cell: list[str], pairs: list[tuple[str, str]],
                 column: str, digits: int = 3, margin: float | None = None) -> list[str]:
    """One row per cell (its seeds: the fewest any pair has), a column per pair A,B: the
    mean over seeds ± 95 % t half-width of the per-run differences A − B."""
    runs = []
    for a, b in pairs:
        diff = paired_runs(rows, cell, a, b, column)
        runs.append({tuple(key): group["diff"].to_numpy() for key, group in
                     diff.partition_by(cell, as_dict=True).items()} if cell
                    else {(): diff["diff"].to_numpy()})
    lines = ["| " + " | ".join([*cell, "seeds", *(f"{a} − {b}" for a, b in pairs)]) + " |",
             "|" + "---|" * (len(cell) + 1 + len(pairs))]
    for key in sorted(set().union(*runs)):
        diffs = [by.get(key, np.array([])) for by in runs]
        lines.append("| " + " | ".join([*map(str, key), str(min(len(d) for d in diffs)),
                                        *(interval(d, digits, margin) if len(d) else ""
                                          for d in diffs)]) + " |")
    return lines


def pivot_table(runs: pl.DataFrame, cell: list[str], across: str, column: str,
                digits: int = 3, margin: float | None = None) -> list[str]:
    """One row per cell (its seeds: the fewest any column has), a column per value of
    ``across`` (the estimators, or a sweep axis such as θ, in descending order)."""
    values = sorted(runs[across].unique(), reverse=across != "estimator")
    lines = ["| " + " | ".join([*cell, "seeds", *(f"{across} {v}" if across != "estimator"
                                                  else str(v) for v in values)]) + " |",
             "|" + "---|" * (len(cell) + 1 + len(values))]
    for group in runs.sort(*cell).partition_by(*cell, maintain_order=True):
        row = group.row(0, named=True)
        by = {v: g[column].to_numpy()
              for (v,), g in group.partition_by(across, as_dict=True).items()}
        seeds = min(len(v) for v in by.values())
        cells = [interval(by[v], digits, margin) if v in by else "" for v in values]
        lines.append("| " + " | ".join([*(str(row[k]) for k in cell), str(seeds), *cells])
                     + " |")
    return lines


def report(args: argparse.Namespace) -> list[str]:
    """The table the command's options ask for."""
    bias = read_bias(args.sweep_dir, args.prescribed, args.only)
    if args.cohort_sizes:
        return cohort_sizes(bias, args.sweep_dir / "rounds.parquet")
    split = [p.split(",") for p in args.paired or ()]
    if any(len(p) != 2 for p in split):
        raise InputError("--paired: two estimators, A,B")
    pairs = [(a, b) for a, b in split]
    check_estimators(bias, [e for p in pairs for e in p], "--paired", args.sweep_dir)
    if args.estimators:
        names = args.estimators.split(",")
        check_estimators(bias, names, "--estimators", args.sweep_dir)
        bias = bias.filter(pl.col("estimator").is_in(names))
    columns = (*COLUMNS, "online") if args.online or args.pivot == "online" else COLUMNS
    keys = [*cell_axes(bias), *(["day"] * args.by_day), "estimator"]
    rows = round_rows(bias)
    if args.rounds:
        return rounds_table(rows, keys)
    if args.largest_gap:
        return largest_gap(rows, args.largest_gap)
    if pairs:
        return paired_table(rows, [k for k in keys if k != "estimator"], pairs,
                            args.pivot or "online", args.digits, args.margin)
    runs = per_run(rows, keys, columns)
    if args.pivot:
        if args.across not in keys:
            raise InputError(f"--across: not an axis of {args.sweep_dir}: {args.across}")
        cell = [k for k in keys if k != args.across  # one estimator: no column for it
                and (k != "estimator" or runs[k].n_unique() > 1)]
        return pivot_table(runs, cell, args.across, args.pivot, args.digits, args.margin)
    return cells_table(runs, keys, columns, args.digits, args.margin)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m simfl.study.bias_table",
                                     description=__doc__.splitlines()[0])
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
    parser.add_argument("--paired", metavar="A,B", action="append",
                        help="per cell, estimator A minus B paired within runs (the --pivot "
                             "quantity, default online); repeat for more columns")
    parser.add_argument("--prescribed", action="store_true",
                        help="every estimator's sampling term is cohort_exact's (the expected "
                             "uniform-minibatch quantile that Δ-FL's objective prescribes) and "
                             "availability = E_online - E_all(cohort_exact)")
    parser.add_argument("--digits", type=int, default=3, help="decimals of the printed figures")
    parser.add_argument("--only", metavar="AXIS=VALUE", action="append", default=[],
                        help="keep the cells whose axis prints as VALUE; repeat for more axes")
    parser.add_argument("--margin", type=float,
                        help="follow each interval with its verdict: different, equivalent "
                             "within ±MARGIN, or not detected")
    parser.add_argument("--cohort-sizes", action="store_true",
                        help="per K: loss reports the estimators saw, rounds with fewer, "
                             "fewest selected, longest round")
    args = parser.parse_args(argv)
    if args.paired and (args.estimators or args.rounds or args.largest_gap):
        parser.error("--paired: not with --estimators, --rounds or --largest-gap")
    return run_command(lambda: print("\n".join(report(args))))


if __name__ == "__main__":
    sys.exit(main())

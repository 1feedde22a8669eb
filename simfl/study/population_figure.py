"""The bias of the driving estimator's Δ-FL threshold and its three causes against the
population size, a line per cohort size K: each point the mean over seeds ± the
half-width of the 95 % t-interval, each run's figure the mean over its bias rounds after
the burn-in, the causes counted from what Δ-FL's objective prescribes (as
``python -m simfl.study.bias_table --prescribed``: the sampling term is ``cohort_exact``'s).

    python -m simfl collect scenarios/study/population_size.sweep.toml --results docs/runs
    python -m simfl.study.population_figure docs/runs/population_size \
        [--axis num_clients] [--figure docs/figures/population_size.png] [--at-most 1e5]

Prints the table (markdown), then each term's change per tenfold population (the slope of
the runs' values on log10 N, a row per K, with 95 % t-intervals: does a term depend on
N?), each term at the smallest K minus at each other K paired by population size and
seed (does it depend on K?), and, with ``--figure``, draws the first table: four panels
(the bias and its sampling, availability and selection terms), the population axis on a
log scale. :func:`cells`, :func:`slopes` and :func:`cohort_difference` give the tables as
frames; the ``*_markdown`` functions print them.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import polars as pl
import seaborn as sns
from matplotlib.figure import Figure
from scipy import stats

from simfl.errors import InputError
from simfl.plots import save_figure
from simfl.plots.study import DECOMPOSITION, against_prescribed, per_run_bias
from simfl.study import run_command
from simfl.study.intervals import paired

TERMS = ("bias", *DECOMPOSITION)
COHORT = "clients_per_round"


def driving_runs(bias: pl.DataFrame, axes: list[str]) -> pl.DataFrame:
    """The driving estimator's per-run means (simfl.plots.study.per_run_bias: each run's
    mean over its bias rounds after the burn-in), keeping ``axes``."""
    driving = against_prescribed(bias).filter(pl.col("driver") & (pl.col("mc_draws") > 0))
    return per_run_bias(driving, axes)


def cells(bias: pl.DataFrame, axis: str) -> pl.DataFrame:
    """Per (``axis``, K): the seeds, and of each term the mean over runs and the
    half-width of its 95 % t-interval (``<term>_half``), for the driving estimator
    (simfl.plots.study.per_run_bias: each run's mean over its bias rounds after the
    burn-in)."""
    runs = driving_runs(bias, [axis, COHORT])
    grouped = runs.group_by(axis, COHORT).agg(
        pl.len().alias("seeds"), *(pl.col(t).mean().alias(t) for t in TERMS),
        *(pl.col(t).std().fill_null(float("nan")).alias(f"{t}_sd") for t in TERMS))
    t975 = pl.col("seeds").map_elements(lambda n: float(stats.t.ppf(0.975, n - 1)) if n > 1
                                        else float("nan"), return_dtype=pl.Float64)
    return grouped.with_columns(
        *((t975 * pl.col(f"{t}_sd") / pl.col("seeds").sqrt()).alias(f"{t}_half")
          for t in TERMS)).drop(*(f"{t}_sd" for t in TERMS)).sort(COHORT, axis)


def slopes(bias: pl.DataFrame, axis: str) -> pl.DataFrame:
    """Per K and term: the least-squares slope of the runs' values (each run's mean, as
    :func:`cells`) on log10 of ``axis``, i.e. the change per tenfold population, with the
    half-width of its 95 % t-interval (runs − 2 degrees of freedom) and the runs used."""
    runs = driving_runs(bias, [axis, COHORT])
    rows = []
    for (k,), part in runs.sort(COHORT).partition_by(COHORT, as_dict=True,
                                                      maintain_order=True).items():
        x = np.log10(part[axis].to_numpy().astype(float))
        row: dict[str, object] = {COHORT: k, "runs": part.height}
        for term in TERMS:
            fit = stats.linregress(x, part[term].to_numpy())
            half = (float(stats.t.ppf(0.975, part.height - 2)) * fit.stderr
                    if part.height > 2 else float("nan"))
            row |= {term: float(fit.slope), f"{term}_half": half}
        rows.append(row)
    return pl.DataFrame(rows)


def cohort_difference(bias: pl.DataFrame, axis: str) -> pl.DataFrame:
    """Per term: the smallest K's value minus each larger K's, paired by population size
    and seed (the same population and availability), over every population size: the
    mean difference, the half-width of its 95 % t-interval, the pairs."""
    runs = driving_runs(bias, [axis, COHORT, "seed"])
    sizes = sorted(runs[COHORT].unique().to_list())
    rows = []
    for k in sizes[1:]:
        pairs = runs.filter(pl.col(COHORT) == sizes[0]).join(
            runs.filter(pl.col(COHORT) == k), on=[axis, "seed"], suffix="_other")
        row: dict[str, object] = {"smaller": sizes[0], "larger": k, "pairs": pairs.height}
        for term in TERMS:
            diff = (pairs[term] - pairs[f"{term}_other"]).to_numpy()
            half = paired(diff).high - diff.mean() if len(diff) > 1 else float("nan")
            row |= {term: float(diff.mean()), f"{term}_half": float(half)}
        rows.append(row)
    return pl.DataFrame(rows)


def _terms(row: dict[str, object]) -> str:
    """A table row's terms as ``mean ± half-width`` cells."""
    return " | ".join(f"{row[t]:+.4f} ± {row[f'{t}_half']:.4f}" for t in TERMS)


def difference_markdown(table: pl.DataFrame) -> str:
    """One row per larger K: each term at the smallest K minus at it, ± half-width."""
    lines = ["| K − K' | pairs | " + " | ".join(TERMS) + " |",
             "|---|---|" + "---|" * len(TERMS)]
    for row in table.iter_rows(named=True):
        lines.append(f"| {row['smaller']} − {row['larger']} | {row['pairs']} | {_terms(row)} |")
    return "\n".join(lines)


def slope_markdown(table: pl.DataFrame) -> str:
    """One row per K: each term's change per tenfold population, slope ± half-width."""
    lines = ["| K | runs | " + " | ".join(f"{t} per decade" for t in TERMS) + " |",
             "|---|---|" + "---|" * len(TERMS)]
    for row in table.iter_rows(named=True):
        lines.append(f"| {row[COHORT]} | {row['runs']} | {_terms(row)} |")
    return "\n".join(lines)


def markdown(table: pl.DataFrame, axis: str) -> str:
    """One row per cell: ``axis``, K, seeds, then each term as mean ± half-width."""
    lines = [f"| {axis} | K | seeds | " + " | ".join(TERMS) + " |",
             "|---|---|---|" + "---|" * len(TERMS)]
    for row in table.iter_rows(named=True):
        terms = _terms(row)
        lines.append(f"| {row[axis]} | {row[COHORT]} | {row['seeds']} | {terms} |")
    return "\n".join(lines)


def figure(table: pl.DataFrame, axis: str) -> Figure:
    """The four terms of :func:`cells` against ``axis`` (log scale), a line per K with
    95 % intervals (built without pyplot, as simfl.plots' figures)."""
    fig = Figure(figsize=(3.4 * len(TERMS), 3.4))
    with sns.axes_style("whitegrid"):
        axes = fig.subplots(1, len(TERMS), sharey=True)
    palette = sns.color_palette("deep", table[COHORT].n_unique())
    groups = table.partition_by(COHORT, as_dict=True, maintain_order=True)
    # each K's points a little apart on the log axis, so that their intervals do not overlap
    dodge = 10 ** (0.05 * (np.arange(len(groups)) - (len(groups) - 1) / 2))
    for ax, term in zip(axes, TERMS, strict=True):
        for colour, shift, ((k,), part) in zip(palette, dodge, groups.items(), strict=True):
            ax.errorbar(part[axis].to_numpy() * shift, part[term].to_numpy(),
                        yerr=part[f"{term}_half"].to_numpy(), fmt="o-", color=colour,
                        capsize=3, label=f"K = {k}")
        ax.axhline(0.0, color="black", lw=0.8)
        ax.set_xscale("log")
        values = np.sort(table[axis].unique().to_numpy())
        ax.set_xticks(values, [f"$10^{{{round(np.log10(v))}}}$" for v in values])
        ax.set_title(term.replace("_bias", "").replace("bias", "total bias"))
        ax.set_xlabel("devices in the population")
    axes[0].set_ylabel("η̂ − Q_pop (loss)")
    axes[1].legend(title="devices a round", loc="lower right")  # the sampling term is near 0
    fig.suptitle("The driving estimator's bias and its causes: mean ± 95 % t-interval "
                 "over seeds")
    fig.tight_layout()
    return fig


def read_bias(sweep_dir: Path, axis: str, at_most: float | None = None) -> pl.DataFrame:
    """A collected sweep's bias table, only the runs whose population ``axis`` is at most
    ``at_most`` when given. InputError for a folder without bias.parquet, an ``axis`` it
    lacks, or fewer than two population sizes left."""
    if not (sweep_dir / "bias.parquet").is_file():
        raise InputError(f"{sweep_dir}: no bias.parquet (run python -m simfl collect)")
    bias = pl.read_parquet(sweep_dir / "bias.parquet")
    if axis not in bias.columns:
        raise InputError(f"--axis: {axis} is not an axis of {sweep_dir}")
    if at_most is not None:
        bias = bias.filter(pl.col(axis) <= at_most)
        if bias[axis].n_unique() < 2:
            raise InputError(f"--at-most {at_most:g}: fewer than two population sizes left, "
                             "so no change per decade to fit")
    return bias


def report(bias: pl.DataFrame, axis: str) -> list[str]:
    """The three tables: per cell, per K's change per decade, the smallest K minus the others."""
    lines = [markdown(cells(bias, axis), axis),
             f"\nChange per tenfold {axis} (least squares on log10, 95 % t-interval):\n",
             slope_markdown(slopes(bias, axis))]
    if bias[COHORT].n_unique() > 1:
        lines += ["\nThe smallest K minus each other K, paired by population size and seed "
                  "(95 % t-interval):\n", difference_markdown(cohort_difference(bias, axis))]
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m simfl.study.population_figure",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("sweep_dir", type=Path, help="results/<sweep> or docs/runs/<sweep> "
                                                     "after collect")
    parser.add_argument("--axis", default="num_clients", help="the population-size axis")
    parser.add_argument("--figure", type=Path, help="write the figure here (PNG)")
    parser.add_argument("--at-most", type=float, metavar="N",
                        help="only the runs whose population is at most N (a smaller "
                             "study's range within a larger sweep)")
    args = parser.parse_args(argv)

    def work() -> None:
        bias = read_bias(args.sweep_dir, args.axis, args.at_most)
        print("\n".join(report(bias, args.axis)))
        if args.figure:
            save_figure(figure(cells(bias, args.axis), args.axis), args.figure)
            print(f"wrote {args.figure}")

    return run_command(work)


if __name__ == "__main__":
    sys.exit(main())

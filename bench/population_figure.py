"""The bias of the driving estimator's Δ-FL threshold and its three causes against the
population size, a line per cohort size K: each point the mean over seeds ± the
half-width of the 95 % t-interval, each run's figure the mean over its bias rounds after
the burn-in, the causes counted from what Δ-FL's objective prescribes (as
``bench/bias_table.py --prescribed``: the sampling term is ``cohort_exact``'s).

    python -m simfl collect scenarios/study/population_size.sweep.toml --results docs/runs
    python bench/population_figure.py docs/runs/population_size \
        [--axis num_clients] [--figure docs/figures/population_size.png]

Prints the table (markdown) and, with ``--figure``, draws it: four panels (the bias and
its sampling, availability and selection terms), the population axis on a log scale.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import polars as pl  # noqa: E402
import seaborn as sns  # noqa: E402
from scipy import stats  # noqa: E402

from simfl.plots.study import DECOMPOSITION, against_prescribed, per_run_bias  # noqa: E402

TERMS = ("bias", *DECOMPOSITION)
COHORT = "clients_per_round"


def cells(bias: pl.DataFrame, axis: str) -> pl.DataFrame:
    """Per (``axis``, K): the seeds, and of each term the mean over runs and the
    half-width of its 95 % t-interval (``<term>_half``), for the driving estimator
    (simfl.plots.study.per_run_bias: each run's mean over its bias rounds after the
    burn-in)."""
    driving = against_prescribed(bias).filter(pl.col("driver") & (pl.col("mc_draws") > 0))
    runs = per_run_bias(driving, [axis, COHORT])
    grouped = runs.group_by(axis, COHORT).agg(
        pl.len().alias("seeds"), *(pl.col(t).mean().alias(t) for t in TERMS),
        *(pl.col(t).std().fill_null(float("nan")).alias(f"{t}_sd") for t in TERMS))
    t975 = pl.col("seeds").map_elements(lambda n: float(stats.t.ppf(0.975, n - 1)) if n > 1
                                        else float("nan"), return_dtype=pl.Float64)
    return grouped.with_columns(
        *((t975 * pl.col(f"{t}_sd") / pl.col("seeds").sqrt()).alias(f"{t}_half")
          for t in TERMS)).drop(*(f"{t}_sd" for t in TERMS)).sort(COHORT, axis)


def markdown(table: pl.DataFrame, axis: str) -> str:
    """One row per cell: ``axis``, K, seeds, then each term as mean ± half-width."""
    lines = [f"| {axis} | K | seeds | " + " | ".join(TERMS) + " |",
             "|---|---|---|" + "---|" * len(TERMS)]
    for row in table.iter_rows(named=True):
        terms = " | ".join(f"{row[t]:+.4f} ± {row[f'{t}_half']:.4f}" for t in TERMS)
        lines.append(f"| {row[axis]} | {row[COHORT]} | {row['seeds']} | {terms} |")
    return "\n".join(lines)


def figure(table: pl.DataFrame, axis: str, path: Path) -> None:
    """The four terms against ``axis`` (log scale), a line per K with 95 % intervals."""
    sns.set_theme(style="whitegrid")
    fig, axes = plt.subplots(1, len(TERMS), figsize=(3.4 * len(TERMS), 3.4), sharey=True)
    palette = sns.color_palette("deep", table[COHORT].n_unique())
    for ax, term in zip(axes, TERMS, strict=True):
        for colour, ((k,), part) in zip(palette, table.partition_by(
                COHORT, as_dict=True, maintain_order=True).items(), strict=True):
            ax.errorbar(part[axis].to_numpy(), part[term].to_numpy(),
                        yerr=part[f"{term}_half"].to_numpy(), fmt="o-", color=colour,
                        capsize=3, label=f"K = {k}")
        ax.axhline(0.0, color="black", lw=0.8)
        ax.set_xscale("log")
        values = np.sort(table[axis].unique().to_numpy())
        ax.set_xticks(values, [f"$10^{{{round(np.log10(v))}}}$" for v in values])
        ax.set_title(term.replace("_bias", "").replace("bias", "total bias"))
        ax.set_xlabel("devices in the population")
    axes[0].set_ylabel("η̂ − Q_pop (loss)")
    axes[-1].legend(title="devices a round")
    fig.suptitle("The driving estimator's bias and its causes: mean ± 95 % t-interval "
                 "over seeds")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("sweep_dir", type=Path, help="results/<sweep> or docs/runs/<sweep> "
                                                     "after collect")
    parser.add_argument("--axis", default="num_clients", help="the population-size axis")
    parser.add_argument("--figure", type=Path, help="write the figure here (PNG)")
    args = parser.parse_args()
    bias = pl.read_parquet(args.sweep_dir / "bias.parquet")
    if args.axis not in bias.columns:
        parser.error(f"--axis: {args.axis} is not an axis of {args.sweep_dir}")
    table = cells(bias, args.axis)
    print(markdown(table, args.axis))
    if args.figure:
        figure(table, args.axis, args.figure)
        print(f"wrote {args.figure}")


if __name__ == "__main__":
    main()

"""One run's threshold estimates against the population's quantile (``threshold_estimates``).

The server's estimate η̂_t of the Δ-FL threshold aims at Q_pop(w_t), the θ-quantile of
the current model's losses over all training devices (Laguel, Pillutla, Malick,
Harchaoui, "Federated Learning with Superquantile Aggregation for Heterogeneous Data",
Algorithm 2's η-step). bias.parquet holds η̂ every round but Q_pop only on the rounds
that evaluated every training device (``estimator.bias_every``), so the two are drawn on
those rounds alone, and their gap η̂ − Q_pop (bias.parquet's ``bias``) in a panel of its
own, around a zero line: a gap of 0.02 beside thresholds of 2 would not show as the
distance between two lines on the thresholds' scale.
"""

from __future__ import annotations

import polars as pl
import seaborn as sns
from matplotlib.figure import Figure

from simfl.plots import honest_ylim


def compared_rounds(bias: pl.DataFrame) -> pl.DataFrame:
    """The rows where both η̂ (finite) and Q_pop exist, sorted by round and estimator."""
    return bias.filter(pl.col("oracle_quantile").is_not_null()
                       & pl.col("estimate").is_not_null()
                       & pl.col("estimate").is_finite()).sort("round", "estimator")


def plot_estimates_over_rounds(bias: pl.DataFrame) -> Figure:
    """One run: top, every estimator's η̂ and the population quantile Q_pop on the rounds
    where both exist; bottom, their gap η̂ − Q_pop, with a zero line. A run that never
    evaluated Q_pop (``estimator.bias_every = 0``) gets the estimates alone, every round,
    said in the title; rounds without a finite estimate are counted in it."""
    missing = bias.filter(pl.col("estimate").is_null() | pl.col("estimate").is_nan())
    gaps = (f"; {missing['round'].n_unique()} rounds without a finite estimate, not drawn"
            if missing.height else "")
    rows = compared_rounds(bias)
    theta = f"θ = {bias['theta'][0]:g}"
    fig = Figure(figsize=(7.6, 6.0 if rows.height else 4.2), layout="constrained")
    with sns.axes_style("whitegrid"):
        top, bottom = fig.subplots(2, 1, sharex=True) if rows.height \
            else (fig.add_subplot(), None)
    if bottom is None:
        finite = bias.filter(pl.col("estimate").is_finite())
        sns.lineplot(finite.to_pandas(), x="round", y="estimate", hue="estimator", ax=top,
                     lw=0.8)
        top.set(xlabel="round", ylabel="threshold η̂ (loss)")
        fig.suptitle(f"Threshold estimates, {theta}\nno round evaluated the population "
                     f"quantile (estimator.bias_every = 0){gaps}", fontsize="medium")
        return fig
    frame = rows.to_pandas()
    sns.lineplot(frame, x="round", y="estimate", hue="estimator", marker=".", lw=0.9, ax=top)
    oracle = rows.unique("round").sort("round")
    top.plot(oracle["round"], oracle["oracle_quantile"], color="black", marker="o", ms=3,
             lw=1.2, label="population quantile Q_pop")
    top.legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.01, 1.0))
    top.set(ylabel="threshold (loss)")
    honest_ylim([top], bounds=None)
    sns.lineplot(frame, x="round", y="bias", hue="estimator", marker=".", lw=0.9, ax=bottom,
                 legend=False)
    bottom.axhline(0.0, color="black", lw=0.8)
    bottom.set(xlabel="round", ylabel="gap η̂ − Q_pop (loss)")
    fig.suptitle(f"Threshold estimates against the population quantile, {theta}\non the "
                 f"{oracle.height} rounds that evaluated it{gaps}", fontsize="medium")
    return fig

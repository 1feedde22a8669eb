"""The threshold figure (simfl.plots.threshold): η̂ and Q_pop on the rounds where both
exist, their gap in its own panel around zero."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest

from simfl.plots.threshold import plot_estimates_over_rounds


def bias_table(oracle_every: int) -> pl.DataFrame:
    """Two estimators over 10 rounds: a's η̂ = 2.0 + 0.01 r, b's = 1.9 every round; Q_pop =
    2.0 on every ``oracle_every``-th round (0: never), else null."""
    rows = []
    for r in range(10):
        known = oracle_every and r % oracle_every == 0
        for name, estimate in (("a", 2.0 + 0.01 * r), ("b", 1.9)):
            oracle = 2.0 if known else None
            rows.append({"round": r, "estimator": name, "theta": 0.5, "estimate": estimate,
                         "oracle_quantile": oracle,
                         "bias": estimate - 2.0 if known else None})
    return pl.DataFrame(rows)


def test_estimates_and_population_quantile_on_the_rounds_where_both_exist() -> None:
    fig = plot_estimates_over_rounds(bias_table(oracle_every=3))
    top, bottom = fig.axes[:2]
    lines = {line.get_label(): line for line in top.get_lines()}
    oracle = lines["population quantile Q_pop"]
    assert list(oracle.get_xdata()) == [0, 3, 6, 9] and set(oracle.get_ydata()) == {2.0}
    estimates = [line for line in top.get_lines() if line is not oracle
                 and len(line.get_xdata()) == 4]
    assert len(estimates) == 2  # one line per estimator, on the four rounds alone
    assert all(list(line.get_xdata()) == [0, 3, 6, 9] for line in estimates)
    gaps = sorted((list(np.round(line.get_ydata(), 6)) for line in bottom.get_lines()
                   if len(line.get_xdata()) == 4), key=lambda g: g[0])
    assert gaps == [[-0.1] * 4, [0.0, 0.03, 0.06, 0.09]]  # η̂ − Q_pop
    zero = [line for line in bottom.get_lines() if list(line.get_ydata()) == [0.0, 0.0]]
    assert zero and bottom.get_ylabel() == "gap η̂ − Q_pop (loss)"
    assert "on the 4 rounds that evaluated it" in fig.get_suptitle()


def test_rounds_without_a_finite_estimate_are_counted() -> None:
    bias = bias_table(oracle_every=1).with_columns(
        pl.when(pl.col("round") >= 7).then(float("nan")).otherwise(pl.col("estimate"))
        .alias("estimate"))
    fig = plot_estimates_over_rounds(bias)
    assert "3 rounds without a finite estimate" in fig.get_suptitle()
    assert max(fig.axes[0].get_lines()[0].get_xdata()) == 6


def test_a_run_without_the_population_quantile_shows_its_estimates_and_says_so() -> None:
    fig = plot_estimates_over_rounds(bias_table(oracle_every=0))
    assert len(fig.axes) == 1
    assert "no round evaluated the population quantile" in fig.get_suptitle()
    assert len(fig.axes[0].get_lines()[0].get_xdata()) == 10


def test_a_tiny_spread_of_thresholds_is_widened_and_said() -> None:
    bias = bias_table(oracle_every=1).with_columns(
        pl.col("estimate") * 0 + 2.0 + pl.col("round") * 1e-5,
        pl.lit(2.0).alias("oracle_quantile"))
    top = plot_estimates_over_rounds(bias).axes[0]
    low, high = top.get_ylim()
    assert high - low == pytest.approx(0.1 * 2.00009)  # WIDE (10 %) of the largest value
    assert any("the axis is widened" in t.get_text() for t in top.texts)

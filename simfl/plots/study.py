"""Figures of the threshold-estimation study, from ``bias.parquet`` (one run or a sweep).

Bias = η̂ − Q_pop(w_t) on the rounds where the population quantile was
evaluated; the realized conformity (the α-weight of the population at or above
η̂) is compared with its target θ. A sweep's collected tables
(``python -m simfl collect``) carry the sweep's axes as columns (``variant``,
``clients_per_round``, ``seed``, ...); statistics are per run first (mean over
its bias rounds after a burn-in), then mean ± standard deviation over seeds.
The burn-in skips the first ``BURN_IN_FRACTION`` of each run's rounds, where the
threshold falls fast with the loss and ``tracking`` is still catching up from its
initial value: the study is about the steady state.
"""

from __future__ import annotations

import textwrap
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path
from typing import Any, Literal

import numpy as np
import pandas as pd
import polars as pl
import seaborn as sns
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.ticker import NullFormatter

from simfl.plots import new_axes, save_figure
from simfl.plots.runs import P90_LABEL, byte_unit, skip_lines, with_format
from simfl.plots.threshold import plot_estimates_over_rounds
from simfl.records import read_table, table_exists
from simfl.rundir import COLLECT_MARK, PLOTS_DIR, STUDY_FIGURES
from simfl.tables import tail_vs_bytes

RUN_KEYS = ("run_id",)
BURN_IN_FRACTION = 0.2


def bias_rows(bias: pl.DataFrame) -> pl.DataFrame:
    """Rows with an oracle after the burn-in, with the conformity gap (conformity − θ)."""
    last = pl.col("round").max().over("run_id") if "run_id" in bias.columns else \
        pl.col("round").max()
    return bias.filter(pl.col("oracle_quantile").is_not_null()
                       & (pl.col("round") >= BURN_IN_FRACTION * last)).with_columns(
        (pl.col("realized_conformity") - pl.col("theta")).alias("conformity_gap"))


def against_prescribed(bias: pl.DataFrame) -> pl.DataFrame:
    """Each estimator's causes counted from the threshold the minibatch objective prescribes.

    The sampling term E_all − Q_pop has two readings. The workshop paper (Pillutla,
    Laguel, Malick, Harchaoui, "Tackling Distribution Shifts in Federated Learning with
    Superquantile Aggregation", §2) minimises the *expected minibatch superquantile*
    E_{S ~ U_m}[S_α(F_i(w) : i ∈ S)] over uniform subsets S of m devices; under that
    objective a round's threshold is its uniform cohort's own quantile, and its
    expectation over uniform cohorts, E_all of ``cohort_exact``, is the *prescribed*
    threshold: the sampling term is what the objective asks for, not an error of the
    server. The long paper (Laguel et al., "Federated Learning with Superquantile
    Aggregation for Heterogeneous Data", before its Algorithm 2) keeps the superquantile
    over all devices as the objective, estimates the η-step from a sample of devices, and
    leaves the quantile estimator's bias out of its scope; read so, the sampling term is
    part of the error η̂ − Q_pop. This function takes the first reading; bias.parquet's
    own split, with the total bias, serves the second.

    bias.parquet books each estimator's sampling term with its own E_all, which for a
    reweighting estimator (IPW) applies its weights to uniform cohorts, where no
    reweighting is called for. Here, per run and round, every estimator gets
    ``cohort_exact``'s sampling term, and availability = E_online − E_all(cohort_exact):
    how far the estimator, on random cohorts of the devices online, stays from the
    prescribed threshold after its correction. Selection is unchanged; the three still
    add up to the bias. Needs ``cohort_exact`` in every run (it drives the study's runs).
    """
    keys = [c for c in ("run_id", "round") if c in bias.columns]
    reference = bias.filter(pl.col("estimator") == "cohort_exact").select(
        *keys, pl.col("sampling_bias").alias("prescribed"))
    return bias.join(reference, on=keys, how="left").with_columns(
        availability_bias=pl.col("sampling_bias") + pl.col("availability_bias")
        - pl.col("prescribed"),
        sampling_bias=pl.col("prescribed")).drop("prescribed")


def per_run_bias(bias: pl.DataFrame, axes: list[str]) -> pl.DataFrame:
    """Mean bias, |bias| and conformity gap per (run, estimator), keeping the sweep axes;
    and the three causes (and their online part) where the run decomposed the bias."""
    keys = [c for c in (*RUN_KEYS, *axes) if c in bias.columns] + ["estimator"]
    causes = [pl.col(c).mean() for c in DECOMPOSITION if c in bias.columns]
    if "availability_bias" in bias.columns:
        causes.append((pl.col("sampling_bias") + pl.col("availability_bias")).mean().alias(
            "online_bias"))
    return bias_rows(bias).group_by(keys).agg(
        pl.col("bias").mean(), pl.col("bias").abs().mean().alias("abs_bias"),
        pl.col("conformity_gap").mean(), pl.col("protocol_bytes").mean(),
        pl.col("secure_sums").mean(), pl.col("cohort_size").mean(), *causes).sort(keys)


DECOMPOSITION = ("sampling_bias", "availability_bias", "selection_bias")
# The causes' legend labels, each with its definition (bias = the three summed): sampling is
# the prescribed threshold's gap from Q_pop under the minibatch objective, or an error of the
# estimate under the all-devices objective (:func:`against_prescribed` gives both readings).
CAUSE_LABELS = {"sampling_bias": "sampling (E_all − Q_pop)",
                "availability_bias": "availability (E_online − E_all)",
                "selection_bias": "selection (η̂ − E_online)"}


def _stacked_causes(ax: Axes, x: Sequence[float], rows: pl.DataFrame, legend: bool,
                    width: list[float] | float = 0.6) -> None:
    """The three causes of ``rows`` (one row per position in ``x``) as stacked bars, the
    positive and the negative parts stacked apart so neither hides the other. A bar is
    centred on its ``x`` unless ``width`` is a list: then ``x`` are the bars' left edges
    (bars of a log axis, :func:`_log_bars`)."""
    align: Literal["edge", "center"] = "edge" if isinstance(width, list) else "center"
    for sign in (1.0, -1.0):
        bottom = [0.0] * len(x)
        for i, column in enumerate(DECOMPOSITION):
            part = [max(sign * v, 0.0) * sign for v in rows[column].to_list()]
            ax.bar(x, part, bottom=bottom, color=f"C{i}", width=width, align=align,
                   label=CAUSE_LABELS[column] if sign > 0 and legend else None)
            bottom = [b + p for b, p in zip(bottom, part, strict=True)]


def averaged_rounds(bias: pl.DataFrame) -> str:
    """Which rounds the decomposition figures average, for a title: the rounds after the
    burn-in on which the bias was split by cause."""
    rounds = bias_rows(bias).filter(pl.col("mc_draws") > 0)["round"].unique().sort().to_list()
    if len(rounds) > 1:
        span = f"the {len(rounds)} rounds from {rounds[0]} to {rounds[-1]}"
    else:
        span = f"round {rounds[0]}" if rounds else "no round"
    return f"mean over {span} with the population quantile, after a burn-in (the first " \
           f"{BURN_IN_FRACTION:.0%} of the run)"


def plot_bias_decomposition(bias: pl.DataFrame) -> Figure:
    """One run: each estimator's mean bias after the burn-in split into its sampling,
    availability and selection terms (stacked bars; the dot is the total bias)."""
    rows = bias_rows(bias).filter(pl.col("mc_draws") > 0).group_by("estimator").agg(
        *(pl.col(c).mean() for c in (*DECOMPOSITION, "bias"))).sort("estimator")
    fig, ax = new_axes((8.0, 4.5))
    names = rows["estimator"].to_list()
    x = list(range(len(names)))
    _stacked_causes(ax, x, rows, legend=True)
    ax.plot(x, rows["bias"].to_list(), "k.", ms=9, label="total bias")
    ax.axhline(0.0, color="black", lw=0.8)
    ax.set_xticks(x, names, rotation=20)
    # beside the axes: the bars reach the top and the bottom of the frame
    ax.legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.01, 1.0))
    draws = bias["mc_draws"].to_numpy().max(initial=0)
    ax.set(ylabel="bias of η̂ (loss)")
    _fitted_title(fig, f"Threshold bias by cause, θ = {bias['theta'][0]:g} ({draws} random "
                       f"cohorts per term)", averaged_rounds(bias))
    return fig


def _sweep_order(table: pl.DataFrame) -> dict[str, list[object]]:
    """The variants and θ values in the order the sweep file lists them (collect writes the
    runs in that order), for the panels of :func:`_panel_grid`."""
    return {c: table[c].unique(maintain_order=True).to_list() for c in ("variant", "theta")
            if c in table.columns}


def _panel_grid(frame: pd.DataFrame, x: str, width: float,
                order: dict[str, list[object]]) -> tuple[Figure, list[tuple[Axes, pd.DataFrame]]]:
    """A sweep figure's panels: a column per variant (when the sweep has variants) and a
    row per θ (when its runs differ in θ), in the sweep's ``order`` (:func:`_sweep_order`),
    so runs that differ in either are never averaged together; each panel titled, with the
    rows of ``frame`` it draws."""
    variants = order["variant"] if "variant" in frame and x != "variant" else [None]
    thetas = order["theta"] if "theta" in frame and x != "theta" \
        and frame["theta"].nunique() > 1 else [None]
    fig = Figure(figsize=(width * len(variants) + 2.4, 3.6 * len(thetas) + 0.4),  # + legend
                 layout="constrained")
    panels, shared = [], None
    for row, theta in enumerate(thetas):
        for col, variant in enumerate(variants):
            with sns.axes_style("whitegrid"):
                ax = fig.add_subplot(len(thetas), len(variants), row * len(variants) + col + 1,
                                     sharey=shared)
            shared = shared or ax
            part = frame if variant is None else frame[frame["variant"] == variant]
            part = part if theta is None else part[part["theta"] == theta]
            ax.set_title(", ".join([*([str(variant)] if variant else []),
                                    *([f"θ = {theta:g}"] if theta is not None else [])]))
            panels.append((ax, part))
    return fig, panels


def _top_right(ax: Axes) -> bool:
    """Whether ``ax`` is the grid's top-right panel, the one whose legend is drawn."""
    spec = ax.get_subplotspec()
    return spec is not None and spec.is_first_row() and spec.is_last_col()


def _label_outer(ax: Axes, xlabel: str, ylabel: str) -> None:
    """Axis labels on the outer panels only; a legend beside the panels, not over them."""
    spec = ax.get_subplotspec()
    assert spec is not None
    ax.set(xlabel=xlabel if spec.is_last_row() else "",
           ylabel=ylabel if spec.is_first_col() else "")
    if ax.get_legend():
        sns.move_legend(ax, "upper left", bbox_to_anchor=(1.02, 1.0), fontsize="small")


SEED_SPREAD = "mean ± 1 sd over seeds"  # what a sweep figure's bars and dots are
AXIS_LABELS = {"clients_per_round": "clients per round (cohort size, log scale)"}


def _is_numeric(frame: pd.DataFrame, x: str) -> bool:
    """Whether the sweep axis ``x`` is a number (drawn at its value), not a category."""
    return bool(pd.api.types.is_numeric_dtype(frame[x]))


def _numeric_axis(ax: Axes, x: str, values: list[float]) -> None:
    """A numeric sweep axis ticked at the sweep's values (not 5x10^0 ... 9x10^0); the
    cohort size on a log scale, where its values usually double."""
    if x == "clients_per_round" and min(values) > 0:
        ax.set_xscale("log")
        pad = 1.3 if max(values) > min(values) else 1.6  # one value: a frame around it
        ax.set_xlim(min(values) / pad, max(values) * pad)
    ax.set_xticks(values, [f"{v:g}" for v in values])
    ax.xaxis.set_minor_formatter(NullFormatter())


def _mean_sd_by_estimator(ax: Axes, part: pd.DataFrame, x: str, column: str,
                          estimators: list[str], order: list[Any]) -> None:
    """Each estimator's mean ± sd over the runs (seeds) of ``column`` at each value of
    ``x``: joined by a line where ``x`` is a number, apart (dodged) where it names
    categories (drawn in the sweep's ``order``), which a line would join as if they were
    ordered."""
    numeric = _is_numeric(part, x)
    stats = part.groupby(["estimator", x], sort=False)[column].agg(["mean", "std"]) \
        .reset_index().fillna({"std": 0.0})
    present = set(part[x])
    categories = [v for v in order if v in present] or list(dict.fromkeys(part[x]))
    rank = {v: i for i, v in enumerate(categories)}
    for i, estimator in enumerate(estimators):
        rows = stats[stats["estimator"] == estimator]
        rows = rows.sort_values(x, key=None if numeric else lambda c: c.map(rank))
        offset = (i - (len(estimators) - 1) / 2) / max(len(estimators), 1)
        if numeric:  # dodged a little, so that one estimator's bar does not hide another's
            xs = _dodge(rows[x].to_numpy(float), offset, sorted(map(float, categories)),
                        log=x == "clients_per_round")
        else:
            xs = np.array([categories.index(v) for v in rows[x]]) + 0.6 * offset
        ax.errorbar(xs, rows["mean"], yerr=rows["std"], marker="o", ms=5, capsize=3,
                    color=f"C{i % 10}", ls="-" if numeric else "", label=estimator)
    if numeric:
        _numeric_axis(ax, x, sorted(float(v) for v in categories))
    else:
        ax.set_xticks(range(len(categories)), [str(c) for c in categories])


def plot_bias_by(bias: pl.DataFrame, x: str, column: str, ylabel: str) -> Figure:
    """Mean ± sd over runs (seeds) of ``column`` vs the sweep axis ``x``, one colour per
    estimator, in panels by variant and θ (:func:`_panel_grid`); a numeric axis (the cohort
    size) is drawn at its values, categories (variants) side by side without lines."""
    axes = list(dict.fromkeys(c for c in (x, "variant", "theta") if c in bias.columns))
    runs = per_run_bias(bias, axes).to_pandas()
    fig, panels = _panel_grid(runs, x, 4.2, _sweep_order(bias))
    estimators = sorted(runs["estimator"].unique())  # one colour in every panel
    order = _sweep_order(bias).get(x, [])
    for ax, part in panels:
        _mean_sd_by_estimator(ax, part, x, column, estimators, order)
        ax.axhline(0.0, color="k", lw=0.6)
        _label_outer(ax, AXIS_LABELS.get(x, x), ylabel)
        if _top_right(ax):
            _legend_beside(ax, f"estimator\n({SEED_SPREAD})")
    return fig


def _log_step(values: list[float]) -> float:
    """The smallest ratio between neighbouring ``values`` (sorted, positive); 2 for one."""
    ratios = [b / a for a, b in zip(values, values[1:], strict=False) if a > 0 and b > a]
    return min(ratios, default=2.0)


def _dodge(xs: np.ndarray, offset: float, values: list[float], log: bool) -> np.ndarray:
    """``xs`` moved by ``offset`` (-0.5 .. 0.5) of a fifth of the gap between neighbouring
    sweep ``values``: on the page, the same whatever the values."""
    if log:
        return xs * _log_step(values) ** (offset / 5)
    gaps = np.diff(values)
    return xs + offset / 5 * (float(gaps.min()) if gaps.size else 1.0)


def _log_bars(values: list[float]) -> tuple[list[float], list[float]]:
    """Left edges and widths of bars centred (geometrically) on ``values`` of a log axis,
    each as wide on the page as the others and narrower than the gap between neighbours."""
    half = _log_step(values) ** 0.3
    return [v / half for v in values], [v * half - v / half for v in values]


def _bar_positions(ax: Axes, x: str, values: list[Any]
                   ) -> tuple[list[float], list[float], list[float] | float]:
    """Where a sweep panel's bars stand: at the cohort sizes on a log axis
    (:func:`_numeric_axis`), else one category after the other. Returns the centres, and
    the positions and widths for :func:`_stacked_causes`."""
    if x == "clients_per_round" and all(isinstance(v, int | float) and v > 0 for v in values):
        centres = [float(v) for v in values]
        _numeric_axis(ax, x, centres)
        return (centres, *_log_bars(centres))
    centres = [float(i) for i in range(len(values))]
    ax.set_xticks(centres, [str(v) for v in values])
    return centres, centres, 0.6


def plot_decomposition_by(bias: pl.DataFrame, x: str) -> Figure:
    """The driving estimator's bias split by cause against the sweep axis ``x``, in panels
    by variant and θ (:func:`_panel_grid`): at each value the three causes' means over the
    runs as stacked bars, and the total bias's mean ± sd over the runs as a dot. A cohort
    size axis is numeric (log scale, bars at the sweep's values)."""
    decomposed = bias.filter(pl.col("driver") & (pl.col("mc_draws") > 0))
    axes = list(dict.fromkeys(c for c in (x, "variant", "theta") if c in bias.columns))
    runs = per_run_bias(decomposed, axes)
    cells = runs.group_by(axes).agg(*(pl.col(c).mean() for c in DECOMPOSITION),
                                    pl.col("bias").mean(),
                                    pl.col("bias").std().fill_null(0.0).alias("bias_sd"))
    fig, panels = _panel_grid(cells.sort(x).to_pandas(), x, 3.6, _sweep_order(bias))
    for ax, part in panels:
        rows = pl.from_pandas(part)
        centres, at, width = _bar_positions(ax, x, rows[x].to_list())
        _stacked_causes(ax, at, rows, _top_right(ax), width)
        ax.errorbar(centres, rows["bias"].to_list(), yerr=rows["bias_sd"].to_list(),
                    fmt="k.", ms=8, capsize=3, label="total bias")
        ax.axhline(0.0, color="black", lw=0.8)
        _label_outer(ax, AXIS_LABELS.get(x, x), "bias of η̂ (loss)")
        if _top_right(ax):
            _legend_beside(ax, f"cause, total\n({SEED_SPREAD})")
    estimator = ", ".join(decomposed["estimator"].unique(maintain_order=True).to_list())
    draws = decomposed["mc_draws"].to_numpy().max(initial=0)
    _fitted_title(fig, f"Bias of the driving estimator ({estimator}) by cause, {draws} random "
                       f"cohorts per term", averaged_rounds(decomposed))
    return fig


def _legend_beside(ax: Axes, title: str) -> None:
    """A sweep figure's legend, beside its top-right panel (not over the data)."""
    ax.legend(title=title, fontsize="small", title_fontsize="small", loc="upper left",
              bbox_to_anchor=(1.02, 1.0))


def _fitted_title(fig: Figure, *parts: str) -> None:
    """``fig``'s title: each of ``parts`` on its own lines, broken to fit the figure's width
    (at the medium font size), so that no part of it is cut off."""
    width = max(30, int(fig.get_figwidth() * 11))
    fig.suptitle("\n".join(textwrap.fill(part, width) for part in parts), fontsize="medium")


def plot_protocol_cost(bias: pl.DataFrame) -> Figure:
    """Bytes per device per round that each estimator's protocol costs (beyond the model)."""
    cost = bias.group_by("estimator").agg(pl.col("protocol_bytes").mean(),
                                          pl.col("secure_sums").mean()).sort("protocol_bytes")
    most = float(cost["protocol_bytes"].to_numpy().max(initial=0.0))
    divisor, unit = byte_unit(most)
    fig, ax = new_axes()
    ax.barh(cost["estimator"], cost["protocol_bytes"] / divisor, color="C0")
    for y, (b, s) in enumerate(zip(cost["protocol_bytes"], cost["secure_sums"], strict=True)):
        ax.annotate(f" {_cost_note(b, s)}", (b / divisor, y), va="center", fontsize="small")
    ax.set_xlim(0.0, (most / divisor or 1.0) * 1.4)  # room for the notes; never negative
    ax.set(xlabel=f"protocol bytes per device per round ({unit})",
           title="What the threshold costs")
    return fig


def _cost_note(protocol_bytes: float, secure_sums: float) -> str:
    """What a bar of :func:`plot_protocol_cost` leaves unsaid: its secure sums a round
    (an integer as one), or that it costs nothing."""
    if secure_sums:
        return f"{_count(secure_sums)} secure sum{'' if secure_sums == 1 else 's'} a round"
    return "no secure sum" if protocol_bytes else "nothing beyond the model"


def _count(value: float) -> str:
    """A mean count as an integer when it is one (12, not 12.0), else to one decimal."""
    return f"{value:.0f}" if float(value).is_integer() else f"{value:.1f}"


def plot_tail_vs_bytes_by_estimator(rounds: pl.DataFrame, ev: pl.DataFrame,
                                    bias: pl.DataFrame) -> Figure:
    """Test p90 error vs cumulative bytes, a line per driving estimator (and cohort size,
    where the sweep varies it), averaged over the runs (seeds) of each; in panels by θ, and
    by variant unless the variants are the drivers (:func:`_panel_grid`)."""
    frame, unit = _tail_lines(rounds, ev, bias)
    labels = sorted(frame["line"].unique())
    colour = dict(zip(labels, sns.color_palette(n_colors=len(labels)), strict=True))
    fig, panels = _panel_grid(frame, "traffic", 5.6, _sweep_order(rounds))
    for ax, part in panels:
        for label in labels:
            line = part[part["line"] == label]
            ax.errorbar(line["traffic"], line["p90"], xerr=line["traffic_sd"], yerr=line["p90_sd"],
                        marker="o", ms=4, capsize=2, color=colour[label], label=label)
        if _top_right(ax):
            ax.legend(fontsize="small")
        _label_outer(ax, f"cumulative communication, down + up ({unit})",
                     f"test error, {P90_LABEL}")
    # the frame fits the evaluations after traffic began: the untrained model's error at
    # zero bytes (near 1) would squash the differences between the lines
    sent = frame[frame["traffic"] > 0]
    low, high = (sent["p90"] - sent["p90_sd"]).min(), (sent["p90"] + sent["p90_sd"]).max()
    clipped = len(sent) > 0 and bool((frame["p90"] > high).any())
    if clipped:
        pad = 0.05 * (high - low) or 0.01
        panels[0][0].set_ylim(low - pad, high + pad)
    fig.suptitle("Communication vs tail error (mean ± sd over seeds)"
                 + ("\nthe untrained model's error, at zero bytes, is above the frame"
                    if clipped else ""))
    return fig


def _tail_lines(rounds: pl.DataFrame, ev: pl.DataFrame, bias: pl.DataFrame
                ) -> tuple[pd.DataFrame, str]:
    """The lines of :func:`plot_tail_vs_bytes_by_estimator`: per ``line`` (its label),
    panel (``variant``, ``theta``) and evaluation round, the mean and sd over seeds of the
    cumulative bytes (``traffic``, ``traffic_sd``, in the returned unit) and of the p90."""
    drivers = bias.filter(pl.col("driver")).group_by("run_id").agg(pl.col("estimator").first())
    lines = []
    for (run_id,), run_rounds in rounds.group_by(["run_id"]):
        test = tail_vs_bytes(ev.filter(pl.col("run_id") == run_id), run_rounds)
        lines.append(test.with_columns(pl.lit(run_id).alias("run_id")))
    table = pl.concat(lines).join(drivers, on="run_id", how="left").with_columns(
        pl.col("estimator").fill_null("none (no filter)"))
    # runs that differ in a sweep axis other than the seed are different lines or panels
    axes = [c for c in ("variant", "clients_per_round", "theta") if c in rounds.columns
            and rounds[c].n_unique() > 1]
    axis_of = rounds.group_by("run_id").agg(pl.col(a).first() for a in axes)
    by_driver = table["estimator"].n_unique() > 1  # then variants are drivers: lines
    in_line = [a for a in axes if a == "clients_per_round" or (a == "variant" and by_driver)]
    name = pl.col("variant") if "variant" in in_line else pl.col("estimator")
    table = table.join(axis_of, on="run_id", how="left").with_columns(
        pl.concat_str([name, *(pl.format(f", {a} {{}}", pl.col(a))
                               for a in in_line if a != "variant")]).alias("line"))
    divisor, unit = byte_unit(float(table["bytes_cum"].to_numpy().max(initial=0.0)))
    keys = [c for c in ("variant", "theta") if c in axes and c not in in_line]
    frame = table.group_by(*keys, "line", "round").agg(
        (pl.col("bytes_cum").mean() / divisor).alias("traffic"),
        (pl.col("bytes_cum").std() / divisor).fill_null(0.0).alias("traffic_sd"),
        pl.col("p90").mean(), pl.col("p90").std().fill_null(0.0).alias("p90_sd"),
    ).sort("round").to_pandas()
    return frame, unit


def _sweep_figures(out_dir: Path, bias: pl.DataFrame
                   ) -> tuple[dict[str, Callable[[], Figure]], dict[str, str]]:
    """(file name -> figure builder, file name -> why it is skipped) of a collected sweep
    with a non-empty ``bias``."""
    x = "clients_per_round" if "clients_per_round" in bias.columns else "variant"
    figures: dict[str, Callable[[], Figure]] = {"protocol_cost.png": partial(
        plot_protocol_cost, bias)}
    skipped: dict[str, str] = {}
    by_x = ("bias_vs_cohort.png", "conformity_vs_cohort.png", "online_bias_vs_cohort.png",
            "decomposition_vs_cohort.png")
    if x not in bias.columns:
        skipped |= dict.fromkeys(by_x, "the sweep has no clients_per_round axis and no variants")
    elif not bias_rows(bias).height:
        skipped |= dict.fromkeys(by_x, "bias.parquet has no round with the population "
                                       "quantile after the burn-in (estimator.bias_every)")
    else:
        figures["bias_vs_cohort.png"] = partial(
            plot_bias_by, bias, x, "bias", "bias of η̂: estimate − population quantile")
        figures["conformity_vs_cohort.png"] = partial(
            plot_bias_by, bias, x, "conformity_gap", "realized conformity − θ")
        if "mc_draws" in bias.columns and bias_rows(bias).filter(pl.col("mc_draws") > 0).height:
            figures["online_bias_vs_cohort.png"] = partial(
                plot_bias_by, bias, x, "online_bias",
                "bias on random cohorts of the online devices")
            figures["decomposition_vs_cohort.png"] = partial(plot_decomposition_by, bias, x)
        else:
            skipped |= dict.fromkeys(by_x[2:], "no round split the bias by cause "
                                               "(estimator.decomposition_draws = 0)")
    if not (out_dir / "eval.parquet").is_file():  # runs archived without it (--lean)
        skipped["p90_vs_bytes_by_estimator.png"] = "eval.parquet was not collected"
        return figures, skipped
    rounds, ev = (pl.read_parquet(out_dir / f"{t}.parquet") for t in ("rounds", "eval"))
    if rounds.height and ev.height:
        figures["p90_vs_bytes_by_estimator.png"] = partial(
            plot_tail_vs_bytes_by_estimator, rounds, ev, bias)
    else:
        skipped["p90_vs_bytes_by_estimator.png"] = "rounds.parquet or eval.parquet is empty"
    return figures, skipped


def plot_sweep(out_dir: Path, report: Callable[[str], None] | None = None) -> list[Path]:
    """The study's figures from a collected sweep directory (some of
    :data:`simfl.rundir.STUDY_FIGURES`, marked as collect's); returns the PNGs written.
    ``report`` (None: silent) is told which figures are skipped and why, one line per
    reason: ``simfl: collect DIR: skipped a.png, b.png: <reason>``."""
    out_dir = Path(out_dir)
    bias = pl.read_parquet(out_dir / "bias.parquet")
    if bias.height:
        figures, skipped = _sweep_figures(out_dir, bias)
    else:
        figures, skipped = {}, dict.fromkeys(STUDY_FIGURES, (
            "bias.parquet is empty (no run logged a threshold estimate: the study's "
            "figures need Δ-FL runs)"))
    if report is not None:
        for line in skip_lines(f"collect {out_dir}", STUDY_FIGURES, skipped):
            report(line)
    return [save_figure(make(), out_dir / PLOTS_DIR / name, COLLECT_MARK)
            for name, make in figures.items()]


def plot_run_bias(run_dir: Path, fmt: str = "png") -> list[Path]:
    """One run's threshold-estimate figure (and its bias by cause, where the run split
    it), as ``fmt`` files, when it logged estimates (merged, or in the parts of an
    unfinished run); redrawn like :func:`simfl.plots.runs.plot_run`'s."""
    bias = read_table(run_dir, "bias") if table_exists(run_dir, "bias") else pl.DataFrame()
    if bias.height == 0:
        return []
    out = Path(run_dir) / PLOTS_DIR
    written = [save_figure(plot_estimates_over_rounds(bias),
                           out / with_format("threshold_estimates.png", fmt))]
    if "mc_draws" in bias.columns and bias_rows(bias).filter(pl.col("mc_draws") > 0).height:
        written.append(save_figure(plot_bias_decomposition(bias),
                                   out / with_format("bias_decomposition.png", fmt)))
    return written


def pareto_front(runs: pl.DataFrame) -> list[str]:
    """The variants (columns variant, gb, p90: one row per run) whose mean final p90 and
    mean bytes no other variant beats in both (≤ in both, < in one)."""
    means = runs.group_by("variant").agg(pl.col("gb").mean(), pl.col("p90").mean())
    rows = means.iter_rows(named=True)
    points = [(r["variant"], r["gb"], r["p90"]) for r in rows]
    return [v for v, gb, p90 in points
            if not any(g <= gb and p <= p90 and (g < gb or p < p90) for _, g, p in points)]


def plot_final_tail_vs_bytes(runs: pl.DataFrame) -> Figure:
    """Final test p90 against the run's total bytes (columns variant, gb, p90: one row per
    run): every run a small dot, each variant's mean with ± 1 sd bars, the Pareto front of
    the means joined by a dashed line."""
    means = runs.group_by("variant").agg(
        pl.col("gb").mean(), pl.col("p90").mean(),
        gb_sd=pl.col("gb").std(), p90_sd=pl.col("p90").std()).sort("gb")
    fig, ax = new_axes((7.0, 4.5))
    for i, row in enumerate(means.iter_rows(named=True)):
        part = runs.filter(pl.col("variant") == row["variant"])
        color = f"C{i % 10}"
        ax.scatter(part["gb"], part["p90"], s=10, color=color, alpha=0.4)
        ax.errorbar(row["gb"], row["p90"], xerr=row["gb_sd"], yerr=row["p90_sd"], fmt="o",
                    color=color, capsize=3, label=f"{row['variant']} ({part.height})")
    front = means.filter(pl.col("variant").is_in(pareto_front(runs)))
    ax.plot(front["gb"], front["p90"], ls="--", color="0.4", lw=1, label="Pareto front")
    ax.set(xlabel="total communication, down + up (GB)", ylabel=f"final test error, {P90_LABEL}",
           title="Tail error against communication, per driver (mean ± 1 sd over seeds)")
    ax.legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.01, 1.0))
    return fig


def plot_dose_response(table: pl.DataFrame) -> Figure:
    """The dose-response (docs/dose_response.md): per outcome a panel of the paired
    difference from the undosed run against the offset in nats, one line per θ, with
    each point's 95 % t-interval and the ±0.5-point band of p90 (``table``:
    :func:`simfl.study.dose.paired_table`, level shift 0; errors in percentage points)."""
    outcomes = (("test_p90", "Δ test p90 (points)"), ("test_mean", "Δ test mean (points)"),
                ("kept_share", "Δ kept share (points)"))
    fig = Figure(figsize=(11.0, 3.6), layout="constrained")
    with sns.axes_style("whitegrid"):
        axes = fig.subplots(1, len(outcomes), sharex=True)
    rows = table.filter(pl.col("level_shift") == 0)
    for ax, (column, label) in zip(axes, outcomes, strict=True):
        for (theta,), part in rows.sort("offset_nats").group_by(["theta"], maintain_order=True):
            x = np.concatenate([[0.0], part["offset_nats"].to_numpy()])
            y = 100 * np.concatenate([[0.0], part[column].to_numpy()])
            low = 100 * np.concatenate([[0.0], part[f"{column}_low"].to_numpy()])
            high = 100 * np.concatenate([[0.0], part[f"{column}_high"].to_numpy()])
            order = np.argsort(x)
            ax.errorbar(x[order], y[order], yerr=[(y - low)[order], (high - y)[order]],
                        marker="o", capsize=3, label=f"θ = {theta:g}")
        ax.axhline(0.0, color="0.3", lw=0.8)
        if column == "test_p90":
            ax.axhspan(-0.5, 0.5, color="0.85", zorder=0, label="±0.5 points")
        ax.set_xlabel("threshold offset c (nats; 0: cohort_exact)")
        ax.set_ylabel(label)
    axes[0].legend(fontsize="small")
    fig.suptitle("Paired difference from the undosed run, mean and 95 % interval over seeds",
                 fontsize="medium")
    return fig

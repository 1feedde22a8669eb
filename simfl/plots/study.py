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

from pathlib import Path

import pandas as pd
import polars as pl
import seaborn as sns
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.ticker import NullFormatter

from simfl.plots import new_axes, save_figure
from simfl.plots.runs import P90_LABEL, byte_unit, tail_vs_bytes
from simfl.records import PLOTS_DIR, read_table, table_exists
from simfl.sweep import COLLECT_MARK

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
    """Each estimator's causes counted from what Δ-FL's objective prescribes.

    The papers' Algorithm 2 minimises the expected superquantile of a uniform minibatch
    of devices, so its threshold is the cohort's own quantile and its expectation over
    uniform cohorts, E_all of ``cohort_exact``, is the *prescribed* threshold: the gap
    E_all − Q_pop (the sampling term) is what the objective asks for, not an error of
    the server. bias.parquet books each estimator's sampling term with its own E_all,
    which for a reweighting estimator (IPW) applies its weights to uniform cohorts, where
    no reweighting is called for. Here, per run and round, every estimator gets
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


def plot_estimates_over_rounds(bias: pl.DataFrame) -> Figure:
    """One run: every estimator's η̂ per round and the population quantile where known."""
    fig, ax = new_axes((7.0, 4.5))
    missing = bias.filter(pl.col("estimate").is_null() | pl.col("estimate").is_nan())
    sns.lineplot(bias.to_pandas(), x="round", y="estimate", hue="estimator", ax=ax, lw=0.8)
    oracle = bias.filter(pl.col("oracle_quantile").is_not_null()).unique("round").sort("round")
    if oracle.height:
        ax.plot(oracle["round"], oracle["oracle_quantile"], "k.", ms=5,
                label="population quantile")
        ax.legend(fontsize="small")
    gaps = (f" ({missing['round'].n_unique()} rounds without a finite estimate, not drawn)"
            if missing.height else "")
    ax.set(xlabel="round", ylabel="threshold η̂ (loss)",
           title=f"Threshold estimates, θ = {bias['theta'][0]:g}{gaps}")
    return fig


DECOMPOSITION = ("sampling_bias", "availability_bias", "selection_bias")


def _stacked_causes(ax: Axes, x: list[int], rows: pl.DataFrame, legend: bool) -> None:
    """The three causes of ``rows`` (one row per position in ``x``) as stacked bars, the
    positive and the negative parts stacked apart so neither hides the other."""
    for sign in (1.0, -1.0):
        bottom = [0.0] * len(x)
        for i, column in enumerate(DECOMPOSITION):
            part = [max(sign * v, 0.0) * sign for v in rows[column].to_list()]
            ax.bar(x, part, bottom=bottom, color=f"C{i}", width=0.6,
                   label=column.removesuffix("_bias") if sign > 0 and legend else None)
            bottom = [b + p for b, p in zip(bottom, part, strict=True)]


def plot_bias_decomposition(bias: pl.DataFrame) -> Figure:
    """One run: each estimator's mean bias after the burn-in split into its sampling,
    availability and selection terms (stacked bars; the dot is the total bias)."""
    rows = bias_rows(bias).filter(pl.col("mc_draws") > 0).group_by("estimator").agg(
        *(pl.col(c).mean() for c in (*DECOMPOSITION, "bias"))).sort("estimator")
    fig, ax = new_axes((7.0, 4.5))
    names = rows["estimator"].to_list()
    x = list(range(len(names)))
    _stacked_causes(ax, x, rows, legend=True)
    ax.plot(x, rows["bias"].to_list(), "k.", ms=9, label="total bias")
    ax.axhline(0.0, color="black", lw=0.8)
    ax.set_xticks(x, names, rotation=20)
    ax.legend(fontsize="small")
    draws = bias["mc_draws"].to_numpy().max(initial=0)
    ax.set(ylabel="bias of η̂ (loss)",
           title=f"Threshold bias by cause, θ = {bias['theta'][0]:g} "
                 f"({draws} random cohorts per term)")
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
        sns.move_legend(ax, "upper left", bbox_to_anchor=(1.02, 1.0))


def plot_bias_by(bias: pl.DataFrame, x: str, column: str, ylabel: str) -> Figure:
    """Mean (± sd over runs) of ``column`` vs the sweep axis ``x``, a line per estimator,
    in panels by variant and θ (:func:`_panel_grid`)."""
    axes = list(dict.fromkeys(c for c in (x, "variant", "theta") if c in bias.columns))
    runs = per_run_bias(bias, axes).to_pandas()
    fig, panels = _panel_grid(runs, x, 4.2, _sweep_order(bias))
    estimators = sorted(runs["estimator"].unique())  # hue_order: one colour in every panel
    for ax, part in panels:
        sns.lineplot(part, x=x, y=column, hue="estimator", hue_order=estimators, marker="o",
                     errorbar="sd", ax=ax, legend=_top_right(ax))
        _label_outer(ax, x, ylabel)
        ax.axhline(0.0, color="k", lw=0.6)
        if x == "clients_per_round":
            ax.set_xscale("log")
            ticks = sorted(part[x].unique())  # the sweep's values, not 5x10^0 ... 9x10^0
            ax.set_xticks(ticks, [str(t) for t in ticks])
            ax.xaxis.set_minor_formatter(NullFormatter())
    return fig


def plot_decomposition_by(bias: pl.DataFrame, x: str) -> Figure:
    """The driving estimator's bias split by cause against the sweep axis ``x``, in panels
    by variant and θ (:func:`_panel_grid`): at each value the three causes' means over the
    runs as stacked bars, and the total bias's mean ± sd over the runs as a dot."""
    decomposed = bias.filter(pl.col("driver") & (pl.col("mc_draws") > 0))
    axes = list(dict.fromkeys(c for c in (x, "variant", "theta") if c in bias.columns))
    runs = per_run_bias(decomposed, axes)
    cells = runs.group_by(axes).agg(*(pl.col(c).mean() for c in DECOMPOSITION),
                                    pl.col("bias").mean(),
                                    pl.col("bias").std().fill_null(0.0).alias("bias_sd"))
    fig, panels = _panel_grid(cells.sort(x).to_pandas(), x, 3.6, _sweep_order(bias))
    for ax, part in panels:
        rows = pl.from_pandas(part)
        positions = list(range(rows.height))
        _stacked_causes(ax, positions, rows, legend=_top_right(ax))
        ax.errorbar(positions, rows["bias"].to_list(), yerr=rows["bias_sd"].to_list(),
                    fmt="k.", ms=8, capsize=3, label="total bias (± sd)" if _top_right(ax)
                    else None)
        ax.axhline(0.0, color="black", lw=0.8)
        ax.set_xticks(positions, [str(v) for v in rows[x].to_list()])
        if _top_right(ax):
            ax.legend(fontsize="small")
        _label_outer(ax, x, "bias of η̂ (loss)")
    estimator = ", ".join(decomposed["estimator"].unique(maintain_order=True).to_list())
    fig.suptitle(f"Bias of the driving estimator ({estimator}) by cause "
                 f"({decomposed['mc_draws'].to_numpy().max(initial=0)} random cohorts per term)")
    return fig


def plot_protocol_cost(bias: pl.DataFrame) -> Figure:
    """Bytes per device per round that each estimator's protocol costs (beyond the model)."""
    cost = bias.group_by("estimator").agg(pl.col("protocol_bytes").mean(),
                                          pl.col("secure_sums").mean()).sort("protocol_bytes")
    divisor, unit = byte_unit(float(cost["protocol_bytes"].to_numpy().max(initial=0.0)))
    fig, ax = new_axes()
    ax.barh(cost["estimator"], cost["protocol_bytes"] / divisor, color="C0")
    for y, (b, s) in enumerate(zip(cost["protocol_bytes"], cost["secure_sums"], strict=True)):
        ax.annotate(f" {s:.1f} secure sums", (b / divisor, y), va="center", fontsize="small")
    ax.set(xlabel=f"protocol bytes per device per round ({unit})",
           title="What the threshold costs")
    return fig


def plot_tail_vs_bytes_by_estimator(rounds: pl.DataFrame, ev: pl.DataFrame,
                                    bias: pl.DataFrame) -> Figure:
    """Test p90 error vs cumulative bytes, a line per driving estimator (and cohort size,
    where the sweep varies it), averaged over the runs (seeds) of each; in panels by θ, and
    by variant unless the variants are the drivers (:func:`_panel_grid`)."""
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
    # the seeds of a line at each evaluation round: mean and sd of bytes and p90
    frame = table.group_by(*keys, "line", "round").agg(
        (pl.col("bytes_cum").mean() / divisor).alias("traffic"),
        (pl.col("bytes_cum").std() / divisor).fill_null(0.0).alias("traffic_sd"),
        pl.col("p90").mean(), pl.col("p90").std().fill_null(0.0).alias("p90_sd"),
    ).sort("round").to_pandas()
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


def plot_sweep(out_dir: Path) -> list[Path]:
    """The study's figures from a collected sweep directory (some of
    :data:`simfl.sweep.SWEEP_FIGURES`, marked as collect's); returns the PNGs written."""
    out_dir = Path(out_dir)
    bias = pl.read_parquet(out_dir / "bias.parquet")
    if bias.height == 0:
        return []
    x = "clients_per_round" if "clients_per_round" in bias.columns else "variant"
    figures = {
        "protocol_cost.png": lambda: plot_protocol_cost(bias),
    }
    if bias_rows(bias).height and x in bias.columns:
        figures["bias_vs_cohort.png"] = lambda: plot_bias_by(
            bias, x, "bias", "bias of η̂: estimate − population quantile")
        figures["conformity_vs_cohort.png"] = lambda: plot_bias_by(
            bias, x, "conformity_gap", "realized conformity − θ")
        if "mc_draws" in bias.columns and bias_rows(bias).filter(pl.col("mc_draws") > 0).height:
            figures["online_bias_vs_cohort.png"] = lambda: plot_bias_by(
                bias, x, "online_bias", "bias on random cohorts of the online devices")
            figures["decomposition_vs_cohort.png"] = lambda: plot_decomposition_by(bias, x)
    rounds, ev = (pl.read_parquet(out_dir / f"{t}.parquet") for t in ("rounds", "eval"))
    if rounds.height and ev.height:
        figures["p90_vs_bytes_by_estimator.png"] = lambda: plot_tail_vs_bytes_by_estimator(
            rounds, ev, bias)
    return [save_figure(make(), out_dir / PLOTS_DIR / name, COLLECT_MARK)
            for name, make in figures.items()]


def plot_run_bias(run_dir: Path) -> list[Path]:
    """One run's threshold-estimate figure, when it logged estimates (merged, or in the
    parts of an unfinished run)."""
    bias = read_table(run_dir, "bias") if table_exists(run_dir, "bias") else pl.DataFrame()
    if bias.height == 0:
        return []
    out = Path(run_dir) / PLOTS_DIR
    written = [save_figure(plot_estimates_over_rounds(bias), out / "threshold_estimates.png")]
    if "mc_draws" in bias.columns and bias_rows(bias).filter(pl.col("mc_draws") > 0).height:
        written.append(save_figure(plot_bias_decomposition(bias), out / "bias_decomposition.png"))
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

"""Figures of the DRFL study from its Parquet tables (no pyplot global state): the paper's
Figure 3 / Figure 4 panels (Bai, Wong, Qiao, Ho, §6: test accuracy against the swept noise
quantity, one line per method) and Algorithm 1's convergence on the device population."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import polars as pl
import seaborn as sns
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from simfl.plots import save_figure

SWEEPS = ("mean", "sd", "mean_ratio")  # the paper's left, middle and right panels
METHOD_ORDER = ["drfl", "erm", "afl", "drfa", "wafl"]
METHOD_LABELS = {"drfl": "DRFL", "erm": "ERM (standard SVM)", "afl": "AFL", "drfa": "DRFA",
                 "wafl": "WAFL"}


def _sweep_label(table: pl.DataFrame, sweep: str) -> tuple[str, str]:
    """(x-axis label, panel title) of a sweep, from its noise columns."""
    mean, sd = table["noise_mean"].to_numpy(), table["noise_sd"].to_numpy()
    if sweep == "mean":
        return "noise mean", f"increasing mean, SD = {sd.max():g}"
    if sweep == "sd":
        return "noise SD", f"increasing SD, mean = {mean.max():g}"
    ratio = float(np.max(mean / np.where(sd > 0, sd, np.inf)))
    return "noise SD", f"mean = {ratio:g} · SD"


def plot_sweep(ax: Axes, accuracy_df: pl.DataFrame, sweep: str) -> None:
    """One panel: test accuracy vs the swept quantity per method; bars: ± one SD over seeds."""
    table = accuracy_df.filter(pl.col("sweep") == sweep)
    stats = (table.group_by("method", "level")
             .agg(pl.col("accuracy").mean().alias("mean"), pl.col("accuracy").std().alias("std"))
             .sort("method", "level"))
    palette = sns.color_palette("colorblind", len(METHOD_ORDER))
    for i, method in enumerate(METHOD_ORDER):
        rows = stats.filter(pl.col("method") == method)
        if rows.height == 0:
            continue
        ax.errorbar(rows["level"].to_numpy() + 0.006 * (i - 2), rows["mean"].to_numpy(),
                    yerr=np.nan_to_num(rows["std"].to_numpy()), label=METHOD_LABELS[method],
                    color=palette[i], marker="o", markersize=3, capsize=2,
                    linewidth=2.2 if method == "drfl" else 1.2)
    xlabel, title = _sweep_label(table, sweep)
    ax.set_xlabel(xlabel)
    ax.set_title(title, fontsize=10)


def plot_noise_figure(accuracy_df: pl.DataFrame, title: str) -> Figure:
    """The paper's three panels side by side (its Figures 3 and 4)."""
    fig = Figure(figsize=(13, 4), layout="constrained")
    with sns.axes_style("whitegrid"):
        axes = fig.subplots(1, len(SWEEPS), sharey=True)
    for ax, sweep in zip(axes, SWEEPS, strict=True):
        plot_sweep(ax, accuracy_df, sweep)
    axes[0].set_ylabel("test accuracy")
    axes[0].legend(fontsize=8)
    num_seeds = accuracy_df["seed"].n_unique()
    fig.suptitle(f"{title} ({num_seeds} seeds, mean ± SD)")
    return fig


def plot_convergence(iterations_df: pl.DataFrame) -> Figure:
    """DRFL's relative objective gap vs simulated time and vs cumulative bytes, per seed."""
    fig = Figure(figsize=(10, 3.8), layout="constrained")
    with sns.axes_style("whitegrid"):
        ax_t, ax_b = fig.subplots(1, 2)
    for seed, rows in iterations_df.sort("iteration").group_by("seed", maintain_order=True):
        gap = np.maximum(rows["relative_gap"].to_numpy(), 1e-9)
        total = np.cumsum(rows["bytes_down"].to_numpy() + rows["bytes_up"].to_numpy())
        ax_t.plot(rows["t_end_s"].to_numpy() / 3600.0, gap, label=f"seed {seed[0]}")
        ax_b.plot(total / 1e3, gap)
    for ax, xlabel in ((ax_t, "simulated time (h)"), (ax_b, "cumulative bytes (kB)")):
        ax.set_yscale("log")
        ax.set_xlabel(xlabel)
        ax.set_ylabel("relative gap to problem (4)'s optimum")
    ax_t.legend(fontsize=7)
    fig.suptitle("DRFL, the paper's Algorithm 1, on the device population")
    return fig


def write_figures(tables: dict[str, pl.DataFrame], out_dir: Path, prefix: str = "drfl_",
                  title: str = "Breast cancer, noisy test features") -> list[Path]:
    """The three-panel noise figure and the convergence figure as PNG files."""
    noise = plot_noise_figure(tables["accuracy"], title)
    convergence = plot_convergence(tables["iterations"])
    return [save_figure(noise, out_dir / f"{prefix}noise.png"),
            save_figure(convergence, out_dir / f"{prefix}convergence.png")]

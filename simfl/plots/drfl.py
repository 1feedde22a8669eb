"""Figures of the DRFL study from its Parquet tables (no pyplot global state)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import polars as pl
import seaborn as sns
from matplotlib.figure import Figure

from simfl.plots import save_figure

SWEEP_LABELS = {
    "mean": "noise mean (SD = {sd:g})",
    "sd": "noise SD (mean 0)",
    "mean_2sd": "noise SD (mean = 2·SD)",
}
METHOD_ORDER = ["drfl", "erm", "afl", "drfa", "wafl"]


def plot_sweep(accuracy_df: pl.DataFrame, sweep: str) -> Figure:
    """Test accuracy vs noise level, one line per method; bars: ± one SD over seeds."""
    table = accuracy_df.filter(pl.col("sweep") == sweep)
    stats = (table.group_by("method", "level")
             .agg(pl.col("accuracy").mean().alias("mean"), pl.col("accuracy").std().alias("std"))
             .sort("method", "level"))
    fig = Figure(figsize=(6.4, 4.2), layout="constrained")
    with sns.axes_style("whitegrid"):
        ax = fig.add_subplot()
    palette = sns.color_palette("colorblind", len(METHOD_ORDER))
    for i, method in enumerate(METHOD_ORDER):
        rows = stats.filter(pl.col("method") == method)
        if rows.height == 0:
            continue
        ax.errorbar(rows["level"].to_numpy(), rows["mean"].to_numpy(),
                    yerr=np.nan_to_num(rows["std"].to_numpy()), label=method.upper(),
                    color=palette[i], marker="o", markersize=3, capsize=2,
                    linewidth=2.2 if method == "drfl" else 1.2)
    sd = float(table["noise_sd"].to_numpy().max()) if sweep == "mean" else 0.0
    ax.set_xlabel(SWEEP_LABELS[sweep].format(sd=sd))
    ax.set_ylabel("test accuracy")
    num_seeds = table["seed"].n_unique()
    ax.set_title(f"Breast cancer, noisy test features ({num_seeds} seeds)")
    ax.legend()
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
    fig.suptitle("DRFL ADMM on the device population")
    return fig


def write_figures(tables: dict[str, pl.DataFrame], out_dir: Path, prefix: str = "drfl_"
                  ) -> list[Path]:
    """The three sweep figures and the convergence figure as PNG files."""
    paths = []
    for sweep in SWEEP_LABELS:
        path = out_dir / f"{prefix}sweep_{sweep}.png"
        save_figure(plot_sweep(tables["accuracy"], sweep), path)
        paths.append(path)
    path = out_dir / f"{prefix}convergence.png"
    save_figure(plot_convergence(tables["iterations"]), path)
    paths.append(path)
    return paths

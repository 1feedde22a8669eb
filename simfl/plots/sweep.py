"""Any collected sweep's figures (``collect``: :data:`simfl.rundir.GRID_FIGURES`), whatever
its rule, grid and variants: the unseen test devices' 90th-percentile error per grid point.

A *grid point* is a run's sweep axes but the seed (the collected tables' extra columns,
:func:`simfl.runs.sweep.gathered`: ``variant`` and each grid key's last part); its runs
are its seeds. Per grid point, at each evaluation round, the p90 is averaged over the
seeds, with the 95 % t-interval of that mean as a band (mean ± t_{0.975, n−1} · s / √n,
s the sample standard deviation of the n seeds' values; no band for one seed): against
the round (``p90_vs_round``) and against the cumulative bytes down + up
(``p90_vs_bytes``, the bytes averaged over the seeds too). ``final_p90`` gives each run's
last evaluation, its seeds as dots and their mean with the same t-interval, across the
grid points. The seeds of a grid point are independent draws of the whole run (a seed
fixes the data split, the population and the initial model), so the t-interval is the
textbook one for a mean of n independent values (e.g. Wasserman, *All of Statistics*,
§10.1); runs of different grid points are not paired here.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import seaborn as sns
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from scipy import stats

from simfl.errors import InputError
from simfl.plots import honest_ylim, save_figure
from simfl.plots.runs import P90_LABEL, byte_unit, skip_lines
from simfl.records import SCHEMAS
from simfl.rundir import COLLECT_MARK, GRID_FIGURES
from simfl.tables import error_by_round, tail_vs_bytes

SEED_BAND = "mean over seeds, 95 % t-interval"
MAX_COLUMNS = 3  # panels per row of a figure in panels


def t_interval(values: np.ndarray) -> tuple[float, float]:
    """The 95 % t-interval of the mean of ``values`` (n − 1 degrees of freedom); the mean
    twice for one value, which has no spread to measure."""
    values = np.asarray(values, dtype=np.float64)
    mean = float(values.mean())
    if values.size < 2:
        return mean, mean
    half = float(stats.t.ppf(0.975, values.size - 1) * values.std(ddof=1)
                 / math.sqrt(values.size))
    return mean - half, mean + half


def error_interval(values: np.ndarray) -> tuple[float, float]:
    """:func:`t_interval` cut to [0, 1], the range an error rate can take: near 0 or 1
    the symmetric interval of a few seeds reaches past it."""
    low, high = t_interval(values)
    return max(low, 0.0), min(high, 1.0)


def grid_axes(table: pl.DataFrame) -> list[str]:
    """The sweep axes of a collected table, seed aside, in the sweep file's order: the
    columns collect added (not of the table's schema, not ``run_id``) that hold one value
    per run."""
    own = set(SCHEMAS["eval"].names) | {"run_id", "seed"}
    extra = [c for c in table.columns if c not in own]
    if not extra:
        return []
    per_run = table.group_by("run_id").agg(pl.col(c).n_unique() for c in extra)
    return [c for c in extra if per_run[c].max() == 1]


def point_label(row: dict[str, object], axes: list[str]) -> str:
    """A grid point's name: ``variant`` by its value, other axes as ``key = value``."""
    parts = [str(row[a]) if a == "variant" else f"{a} = {row[a]}" for a in axes]
    return ", ".join(parts) or "all runs"


def run_curves(ev: pl.DataFrame, rounds: pl.DataFrame | None, axes: list[str]
               ) -> pl.DataFrame:
    """Per run and test evaluation: ``run_id``, the sweep ``axes``, ``point`` (its grid
    point, :func:`point_label`), ``line`` (the point without the first axis where there
    are two or more: the panels' lines), ``round``, ``p90`` and ``bytes_cum`` (null
    without a rounds table, or for a round it lacks)."""
    frames = []
    for (run_id,), run_ev in ev.group_by(["run_id"], maintain_order=True):
        if rounds is not None:
            curve = tail_vs_bytes(run_ev, rounds.filter(pl.col("run_id") == run_id))
        else:
            curve = error_by_round(run_ev).filter(pl.col("split") == "test") \
                .with_columns(pl.lit(None, pl.Int64).alias("bytes_cum"))
        first = run_ev.row(0, named=True)
        frames.append(curve.select("round", "p90", "bytes_cum").with_columns(
            pl.lit(run_id).alias("run_id"), pl.lit(point_label(first, axes)).alias("point"),
            pl.lit(point_label(first, axes[1:] if len(axes) > 1 else axes)).alias("line"),
            *(pl.lit(first[a]).alias(a) for a in axes)))
    return pl.concat(frames, how="diagonal_relaxed")


def seed_means(curves: pl.DataFrame, x: str) -> pl.DataFrame:
    """Per grid point and round: the seeds' mean p90 (``p90``), its 95 % t-interval
    (``low``, ``high``: :func:`error_interval`), the mean of ``x`` and the number of
    seeds ``n``; in the grid points' first-seen order, then by round."""
    order = {p: i for i, p in enumerate(curves["point"].unique(maintain_order=True))}
    rows = []
    for (point, round_idx), part in curves.group_by(["point", "round"]):
        low, high = error_interval(part["p90"].to_numpy())
        rows.append({"point": point, "round": round_idx, x: part[x].mean(),
                     "p90": part["p90"].mean(), "low": low, "high": high, "n": part.height})
    return pl.DataFrame(rows).sort(pl.col("point").replace_strict(order), "round")


def final_errors(curves: pl.DataFrame) -> pl.DataFrame:
    """Each run's last test evaluation (a row of :func:`run_curves`)."""
    return curves.filter(pl.col("round") == pl.col("round").max().over("run_id"))


def _panels(curves: pl.DataFrame, axes: list[str]
            ) -> tuple[Figure, list[tuple[Axes, pl.DataFrame]]]:
    """A curves figure's panels, each with its rows of ``curves``: one per value of the
    first axis when the sweep has two or more (titled with it), else one of every run;
    :data:`MAX_COLUMNS` a row, sharing both axes."""
    if len(axes) < 2:
        fig = Figure(figsize=(8.6, 4.6), layout="constrained")
        with sns.axes_style("whitegrid"):
            return fig, [(fig.add_subplot(), curves)]
    first = axes[0]
    values = curves[first].unique(maintain_order=True).to_list()
    cols = min(len(values), MAX_COLUMNS)
    rows = math.ceil(len(values) / cols)
    fig = Figure(figsize=(4.4 * cols + 2.6, 3.6 * rows + 0.6), layout="constrained")
    panels: list[tuple[Axes, pl.DataFrame]] = []
    for i, value in enumerate(values):
        with sns.axes_style("whitegrid"):
            ax = fig.add_subplot(rows, cols, i + 1, sharex=panels[0][0] if panels else None,
                                 sharey=panels[0][0] if panels else None)
        ax.set_title(point_label({first: value}, [first]))
        panels.append((ax, curves.filter(pl.col(first) == value)))
    return fig, panels


def plot_curves(curves: pl.DataFrame, axes: list[str], x: str) -> Figure:
    """Mean test p90 over seeds against ``x`` (``round`` or ``bytes_cum``) per grid point
    (``curves``: :func:`run_curves` of the sweep ``axes``), with its 95 % t-interval as a
    band (:data:`SEED_BAND`, cut to [0, 1]); in panels by the first axis when the sweep
    has two or more (:func:`_panels`), a line colour per ``line`` the same in every
    panel."""
    known = curves.filter(pl.col(x).is_not_null())
    most = float(known[x].to_numpy().max(initial=0.0))
    divisor, unit = byte_unit(most) if x == "bytes_cum" else (1.0, "")
    lines = known["line"].unique(maintain_order=True).to_list()
    colours = dict(zip(lines, sns.color_palette(n_colors=len(lines)), strict=True))
    fig, panels = _panels(known, axes)
    for i, (ax, part) in enumerate(panels):
        means = seed_means(part, x)
        for (point,), line in means.group_by(["point"], maintain_order=True):
            name = part.filter(pl.col("point") == point)["line"][0]
            xs = line[x].to_numpy() / divisor
            ax.plot(xs, line["p90"].to_numpy(), marker=".", ms=4, color=colours[name],
                    label=name)
            if line["n"].max() != 1:  # one seed: no spread, no band
                ax.fill_between(xs, line["low"].to_numpy(), line["high"].to_numpy(),
                                color=colours[name], alpha=0.2, lw=0)
        spec = ax.get_subplotspec()
        assert spec is not None
        below = i + spec.get_gridspec().ncols < len(panels)  # a panel under this one
        ax.set(xlabel="" if below else "evaluation round (rounds completed)" if x == "round"
               else f"cumulative communication, down + up ({unit})",
               ylabel=f"test error, {P90_LABEL}" if spec.is_first_col() else "")
    handles, labels = _legend_entries([ax for ax, _ in panels])
    title = ", ".join(axes[1:]) if len(axes) > 1 else "grid point"
    fig.legend(handles, labels, title=f"{title}\n({SEED_BAND})", fontsize="small",
               title_fontsize="small", loc="outside right center")
    honest_ylim([ax for ax, _ in panels])
    fig.suptitle(f"Unseen test devices' {P90_LABEL} error "
                 f"{'by round' if x == 'round' else 'against communication'} "
                 f"({_seeds(curves)} a grid point)", fontsize="medium")
    return fig


def _seeds(curves: pl.DataFrame) -> str:
    """How many seeds a grid point has: "3 seeds", or "2-3 seeds" where they differ."""
    counts = curves.group_by("point").agg(pl.col("run_id").n_unique())["run_id"].to_list()
    low, high = min(counts), max(counts)
    return f"{low}{'' if low == high else f'-{high}'} seed{'s' * (high > 1)}"


def _legend_entries(axes: list[Axes]) -> tuple[list[Any], list[str]]:
    """Each line's handle and label once, over every panel, in the order first drawn."""
    found: dict[str, Any] = {}
    for ax in axes:
        for handle, label in zip(*ax.get_legend_handles_labels(), strict=True):
            found.setdefault(label, handle)
    return list(found.values()), list(found)


def plot_final(final: pl.DataFrame, axes: list[str]) -> Figure:
    """Each run's final test p90 per grid point (``final``: :func:`final_errors`), a dot a
    seed, and the seeds' mean with its 95 % t-interval (seaborn's pointplot with
    :func:`error_interval`): along the sweep's last axis, a colour per combination of the
    others (one position of every run where the sweep has no axis but the seed)."""
    x, others = (axes[-1], axes[:-1]) if axes else ("point", [])
    frame = final.to_pandas()
    frame["at"] = frame[x].astype(str)
    frame["colour"] = [point_label(row, others) for row in frame[others].to_dict("records")] \
        if others else "every run"
    order, hues = list(dict.fromkeys(frame["at"])), list(dict.fromkeys(frame["colour"]))
    fig = Figure(figsize=(max(5.5, 0.8 * len(order) * len(hues)) + 2.6, 4.6),
                 layout="constrained")
    with sns.axes_style("whitegrid"):
        ax = fig.add_subplot()
    dodge = 0.4 if len(hues) > 1 else False
    sns.stripplot(frame, x="at", y="p90", hue="colour", order=order, hue_order=hues,
                  dodge=len(hues) > 1, alpha=0.45, size=4, ax=ax, legend=False)
    sns.pointplot(frame, x="at", y="p90", hue="colour", order=order, hue_order=hues,
                  errorbar=error_interval, dodge=dodge, linestyle="none", capsize=0.12,
                  marker="D", markersize=6, ax=ax, legend=bool(others))
    if others:
        sns.move_legend(ax, "upper left", bbox_to_anchor=(1.01, 1.0), fontsize="small",
                        title=", ".join(others), title_fontsize="small")
    honest_ylim([ax])
    rounds = sorted(set(final["round"].to_list()))
    ax.set(xlabel=x if axes else "", ylabel=f"final test error, {P90_LABEL}")
    ax.set_title(f"Final test {P90_LABEL}, round {'-'.join(map(str, rounds))}: a dot a run "
                 f"({_seeds(final)} a grid point),\n{SEED_BAND}", fontsize="medium")
    return fig


def sweep_figures(sweep_dir: str | Path, out_dir: str | Path,
                  report: Callable[[str], None] | None = None) -> list[Path]:
    """Any collected sweep's figures (:data:`simfl.rundir.GRID_FIGURES`) from its
    ``eval.parquet`` (and ``rounds.parquet`` for the bytes) in ``sweep_dir``, written into
    ``out_dir`` marked as collect's (:data:`simfl.rundir.COLLECT_MARK`); returns the PNGs
    written. ``report`` (None: silent) is told which figures are skipped and why, one line
    per reason: ``simfl: collect DIR: skipped a.png: <reason>``."""
    sweep_dir, out_dir = Path(sweep_dir), Path(out_dir)
    ev, rounds = (_collected(sweep_dir / f"{name}.parquet") for name in ("eval", "rounds"))
    skipped: dict[str, str] = {}
    if ev is None:  # runs archived without it (bench/archive_runs.py --lean)
        skipped = dict.fromkeys(GRID_FIGURES, "eval.parquet was not collected")
    elif not ev.filter(pl.col("split") == "test").height:
        skipped = dict.fromkeys(GRID_FIGURES, "eval.parquet has no test-device rows")
    written = []
    if not skipped and ev is not None:
        axes = grid_axes(ev)
        curves = run_curves(ev.filter(pl.col("split") == "test"), rounds, axes)
        figures = {"p90_vs_round.png": lambda: plot_curves(curves, axes, "round"),
                   "final_p90.png": lambda: plot_final(final_errors(curves), axes)}
        if curves["bytes_cum"].is_not_null().any():
            figures["p90_vs_bytes.png"] = lambda: plot_curves(curves, axes, "bytes_cum")
        else:
            skipped["p90_vs_bytes.png"] = "rounds.parquet was not collected or is empty"
        written = [save_figure(figures[name](), out_dir / name, COLLECT_MARK)
                   for name in GRID_FIGURES if name in figures]
    if report is not None:
        for line in skip_lines(f"collect {sweep_dir}", GRID_FIGURES, skipped):
            report(line)
    return written



def _collected(path: Path) -> pl.DataFrame | None:
    """A table collect wrote (with its ``run_id`` column), or None where it is absent or
    empty; InputError for a table that is not a collected one."""
    if not path.is_file():
        return None
    table = pl.read_parquet(path)
    if "run_id" not in table.columns:
        raise InputError(f"{path}: not a collected sweep table (no run_id column: python -m "
                         "simfl collect writes it)")
    return table if table.height else None

"""One run's figures from its Parquet tables and manifest.json (docs/design.md §8):
``plot_run`` writes them as PNG (or PDF, SVG) files, ``compare_runs`` overlays several runs."""

from __future__ import annotations

import sys
from collections.abc import Callable
from functools import partial
from pathlib import Path

import numpy as np
import polars as pl
import seaborn as sns
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from simfl.errors import InputError
from simfl.metrics import TAIL_LEVEL, error_summary
from simfl.plots import honest_ylim, new_axes, save_figure
from simfl.plugins import registered_filters_by_threshold
from simfl.records import read_table, table_exists
from simfl.rundir import FIGURE_FORMATS, PLOTS_DIR, manifest_or_empty
from simfl.tables import error_by_round, tail_vs_bytes

SECONDS_PER_HOUR = 3600.0
P90_LABEL = f"{TAIL_LEVEL * 100:.0f}th percentile"
SPLIT_NAMES = {"test": "test", "train": "training-device"}  # eval.parquet's splits


# --- data preparation ---------------------------------------------------------


def time_to_level(eval_df: pl.DataFrame, rounds_df: pl.DataFrame,
                  level: float) -> dict[str, float] | None:
    """The first evaluation whose test p90 error is <= ``level``: its simulated time (s),
    round (server update) and cumulative bytes down + up; None if no evaluation reaches it."""
    return first_at_level(tail_vs_bytes(eval_df, rounds_df), level)


def first_at_level(table: pl.DataFrame, level: float) -> dict[str, float] | None:
    """:func:`time_to_level` of a :func:`simfl.tables.tail_vs_bytes` table."""
    reached = table.filter(pl.col("p90") <= level).sort("round")
    if not reached.height:
        return None
    row = reached.row(0, named=True)
    return {"t_s": row["t_s"], "round": row["round"], "bytes_cum": row["bytes_cum"]}


def reach_level(run_dir: Path, level: float) -> dict[str, float] | None:
    """:func:`time_to_level` of a run directory."""
    ev, rounds = _read_table(run_dir, "eval"), _read_table(run_dir, "rounds")
    if ev is None or rounds is None:
        raise InputError(f"{run_dir}: needs non-empty eval.parquet and rounds.parquet")
    return time_to_level(ev, rounds, level)


def staleness_counts(clients_df: pl.DataFrame) -> pl.DataFrame:
    """Tasks per (staleness, status) among the arrivals the server took in (aggregated,
    filtered, stale). Returns columns staleness, status, count, sorted."""
    arrived = clients_df.filter(pl.col("status").is_in(["aggregated", "filtered", "stale"]))
    return (arrived.group_by("staleness", "status").agg(pl.len().cast(pl.Int64).alias("count"))
            .sort("staleness", "status"))


def last_round_rows(eval_df: pl.DataFrame) -> pl.DataFrame:
    """All eval rows at the last round at which test devices were evaluated."""
    test = eval_df.filter(pl.col("split") == "test")
    last = (test if test.height else eval_df)["round"].max()
    return eval_df.filter(pl.col("round") == last)


def run_label(run_dir: Path) -> str:
    """Legend label: the manifest's aggregator (with theta where it applies), else the folder."""
    manifest = manifest_or_empty(run_dir)
    try:
        agg = manifest.get("aggregator") or manifest["scenario"]["aggregator"]
        name = str(agg["name"])
    except (KeyError, TypeError):
        return run_dir.name
    theta = agg.get("theta")
    filters = registered_filters_by_threshold(name)  # θ where the rule filters by it
    return f"{name} θ={theta:g}" if filters and theta is not None else name


def byte_unit(max_bytes: float) -> tuple[float, str]:
    """(divisor, unit) in decimal units so that max_bytes reads as a small number."""
    for divisor, unit in ((1e12, "TB"), (1e9, "GB"), (1e6, "MB"), (1e3, "kB")):
        if max_bytes >= divisor:
            return divisor, unit
    return 1.0, "B"


def _max_bytes(table: pl.DataFrame) -> float:
    known = table["bytes_cum"].drop_nulls().to_numpy()
    return float(known.max()) if known.size else 0.0


def _duration_unit(max_s: float) -> tuple[float, str]:
    if max_s >= 10 * SECONDS_PER_HOUR:
        return SECONDS_PER_HOUR, "h"
    return (60.0, "min") if max_s >= 600 else (1.0, "s")


# --- figures --------------------------------------------------------------------


def plot_test_error_hist(eval_df: pl.DataFrame) -> Figure:
    """Histogram of test-device errors at the last eval round, with mean and p90 marked."""
    rows = last_round_rows(eval_df).filter(pl.col("split") == "test")
    errors = rows["error"].drop_nulls().to_numpy()
    summary = error_summary(errors)
    fig, ax = new_axes()
    sns.histplot(x=errors, bins=min(30, max(5, errors.size // 5)), ax=ax, color="C0")
    ax.axvline(summary["mean"], color="C1", ls="--", label=f"mean = {summary['mean']:.3f}")
    ax.axvline(summary["p90"], color="C3", ls="-", label=f"{P90_LABEL} = {summary['p90']:.3f}")
    ax.set(xlabel="per-device test error", ylabel="number of test devices",
           title=f"Test-device error after round {rows['round'][0]} ({errors.size} devices)")
    ax.legend()
    return fig


def plot_error_ecdf(errors: pl.DataFrame, title: str) -> Figure:
    """ECDF of per-device test errors, one line per ``label`` (columns label, error), with
    the 90th-percentile level marked: a rule that helps the tail shifts the top of its
    curve left."""
    fig, ax = new_axes((7.0, 4.5))
    sns.ecdfplot(data=errors.to_pandas(), x="error", hue="label", ax=ax)
    sns.move_legend(ax, "lower right", title="run")
    ax.axhline(TAIL_LEVEL, color="0.5", ls=":", lw=1)
    ax.set(xlabel="per-device test error", ylabel="share of test devices", title=title)
    return fig


def plot_p90_by_round(runs: pl.DataFrame, title: str) -> Figure:
    """Test 90th-percentile error against the round, one line per run (columns label,
    seed, round, p90), coloured by ``label``: how far the final evaluation's figure
    moves from one evaluation to the next."""
    fig, ax = new_axes((9.5, 4.5))
    sns.lineplot(data=runs.sort("round").to_pandas(), x="round", y="p90", hue="label",
                 units="seed", estimator=None, lw=0.9, alpha=0.8, ax=ax)
    sns.move_legend(ax, "upper left", bbox_to_anchor=(1.01, 1.0), title="rule (a line a seed)")
    ax.set(xlabel="round", ylabel=f"test error, {P90_LABEL}", title=title)
    return fig


def plot_error_vs_size_by_rule(errors: pl.DataFrame, title: str) -> Figure:
    """Per-device test error against local data size, one colour per ``label`` (columns
    label, num_samples, error): the Δ-FL papers' scatter, which shows whether a rule
    helps the data-poor devices (Pillutla et al. 2022, Figure 1)."""
    fig, ax = new_axes((7.0, 4.5))
    sns.scatterplot(data=errors.to_pandas(), x="num_samples", y="error", hue="label", s=12,
                    alpha=0.5, linewidth=0, ax=ax)
    ax.set_xscale("log")
    ax.set(xlabel="local data size (samples, log scale)", ylabel="per-device test error",
           title=title)
    sns.move_legend(ax, "upper right", title="run")
    return fig


def plot_error_vs_rounds(eval_df: pl.DataFrame) -> Figure:
    """Mean and p90 error vs round; test solid, train dashed."""
    summary = error_by_round(eval_df)
    fig, ax = new_axes((7.6, 4.2))
    for split, ls in (("test", "-"), ("train", "--")):
        part = summary.filter(pl.col("split") == split)
        for stat, color, name in (("mean", "C0", "mean"), ("p90", "C3", P90_LABEL)):
            if part.height:
                ax.plot(part["round"].to_numpy(), part[stat].to_numpy(), ls=ls, marker=".",
                        color=color, label=f"{split} {name}")
    ax.set(xlabel="round (completed rounds)", ylabel="per-device error",
           title="Error across devices vs rounds")
    # beside the axes: the curves span the whole error range, no corner is free of them
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize="small")
    return fig


def _plot_tail_vs_bytes(ax: Axes, table: pl.DataFrame, divisor: float, label: str) -> None:
    known = table.filter(pl.col("bytes_cum").is_not_null())
    ax.plot(known["bytes_cum"].to_numpy() / divisor, known["p90"].to_numpy(), marker=".",
            label=label)


def plot_p90_vs_bytes(eval_df: pl.DataFrame, rounds_df: pl.DataFrame) -> Figure:
    """Test p90 error vs cumulative communication (bytes down + up)."""
    table = tail_vs_bytes(eval_df, rounds_df)
    divisor, unit = byte_unit(_max_bytes(table))
    fig, ax = new_axes()
    _plot_tail_vs_bytes(ax, table, divisor, "test")
    ax.set(xlabel=f"cumulative communication, down + up ({unit})",
           ylabel=f"test error, {P90_LABEL}", title="Communication vs tail error")
    honest_ylim([ax])
    return fig


def plot_p90_vs_time(eval_df: pl.DataFrame) -> Figure:
    """Test p90 error vs simulated time of evaluation."""
    test = error_by_round(eval_df).filter(pl.col("split") == "test")
    fig, ax = new_axes()
    ax.plot(test["t_s"].to_numpy() / SECONDS_PER_HOUR, test["p90"].to_numpy(), marker=".")
    ax.set(xlabel="simulated time (h)", ylabel=f"test error, {P90_LABEL}",
           title="Tail error vs simulated time")
    honest_ylim([ax])
    return fig


def plot_staleness(clients_df: pl.DataFrame) -> Figure:
    """Asynchronous runs: how many server updates old the arriving updates were, stacked
    by what the server did with them (aggregated, filtered by Δ-FL, dropped as stale)."""
    counts = staleness_counts(clients_df)
    taus = np.arange(int(counts["staleness"].to_numpy().max(initial=0)) + 1)
    fig, ax = new_axes()
    bottom = np.zeros(taus.size)
    for status, color in (("aggregated", "C0"), ("filtered", "C1"), ("stale", "C3")):
        part = counts.filter(pl.col("status") == status)
        if not part.height:
            continue
        height = np.zeros(taus.size)
        height[part["staleness"].to_numpy()] = part["count"].to_numpy()
        ax.bar(taus, height, bottom=bottom, color=color, label=f"{status} ({int(height.sum())})")
        bottom += height
    mean = float(np.average(counts["staleness"].to_numpy(), weights=counts["count"].to_numpy()))
    ax.set(xlabel="staleness τ (server updates since the device's model version)",
           ylabel="arrived updates", title=f"Staleness of the arrivals (mean {mean:.2f})")
    ax.legend(title="status")
    return fig


def plot_round_durations(rounds_df: pl.DataFrame) -> Figure:
    """Round duration vs round start time (a diurnal cycle shows as a wave), with the mean
    per time bin (an hour, or less for short runs) where there are two bins or more.

    The duration axis is logarithmic, in seconds: durations span orders of magnitude (most
    rounds close in a second, a few wait minutes for their devices), and on a linear axis
    the bulk would lie flat on zero. Rounds of zero length, which a log axis cannot show,
    are counted in the title."""
    start_s = rounds_df["t_start_s"].to_numpy().astype(np.float64)
    duration_s = (rounds_df["t_end_s"] - rounds_df["t_start_s"]).to_numpy().astype(np.float64)
    t_div, t_unit = _duration_unit(float(start_s.max()) if start_s.size else 0.0)
    fig, ax = new_axes((7.6, 4.2))
    shown = duration_s > 0
    ax.plot(start_s[shown] / t_div, duration_s[shown], marker=".", ls="", ms=3, alpha=0.5,
            label="round")
    width_s, name = _time_bin(float(start_s.max() - start_s.min()) if start_s.size else 0.0)
    bins = np.floor(start_s / width_s).astype(np.int64)
    _, inverse, counts = np.unique(bins, return_inverse=True, return_counts=True)
    if counts.size >= 2:  # one bin would be a line without length
        mean_start = np.bincount(inverse, start_s) / counts  # inside the data, not bin centres
        mean_duration = np.bincount(inverse, duration_s) / counts
        ax.plot(mean_start / t_div, mean_duration, color="C3", lw=1.2, label=f"{name} mean")
    ax.set_yscale("log")
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize="small")
    zero = int((~shown).sum())
    ax.set(xlabel=f"round start, simulated time ({t_unit})",
           ylabel="round duration (s, log scale)",
           title=f"Round durations ({rounds_df.height} rounds"
                 + (f"; {zero} of zero length not drawn)" if zero else ")"))
    return fig


def _time_bin(span_s: float) -> tuple[float, str]:
    """Width and name of the bins that round durations are averaged over: hours for runs
    of six simulated hours or more (the diurnal wave), else ten or one minutes."""
    if span_s >= 6 * SECONDS_PER_HOUR:
        return SECONDS_PER_HOUR, "hourly"
    return (600.0, "10-minute") if span_s >= SECONDS_PER_HOUR else (60.0, "1-minute")


def plot_availability(avail_df: pl.DataFrame, end_s: float | None = None) -> Figure:
    """Online devices vs simulated time: one step line per region, plus the total.

    Each row counts the devices online at the start of a simulated hour; a count is drawn
    until the next one, the last one until ``end_s`` (the run's end, e.g. its last round's
    end) or, without it, for one sampling interval. The time axis is in s, min or h as the
    run's length asks, and spans exactly the run.
    """
    per_region = avail_df.group_by("t_s", "region").agg(pl.col("num_online").sum())
    total = per_region.group_by("t_s").agg(pl.col("num_online").sum()).sort("t_s")
    times = total["t_s"].to_numpy().astype(np.float64)
    step = float(np.diff(times).min()) if times.size > 1 else SECONDS_PER_HOUR
    end = max(float(end_s), times[-1]) if end_s is not None else times[-1] + step
    if end <= times[0]:
        end = times[0] + step  # a run that ended at its start: show the first interval
    divisor, unit = _duration_unit(end)
    fig, ax = new_axes((7.5, 4.2))

    def draw(part: pl.DataFrame, **style: object) -> None:
        t = np.append(part["t_s"].to_numpy(), end) / divisor
        counts = part["num_online"].to_numpy()
        ax.step(t, np.append(counts, counts[-1]), where="post", **style)  # type: ignore[arg-type]

    for region in sorted(per_region["region"].unique().to_list()):
        draw(per_region.filter(pl.col("region") == region).sort("t_s"), lw=1.0, label=str(region))
    draw(total, color="black", lw=2.0, label="total")
    ax.set_xlim(times[0] / divisor, end / divisor)
    ax.set_ylim(bottom=0.0)
    ax.set(xlabel=f"simulated time ({unit})", ylabel="devices online", title="Device availability")
    ax.legend(title="region", fontsize="small", loc="center left", bbox_to_anchor=(1.0, 0.5))
    return fig


# --- files ----------------------------------------------------------------------


def _read_table(run_dir: Path, name: str) -> pl.DataFrame | None:
    """A run's table (merged, or the parts of an unfinished run), or None when absent or empty."""
    if not table_exists(run_dir, name):
        return None
    try:
        table = read_table(run_dir, name)
    except (OSError, pl.exceptions.ComputeError) as e:
        raise InputError(f"{run_dir / name}: cannot read Parquet ({e})") from None
    return table if table.height else None


RUN_FIGURES = ("test_error_hist.png", "p90_vs_time.png", "p90_vs_bytes.png",
               "error_vs_rounds.png", "round_durations.png", "availability.png")
# Figures earlier versions of simfl drew and this one does not: plot removes a stale copy.
# error_vs_size (each device's error against its data size, one run) answered no question
# a run's other figures leave open; simfl.study.paper_table --scatter compares rules on it.
RETIRED_FIGURES = ("error_vs_size.png",)
ASYNC_FIGURES = ("staleness.png",)  # asynchronous runs only; a sync run does not skip it


def _figure_makers(
    ev: pl.DataFrame | None, rounds: pl.DataFrame | None, avail: pl.DataFrame | None,
    clients: pl.DataFrame | None = None,
) -> tuple[dict[str, Callable[[], Figure]], dict[str, str]]:
    """(file name -> figure builder for the figures whose tables are present,
    file name -> why it is skipped for the others)."""
    makers: dict[str, Callable[[], Figure]] = {}
    skipped: dict[str, str] = {}
    if clients is not None and bool((clients["staleness"] > 0).any()):  # an async run
        makers["staleness.png"] = partial(plot_staleness, clients)
    no_eval = "eval.parquet is missing or empty (no evaluation was recorded)"
    has_test = ev is not None and bool((ev["split"] == "test").any())
    for name in ("test_error_hist.png", "p90_vs_time.png", "p90_vs_bytes.png"):
        if ev is None:
            skipped[name] = no_eval
        elif not has_test:
            skipped[name] = "eval.parquet has no test-device rows"
    if has_test and ev is not None:
        makers["test_error_hist.png"] = partial(plot_test_error_hist, ev)
        makers["p90_vs_time.png"] = partial(plot_p90_vs_time, ev)
        if rounds is not None:
            makers["p90_vs_bytes.png"] = partial(plot_p90_vs_bytes, ev, rounds)
    if ev is not None:
        makers["error_vs_rounds.png"] = partial(plot_error_vs_rounds, ev)
    else:
        skipped["error_vs_rounds.png"] = no_eval
    no_rounds = "rounds.parquet is missing or empty (no round was recorded)"
    if rounds is not None:
        makers["round_durations.png"] = partial(plot_round_durations, rounds)
    else:
        skipped["round_durations.png"] = no_rounds
        if has_test:
            skipped["p90_vs_bytes.png"] = no_rounds
    if avail is not None:
        end_s = float(rounds["t_end_s"].to_numpy().max()) if rounds is not None else None
        makers["availability.png"] = partial(plot_availability, avail, end_s)
    else:
        skipped["availability.png"] = ("availability.parquet is missing or empty (it is "
                                       "written when a run completes)")
    return makers, skipped


def _stderr(line: str) -> None:
    print(line, file=sys.stderr)


def plot_run(run_dir: Path, report: Callable[[str], None] | None = _stderr,
             fmt: str = "png") -> list[Path]:
    """Write the figures of one run into run_dir/plots as ``fmt`` files (png, pdf or svg:
    :data:`simfl.rundir.FIGURE_FORMATS`); return the written paths.

    A figure already there is redrawn without asking (and one of
    :data:`RETIRED_FIGURES` removed): a run's plots/ folder is simfl's
    (part of the run's layout, :data:`simfl.rundir.RUN_PLOTS`, which ``--overwrite``
    deletes with the run), and its figures are drawn from the run's own tables, so
    redrawing loses nothing; ``plot`` is meant to be run again as an unfinished run
    advances. Only the files simfl names are written; anything else in plots/ is left
    alone. (``plot --compare`` is different: it writes where the user says, possibly over
    a file simfl did not write, so it refuses an existing file without ``--overwrite``.)

    Figures whose tables are absent or empty are skipped, and ``report`` (by default a
    line on stderr; None: silent) is told which and why, one line per reason:
    ``simfl: plot RUN: skipped a.png, b.png: <reason>``.
    """
    run_dir = Path(run_dir)
    if not any(table_exists(run_dir, t) for t in ("rounds", "eval")):
        raise InputError(f"{run_dir}: not a simfl run directory (no rounds.parquet)")
    makers, skipped = _figure_makers(*(_read_table(run_dir, t)
                                       for t in ("eval", "rounds", "availability", "clients")))
    written = [save_figure(make(), run_dir / PLOTS_DIR / with_format(filename, fmt))
               for filename, make in makers.items()]
    for retired in RETIRED_FIGURES:
        for other in FIGURE_FORMATS:
            (run_dir / PLOTS_DIR / with_format(retired, other)).unlink(missing_ok=True)
    if report is not None:
        for line in skip_lines(f"plot {run_dir}", RUN_FIGURES, skipped, fmt):
            report(line)
    return written


def with_format(filename: str, fmt: str) -> str:
    """``filename`` with the suffix of the figure format ``fmt`` (png, pdf, svg)."""
    if fmt not in FIGURE_FORMATS:
        raise InputError(f"figure format {fmt!r}: must be one of {', '.join(FIGURE_FORMATS)}")
    return str(Path(filename).with_suffix(f".{fmt}"))


def skip_lines(what: str, order: tuple[str, ...], skipped: dict[str, str],
               fmt: str = "png") -> list[str]:
    """One line per reason for the figures in ``skipped`` (file name -> why), its names
    in ``order``: ``simfl: WHAT: skipped a.png, b.png: <reason>``."""
    lines = []
    for reason in dict.fromkeys(skipped.values()):
        names = ", ".join(with_format(n, fmt) for n in order if skipped.get(n) == reason)
        lines.append(f"simfl: {what}: skipped {names}: {reason}")
    return lines


def compare_runs(run_dirs: list[Path], out: Path, split: str = "test") -> Path:
    """Overlay the p90 error of ``split``'s devices (test: unseen; train: those trained on)
    vs cumulative bytes for several runs; write the figure at out."""
    tables, labels = [], []
    for run_dir in map(Path, run_dirs):
        ev, rounds = _read_table(run_dir, "eval"), _read_table(run_dir, "rounds")
        if ev is None or rounds is None:
            raise InputError(f"{run_dir}: needs non-empty eval.parquet and rounds.parquet")
        tables.append(tail_vs_bytes(ev, rounds, split))
        labels.append(run_label(run_dir))
    labels = _distinct(labels, run_dirs)
    divisor, unit = byte_unit(max((_max_bytes(t) for t in tables), default=0.0))
    fig, ax = new_axes((7.0, 4.5))
    for table, label in zip(tables, labels, strict=True):
        _plot_tail_vs_bytes(ax, table, divisor, label)
    ax.set(xlabel=f"cumulative communication, down + up ({unit})",
           ylabel=f"{SPLIT_NAMES[split]} error, {P90_LABEL}", title="Communication vs tail error")
    ax.legend(title="run")
    honest_ylim([ax])
    return save_figure(fig, out)


def compare_runs_vs_time(run_dirs: list[Path], out: Path, split: str = "test") -> Path:
    """Overlay ``split``'s p90 error vs simulated time for several runs (e.g. sync vs
    async), on a log time axis (an async run may take minutes where sync rounds take
    days); each run is labelled with its aggregator and server mode (and folder, where
    those coincide)."""
    curves, labels = [], []
    for run_dir in map(Path, run_dirs):
        ev = _read_table(run_dir, "eval")
        if ev is None:
            raise InputError(f"{run_dir}: needs a non-empty eval.parquet")
        test = error_by_round(ev).filter((pl.col("split") == split) & (pl.col("t_s") > 0))
        curves.append(test)
        labels.append(f"{run_label(run_dir)}, {_server_mode(run_dir)}")
    labels = _distinct(labels, run_dirs)
    fig, ax = new_axes((7.0, 4.5))
    for test, label in zip(curves, labels, strict=True):
        ax.plot(test["t_s"].to_numpy() / SECONDS_PER_HOUR, test["p90"].to_numpy(), marker=".",
                ms=4, label=label)
    ax.set_xscale("log")
    ax.set(xlabel="simulated time (h, log scale)",
           ylabel=f"{SPLIT_NAMES[split]} error, {P90_LABEL}",
           title="Tail error vs simulated time")
    ax.legend(title="run", fontsize="small")
    honest_ylim([ax])
    return save_figure(fig, out)


def _distinct(labels: list[str], run_dirs: list[Path]) -> list[str]:
    """Runs with the same label are told apart by their folder."""
    return [f"{label} ({Path(d).name})" if labels.count(label) > 1 else label
            for label, d in zip(labels, run_dirs, strict=True)]


def _server_mode(run_dir: Path) -> str:
    """The manifest's server mode (sync / async); the folder name if it cannot be read."""
    try:
        return str(manifest_or_empty(run_dir)["scenario"]["server"].get("mode", "sync"))
    except (KeyError, TypeError, AttributeError):
        return run_dir.name

"""Figures, from Parquet only: never the simulator or torch (docs/design.md §8).

- :mod:`simfl.plots.runs`: one run's figures (``python -m simfl plot RUN``) and
  comparisons of several runs;
- :mod:`simfl.plots.study`: the estimation study's (the server's threshold against the
  population's, the bias by cause, a collected sweep's figures);
- :mod:`simfl.plots.drfl`: the DRFL study's.

Each ``plot_*`` function takes polars DataFrames and returns a matplotlib Figure built
without pyplot (no global state, no display backend); :func:`save_figure` is the one
place a figure becomes a file.
"""

from __future__ import annotations

from pathlib import Path

import seaborn as sns
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from simfl.rundir import write_atomically

DPI = 120


def new_axes(figsize: tuple[float, float] = (6.4, 4.2)) -> tuple[Figure, Axes]:
    """A figure with one whitegrid axes, without pyplot."""
    fig = Figure(figsize=figsize, layout="constrained")
    with sns.axes_style("whitegrid"):
        ax = fig.add_subplot()
    return fig, ax


def save_figure(fig: Figure, out: str | Path, mark: dict[str, str] | None = None) -> Path:
    """Write ``fig`` at ``out`` (a PNG, or the format its suffix names; its folder
    created); returns the path. ``mark``: PNG text that says who wrote the file, the
    figure then written atomically (collect's: :data:`simfl.runs.sweep.COLLECT_MARK`)."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    if mark is None:
        fig.savefig(out, dpi=DPI)
    else:
        write_atomically(out, lambda tmp: fig.savefig(tmp, dpi=DPI, format="png",
                                                      metadata=mark))
    return out

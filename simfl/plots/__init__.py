"""Figures, from Parquet only: never the simulator or torch (docs/design.md §8).

- :mod:`simfl.plots.runs`: one run's figures (``python -m simfl plot RUN``) and
  comparisons of several runs;
- :mod:`simfl.plots.study`: the estimation study's (the server's threshold against the
  population's, the bias by cause, a collected sweep's figures);
- :mod:`simfl.plots.sweep`: any collected sweep's (tail error per grid point);
- :mod:`simfl.plots.threshold`: a run's threshold estimates against the population's;
- :mod:`simfl.plots.command`: what ``python -m simfl plot`` draws;
- :mod:`simfl.plots.drfl`: the DRFL study's.

Each ``plot_*`` function takes polars DataFrames and returns a matplotlib Figure built
without pyplot (no global state, no display backend); :func:`save_figure` is the one
place a figure becomes a file, and :func:`honest_ylim` keeps a value axis from blowing
a difference of a thousandth up to the whole frame.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import seaborn as sns
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from simfl.rundir import write_atomically

DPI = 120
# A value axis whose data span less than NARROW of their magnitude (0.9991 to 1.0: 0.09 %)
# would show a difference of a thousandth as one of the whole frame (matplotlib fits the
# frame to the data); :func:`honest_ylim` widens it to WIDE of their magnitude and says so.
NARROW, WIDE = 0.02, 0.1


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


def honest_ylim(axes: Sequence[Axes], bounds: tuple[float, float] | None = (0.0, 1.0)
                ) -> bool:
    """Widen the (shared) value axis of ``axes`` when their data span less than
    :data:`NARROW` of the data's magnitude m = max |y|: to a span of :data:`WIDE` · m
    centred on the data, moved inside ``bounds`` (an error rate's [0, 1]; None: none),
    with a note in the first axes giving the data's true range. Returns whether it
    widened. Data of magnitude 0 (all zero) are left as drawn."""
    lows, highs = zip(*(ax.dataLim.intervaly for ax in axes), strict=True)
    low, high = float(np.min(lows)), float(np.max(highs))
    scale = max(abs(low), abs(high))
    if not np.isfinite(scale) or scale == 0 or high - low >= NARROW * scale:
        return False
    half = WIDE * scale / 2
    start = (low + high) / 2 - half
    if bounds is not None:
        start = min(max(start, bounds[0]), bounds[1] - 2 * half)
    for ax in axes:
        ax.set_ylim(start, start + 2 * half)
    low_half = (low + high) / 2 < start + half  # the data in the lower half: note on top
    axes[0].annotate(f"every value within {low:.4g}–{high:.4g}: the axis is widened, "
                     "the differences are that small", (0.01, 0.97 if low_half else 0.03),
                     xycoords="axes fraction", va="top" if low_half else "bottom",
                     fontsize="x-small", color="0.3")
    return True

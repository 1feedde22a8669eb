"""What ``python -m simfl plot RUN_DIR ...`` draws: each run's own figures, or, when a
comparison is asked for (``--compare``, ``--compare-time``), that comparison alone.

Redrawing every run's figure set beside a comparison took most of the command's time
and drew nothing the comparison asked for; a run's own figures come with a comparison
only when asked (``every_run``: ``--all``).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from simfl.plots.runs import compare_runs, compare_runs_vs_time, plot_run
from simfl.plots.study import plot_run_bias


def plot_runs(run_dirs: list[Path], fmt: str = "png", compare: Path | None = None,
              compare_time: Path | None = None, split: str = "test", every_run: bool = False,
              report: Callable[[str], None] | None = None) -> list[Path]:
    """The files ``plot`` writes, in order: each run's own figures
    (:func:`~simfl.plots.runs.plot_run`, :func:`~simfl.plots.study.plot_run_bias`) when
    no comparison is asked for or ``every_run``; then ``compare`` (tail error against
    bytes) and ``compare_time`` (against simulated time) of ``split``'s devices, where
    given. ``report``: told what each run's figure set skipped (None: silent)."""
    written: list[Path] = []
    if every_run or (compare is None and compare_time is None):
        for run_dir in run_dirs:
            written += [*plot_run(run_dir, report, fmt), *plot_run_bias(run_dir, fmt)]
    if compare is not None:
        written.append(compare_runs(run_dirs, compare, split))
    if compare_time is not None:
        written.append(compare_runs_vs_time(run_dirs, compare_time, split))
    return written

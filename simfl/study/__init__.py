"""The analysis of a study's runs, from their kept tables only (polars, scipy): what the
study pages' tables are computed with, for anyone's sweep.

- :mod:`simfl.study.intervals`: paired t-intervals, equivalence verdicts, Holm's
  adjustment, Fieller's ratio interval, the sample-weighted 90th percentile;
- :mod:`simfl.study.dose`: the tail error's response to a known error in the Δ-FL
  threshold (docs/dose_response.md);
- :mod:`simfl.study.exposure`: whether the devices aggregated most are fitted best
  (docs/exposure.md);
- :mod:`simfl.study.coverage`: how often each estimator's Woodruff interval holds the
  population quantile.

Each module with a command (``python -m simfl.study.dose``, ``...exposure``) exits
through :func:`run_command`.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable
from pathlib import Path

from simfl.errors import InputError
from simfl.rundir import MANIFEST


def run_folders(folders: Iterable[Path]) -> list[Path]:
    """The run folders named: each of ``folders`` is a run folder (it holds a manifest)
    or a folder of them (a sweep's, kept or not), taken in name order. InputError for a
    folder that does not exist."""
    runs: list[Path] = []
    for folder in folders:
        if not folder.is_dir():
            raise InputError(f"{folder}: no such folder")
        runs += [folder] if (folder / MANIFEST).is_file() else sorted(
            d for d in folder.iterdir() if (d / MANIFEST).is_file())
    return runs


def run_command(work: Callable[[], None]) -> int:
    """A study command's exit status: 0 once ``work`` is done, or 2 with its one-line
    error on stderr (bad input: a folder without runs, a lean archive)."""
    try:
        work()
    except InputError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0

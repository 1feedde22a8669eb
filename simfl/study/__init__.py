"""The analysis of a study's runs, from their kept tables (polars, scipy): what the
study pages' tables are computed with, for anyone's sweep. Each tool is a command,
``python -m simfl.study.<tool>``, that prints its tables as markdown, and a module whose
functions return them (polars frames, dicts or markdown lines); ``make docs-tables``
(:mod:`~simfl.study.docs_tables`) runs every such command the pages show.

- :mod:`~simfl.study.intervals`: paired t-intervals, equivalence verdicts, Holm's
  adjustment, Fieller's ratio interval, the sample-weighted 90th percentile, the power
  of a paired t-test;
- :mod:`~simfl.study.compare`: any sweep's grid points, their final tail error paired by
  seed against a reference point, Holm-adjusted, with the three verdicts;
- :mod:`~simfl.study.paper_table`: the reproduction table of a paper sweep against the
  Δ-FL papers (docs/reproduction.md), with :mod:`~simfl.study.paper_cells` (the papers'
  cells, simfl − paper, cause C1) and :mod:`~simfl.study.paper_paired` (rules paired by
  seed, Fieller's ratio, averages over the last evaluations, small and large devices);
- :mod:`~simfl.study.bias_table`: the bias of η̂ and its three causes per cell and
  estimator (docs/bias/*.md);
- :mod:`~simfl.study.bias_claims`: the estimation pages' cross-table contrasts, seed
  subsets and family-wise reading (docs/bias/limits.md);
- :mod:`~simfl.study.drivers_table`: each driving estimator's error, traffic and Pareto
  front (docs/bias/tail.md);
- :mod:`~simfl.study.population_figure`: the bias against the population size
  (docs/population_size.md);
- :mod:`~simfl.study.ipw_rates`: how well IPW's estimated online rates correct who is
  online, without training (docs/bias/ipw.md);
- :mod:`~simfl.study.async_table`: synchronous against asynchronous runs (docs/async.md);
- :mod:`~simfl.study.same_seed`: where two runs of one scenario and seed part, round by
  round (docs/reproduction.md);
- :mod:`~simfl.study.dose`: the tail error's response to a known error in the Δ-FL
  threshold (docs/dose_response.md);
- :mod:`~simfl.study.drive`: Δ-FL driven by corrected estimators where the bias is large
  (docs/drive.md);
- :mod:`~simfl.study.theory`: the availability term predicted to first order against
  the measured one (docs/theory.md);
- :mod:`~simfl.study.exposure`: whether the devices aggregated most are fitted best
  (docs/exposure.md);
- :mod:`~simfl.study.coverage`: how often each estimator's Woodruff interval holds the
  population quantile;
- :mod:`~simfl.study.docs_tables`: every table the pages' commands print, made again from
  the kept runs (``make docs-tables``).

Each command exits through :func:`run_command` (2 with a one-line error for bad input).
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

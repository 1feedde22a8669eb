"""Sweeps: one scenario, a grid of overrides, each run a Ray task (or run in turn).

A sweep file names a scenario and the axes to vary::

    scenario = "../diurnal_emnist_small.toml"   # relative to the sweep file
    seeds = [0, 1, 2]
    include = ["chosen.toml"]                   # [set] / [variants.*] of other files, e.g.
                                                # a tuning's choice; the sweep's own win
    [set]                                       # overrides for every run
    "server.num_rounds" = 150
    [grid]                                      # every combination of these values
    "server.clients_per_round" = [10, 20, 50]
    [variants.always]                           # named bundles of overrides: one axis
    "population.availability.mode" = "always"
    [variants.diurnal]
    "population.availability.mode" = "diurnal"
    [ray]
    address = ""        # "" = a local Ray instance; "auto" or "ray://head:10001" for a cluster
    num_cpus = 1        # CPUs Ray reserves per run: match the runs' train.threads (1)
    num_gpus = 0

Runs go to ``results/<sweep name>/<run id>/``: a run id joins ``key=value`` for the
variant, each grid key (its last part) and the seed into one folder name, so a variant name
or grid value holding ``/`` (or NUL) is refused (exit 2, naming it) rather than making a
path that leaves that folder (name such a value as a variant instead), and
``results/<sweep name>`` must not be a single run's directory. A run whose manifest says
``complete`` is skipped when the sweep is launched again, and one interrupted
after a checkpoint resumes from it (``python -m simfl resume``), unless it ran
another scenario (:func:`scenario_changes`): then it starts again from round 0,
said first; a complete run of another scenario is kept, and named. Every run's overrides
are validated before the first one starts. Ray is an optional extra
(``pip install simfl[sweep]``); without it, or with ``--backend sequential``,
the runs execute one after the other in this process.

The package: :mod:`~simfl.runs.sweep.spec` reads a sweep file into a :class:`Sweep` (its
keys through :func:`simfl.scenario.build_config`, as a scenario's);
:mod:`~simfl.runs.sweep.execute` runs it (it imports the run machinery, torch included,
so it is not imported here); :mod:`~simfl.runs.sweep.status` says where its runs stand and
:mod:`~simfl.runs.sweep.collection` gathers the complete ones' tables. What this package
imports at its top is torch-free (``sweep --status``, ``collect``, :mod:`simfl.study`).
"""

from simfl.rundir import COLLECT_MARK, SWEEP_FIGURES
from simfl.runs.sweep.collection import (
    COLLECTED_TABLES,
    collect,
    gathered,
    lacking,
    written_by_collect,
)
from simfl.runs.sweep.spec import (
    Sweep,
    SweepRun,
    check_ray_fits,
    load_sweep,
    load_tuning,
    read_toml,
    sweep_from_table,
    toml_value,
)
from simfl.runs.sweep.status import (
    is_complete,
    kept_copy,
    other_scenarios,
    restarts,
    run_statuses,
    scenario_changes,
    status_lines,
    sweep_progress,
)

__all__ = ["COLLECTED_TABLES", "COLLECT_MARK", "SWEEP_FIGURES", "Sweep", "SweepRun",
           "check_ray_fits", "collect", "gathered", "is_complete", "kept_copy", "lacking",
           "load_sweep", "load_tuning", "other_scenarios", "read_toml", "restarts", "run_statuses",
           "scenario_changes", "status_lines", "sweep_from_table", "sweep_progress",
           "toml_value", "written_by_collect"]

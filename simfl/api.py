"""simfl from Python: load a scenario, run it, open a run and read its tables.

    import simfl
    scenario = simfl.load_scenario("scenarios/quick_synthetic.toml",
                                   {"server.num_rounds": 5})
    run = simfl.simulate(scenario, "results/quick")
    run.eval.filter(pl.col("split") == "test")      # polars frames

``import simfl`` stays light: torch is imported by :func:`simulate` and :func:`resume`
when a run needs it (simfl.runs.run wires the numerics), and the figures' libraries by
:meth:`Run.plot`. The command line (simfl.cli) is a thin layer over the same
functions; docs/api.md shows each, and a test runs every example there.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import polars as pl

from simfl.records import SCHEMAS, read_table
from simfl.rundir import MANIFEST, read_manifest
from simfl.scenario import Scenario, from_dict, from_manifest, set_key
from simfl.scenario import load_scenario as scenario_file
from simfl.tables import tail_vs_bytes


def load_scenario(source: str | Path | Mapping[str, Any],
                  overrides: Mapping[str, Any] | None = None) -> Scenario:
    """A validated Scenario from a TOML file or a dict (TOML's tables as nested dicts),
    with ``overrides`` ({"dotted.key": value}) applied on top; InputError names the key
    (and the file)."""
    if not isinstance(source, Mapping):
        return scenario_file(source, overrides or {})
    table = copy.deepcopy(dict(source))
    for key, value in (overrides or {}).items():
        set_key(table, key, value, "<dict>")
    return from_dict(table, source="<dict>")


@dataclass(frozen=True)
class Run:
    """A run directory: its manifest and tables (polars frames, read when asked)."""

    path: Path
    _cache: dict[str, pl.DataFrame] = field(default_factory=dict, repr=False, compare=False)

    @property
    def manifest(self) -> dict[str, Any]:
        return read_manifest(self.path)

    @property
    def status(self) -> str:
        return str(self.manifest.get("status"))

    @property
    def scenario(self) -> Scenario:
        return from_manifest(self.manifest, str(self.path / MANIFEST))

    def table(self, name: str) -> pl.DataFrame:
        """Table ``name`` (rounds, clients, comm, eval, bias, devices, availability), as
        simfl.records.read_table reads it: merged once complete, else its parts."""
        if name not in SCHEMAS:
            raise KeyError(f"no table {name!r}; simfl writes {sorted(SCHEMAS)}")
        if name not in self._cache:
            self._cache[name] = read_table(self.path, name)
        return self._cache[name]

    rounds = property(lambda self: self.table("rounds"))
    clients = property(lambda self: self.table("clients"))
    comm = property(lambda self: self.table("comm"))
    eval = property(lambda self: self.table("eval"))
    bias = property(lambda self: self.table("bias"))
    devices = property(lambda self: self.table("devices"))
    availability = property(lambda self: self.table("availability"))

    def tail_vs_bytes(self, split: str = "test") -> pl.DataFrame:
        """Per evaluation: the ``split`` (test or train) devices' mean and 90th-percentile
        error (columns round, split, t_s, num_devices, mean, p90) and ``bytes_cum``, the
        bytes down + up of the rounds completed before it (docs/design.md §8, "Joining the
        tables")."""
        return tail_vs_bytes(self.eval, self.rounds, split)

    def plot(self) -> list[Path]:
        """Draw the run's figures into its plots/ folder, as ``python -m simfl plot`` does
        (its threshold estimates and bias by cause too, where it logged them); return
        their paths."""
        from simfl.plots.runs import plot_run  # matplotlib only when figures are drawn
        from simfl.plots.study import plot_run_bias

        return [*plot_run(self.path, report=None), *plot_run_bias(self.path)]


def open_run(path: str | Path) -> Run:
    """An existing run directory (finished or not); InputError if it holds no manifest."""
    run_dir = Path(path)
    read_manifest(run_dir)
    return Run(run_dir)


def simulate(scenario: Scenario | str | Path, out: str | Path | None = None,
        overwrite: bool = False, progress: bool = False) -> Run:
    """Run ``scenario`` (a Scenario or a scenario file) into ``out`` (default
    results/<name>); return the run. Raises InputError before any output for bad
    input, RunFailed when the run fails while working (its manifest says why)."""
    from simfl.runs.run import run_scenario  # torch: only when a run is made

    if not isinstance(scenario, Scenario):
        scenario = load_scenario(scenario)
    run_dir = Path(out) if out is not None else Path("results") / scenario.name
    run_scenario(scenario, run_dir, overwrite=overwrite, progress=progress)
    return Run(run_dir)


def resume(path: str | Path, progress: bool = False) -> Run:
    """Continue a stopped run from its last checkpoint (python -m simfl resume)."""
    from simfl.runs.run import resume_run

    resume_run(Path(path), progress=progress)
    return Run(Path(path))


__all__ = ["Run", "load_scenario", "open_run", "resume", "simulate"]

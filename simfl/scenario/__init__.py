"""Scenario files: TOML -> frozen, validated dataclasses.

A scenario is data, not code. :func:`load_scenario` rejects unknown keys (naming
the nearest valid one), wrong types and out-of-range values with an
:class:`~simfl.errors.InputError` before any work is done. Only ``runs/`` sees
the whole :class:`Scenario`; every other module gets the section it needs.

The scenario's shape is :class:`Scenario` below, one field a section; each section's
keys live in a module of this package by concern (``data``, ``train``: model, training
and evaluation, ``aggregator``, ``estimator``, ``server``, ``population``), what they
are made of in ``fields``, the TOML conversion in ``convert`` and the checks across
keys in ``checks``. Every name is importable from ``simfl.scenario``.
"""

from __future__ import annotations

import dataclasses
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from simfl import plugins
from simfl.errors import InputError
from simfl.scenario.aggregator import AggregatorConfig
from simfl.scenario.checks import check_relations, plugins_of
from simfl.scenario.convert import build_config, flatten
from simfl.scenario.data import DataConfig, SyntheticConfig
from simfl.scenario.estimator import (
    MAX_MM_ITERATIONS,
    MIN_MM_TOL,
    BisectionConfig,
    EstimatorConfig,
    HistoryConfig,
    IPWConfig,
    ModelAssistedConfig,
    RakeConfig,
    SecureMMConfig,
    ShiftedConfig,
    ShrunkIPWConfig,
    ShrunkStrataConfig,
    TrackingConfig,
)
from simfl.scenario.fields import NON_NEGATIVE, is_plain_name, opt
from simfl.scenario.population import (
    DEFAULT_ONLINE_PROB_BY_HOUR,
    AvailabilityConfig,
    ComputeConfig,
    HabitsConfig,
    NetworkConfig,
    PopulationConfig,
    Region,
)
from simfl.scenario.server import ServerConfig, unscaled_rule_note, unused_server_keys
from simfl.scenario.train import EvalConfig, ModelConfig, TrainConfig


@dataclass(frozen=True)
class RunConfig:
    # Rounds between checkpoints (0 = only when stopped by SIGTERM/SIGINT); a killed run
    # resumes from its last one (python -m simfl resume RUN_DIR) and loses at most these.
    checkpoint_every: int = opt(20, NON_NEGATIVE)
    # The run fails (status "failed", exit 1) once idle_share of the last idle_window rounds
    # aggregated no update or had a non-finite threshold (0 = never; simfl/sim/health.py).
    idle_window: int = opt(10, NON_NEGATIVE)
    idle_share: float = opt(1.0, (lambda v: 0 < v <= 1, "must be in (0, 1]"))


@dataclass(frozen=True)
class Scenario:
    # Defaults to the file's stem; names the results folder (results/<name>), so a name
    # is one path component: no separators, not '.' or '..'.
    name: str = opt("", (lambda v: is_plain_name(v), "must be a plain name (letters, digits, "
                        "'.', '_', '-', '=', ',', '+'; no path separators, not '.' or '..')"))
    seed: int = opt(0, NON_NEGATIVE)
    data: DataConfig = opt(DataConfig)
    model: ModelConfig = opt(ModelConfig)
    train: TrainConfig = opt(TrainConfig)
    aggregator: AggregatorConfig = opt(AggregatorConfig)
    estimator: EstimatorConfig = opt(EstimatorConfig)
    server: ServerConfig = opt(ServerConfig)
    eval: EvalConfig = opt(EvalConfig)
    population: PopulationConfig = opt(PopulationConfig)
    run: RunConfig = opt(RunConfig)


def load_scenario(path: str | Path,
                  overrides: Sequence[str] | Mapping[str, Any] = ()) -> Scenario:
    """Read and validate a scenario file; raise InputError naming the file and key.

    ``overrides`` are applied on top of the file: ``"dotted.key=TOML value"`` strings,
    e.g. ``"server.num_rounds=200"`` or ``'aggregator.name="fedavg"'`` (the command
    line's ``--set``), or a mapping of dotted keys to values (the Python API's).
    """
    path = Path(path)
    try:
        table = tomllib.loads(path.read_text())
    except FileNotFoundError:
        raise InputError(f"{path}: scenario file not found") from None
    except (OSError, UnicodeDecodeError) as e:
        raise InputError(f"{path}: cannot read scenario file ({e})") from None
    except ValueError as e:  # TOMLDecodeError, or an integer of over 4300 digits
        raise InputError(f"{path}: invalid TOML: {e}") from None
    except RecursionError:
        raise InputError(f"{path}: invalid TOML: nested too deeply") from None
    if isinstance(overrides, Mapping):
        for key, value in overrides.items():
            set_key(table, key, value, str(path))
    else:
        for override in overrides:
            _apply_override(table, override, str(path))
    scenario = from_dict(table, source=str(path))
    if not scenario.name:
        if not is_plain_name(path.stem):
            raise InputError(f"{path}: the file name is no plain run name; set 'name'")
        scenario = dataclasses.replace(scenario, name=path.stem)
    return scenario


def _apply_override(table: dict[str, Any], override: str, source: str) -> None:
    key, sep, text = override.partition("=")
    if not sep or not key.strip():
        raise InputError(f"{source}: override '{override}' must look like key=value")
    try:
        value = tomllib.loads(f"v = {text.strip()}")["v"]
    except ValueError:  # TOMLDecodeError, or an integer of over 4300 digits
        value = text.strip()  # a bare word is taken as a string: aggregator.name=fedavg
    except RecursionError:
        raise InputError(f"{source}: override of '{key}': nested too deeply") from None
    set_key(table, key, value, source)


def set_key(table: dict[str, Any], key: str, value: Any, source: str) -> None:
    """Set dotted ``key`` (e.g. ``server.num_rounds``) of a scenario table to ``value``."""
    *parents, leaf = key.strip().split(".")
    for part in parents:
        table = table.setdefault(part, {})
        if not isinstance(table, dict):
            raise InputError(f"{source}: override of '{key}': '{part}' is not a table")
    table[leaf] = value


def from_dict(table: dict[str, Any], source: str = "<scenario>") -> Scenario:
    """Build a validated Scenario from a parsed TOML table."""
    scenario: Scenario = build_config(Scenario, table, "", source)
    check_relations(scenario, source)
    return scenario


def from_manifest(manifest: Mapping[str, Any], source: str) -> Scenario:
    """The scenario a run's manifest.json records; the modules of its plug-ins that were
    registered by decorator are imported first, so that their names are known again."""
    plugins.import_recorded(manifest.get("plugins") or {}, source)
    return from_dict(manifest["scenario"], source=source)


def to_dict(scenario: Scenario) -> dict[str, Any]:
    """The resolved scenario as plain data (for manifest.json)."""
    return dataclasses.asdict(scenario)


# the names simfl, its tests and its benchmarks import from simfl.scenario: every section's
# config class, the entry points and the few constants read elsewhere
__all__ = [
    "DEFAULT_ONLINE_PROB_BY_HOUR", "MAX_MM_ITERATIONS", "MIN_MM_TOL",
    "AggregatorConfig", "AvailabilityConfig", "BisectionConfig", "ComputeConfig", "DataConfig",
    "EstimatorConfig", "EvalConfig", "HabitsConfig", "HistoryConfig", "IPWConfig",
    "ModelAssistedConfig", "ModelConfig", "NetworkConfig", "PopulationConfig", "RakeConfig",
    "Region", "RunConfig", "Scenario", "SecureMMConfig", "ServerConfig", "ShiftedConfig",
    "ShrunkIPWConfig", "ShrunkStrataConfig", "SyntheticConfig", "TrackingConfig", "TrainConfig",
    "build_config", "flatten", "from_dict", "from_manifest", "is_plain_name", "load_scenario",
    "plugins_of", "set_key", "to_dict", "unscaled_rule_note", "unused_server_keys",
]

"""Sweep files: TOML -> :class:`SweepFile` (through :func:`simfl.scenario.build_config`,
as scenario files) -> the :class:`Sweep`, its runs expanded and every run's scenario
validated before any run starts (the keys: :mod:`simfl.runs.sweep`). A tuning file
(:mod:`simfl.runs.tune`) is a sweep file with a criterion: :func:`load_tuning`."""

from __future__ import annotations

import itertools
import json
import tomllib
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from simfl.errors import InputError
from simfl.rundir import MANIFEST
from simfl.scenario import build_config, is_plain_name, load_scenario

RESERVES = "a number >= 0 (what Ray reserves per run)"
# A tuning file's criteria (simfl.runs.tune.CRITERIA computes each) and the share of the
# training writers that holdout_p90 evaluates unless the file sets it.
TUNING_CRITERIA = ("holdout_p90", "train_loss")
DEFAULT_VALIDATION_FRACTION = 0.2


def _reserved(default: float) -> Any:
    """A ``[ray]`` resource: what Ray reserves per run, a finite number >= 0."""
    return field(default=default, metadata={"check": (lambda v: v >= 0, ""),
                                            "expects": RESERVES})


@dataclass(frozen=True)
class RayConfig:
    """A sweep file's ``[ray]``."""

    address: str = field(default="", metadata={
        "expects": 'a string ("" for a local Ray instance, "auto" or "ray://HOST:PORT")'})
    num_cpus: float = _reserved(1.0)
    num_gpus: float = _reserved(0.0)


@dataclass(frozen=True)
class SweepFile:
    """A sweep file as written: its keys and tables, their types checked."""

    scenario: str = ""  # required: the scenario file, relative to the sweep file
    name: str = ""  # "": the sweep file's stem
    seeds: tuple[int, ...] = field(default=(0,), metadata={
        "check": (lambda v: len(v) > 0, ""), "expects": "a non-empty array of integers"})
    include: tuple[str, ...] = field(default=(), metadata={"expects": "an array of file names"})
    set: dict[str, Any] = field(default_factory=dict)  # dotted key -> value, every run
    grid: dict[str, Any] = field(default_factory=dict)  # dotted key -> array of values
    variants: dict[str, Any] = field(default_factory=dict)  # name -> table of overrides
    ray: RayConfig = field(default_factory=RayConfig)


@dataclass(frozen=True)
class Included:
    """A file a sweep includes (e.g. a tuning's chosen.toml): only these two tables."""

    set: dict[str, Any] = field(default_factory=dict)
    variants: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class SweepRun:
    run_id: str
    params: dict[str, Any]  # axis -> value (the collected tables' extra columns)
    overrides: tuple[str, ...]  # "dotted.key=TOML value"
    run_dir: Path


@dataclass(frozen=True)
class Sweep:
    name: str
    scenario: Path
    runs: tuple[SweepRun, ...]
    ray_address: str = ""
    num_cpus: float = 1.0
    num_gpus: float = 0.0
    source: str = ""  # the sweep file

    @property
    def out_dir(self) -> Path:
        return self.runs[0].run_dir.parent


def toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return json.dumps(value)  # a TOML basic string
    if isinstance(value, list):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    return repr(value)


def read_toml(path: Path, what: str) -> dict[str, Any]:
    try:
        return tomllib.loads(path.read_text())
    except FileNotFoundError:
        raise InputError(f"{path}: {what} file not found") from None
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as e:
        raise InputError(f"{path}: invalid TOML: {e}") from None


def load_sweep(path: str | Path, results_dir: Path = Path("results")) -> Sweep:
    """Read a sweep file, expand its grid and validate every run's scenario."""
    path = Path(path)
    return sweep_from_table(read_toml(path, "sweep"), path, results_dir)


def sweep_from_table(raw: dict[str, Any], path: Path, results_dir: Path) -> Sweep:
    """A sweep from the parsed file ``path`` (relative names are resolved from it)."""
    source = str(path)
    spec: SweepFile = build_config(SweepFile, raw, "", source)
    if not spec.scenario:
        raise InputError(f"{source}: 'scenario' (the scenario file) is required")
    spec = _with_includes(spec, path, source)
    _check_tables(spec, source)
    name = spec.name or path.stem
    _check_folder(name, results_dir, source)
    runs = _expand(name, spec, results_dir)
    ids = [run.run_id for run in runs]
    if len(set(ids)) < len(ids):
        twice = next(i for i in ids if ids.count(i) > 1)
        raise InputError(f"{source}: two runs would share the folder {twice!r} (grid values "
                         f"or keys that print alike, e.g. 1 and \"1\"): make them differ")
    scenario = (path.parent / spec.scenario).resolve()
    for run in runs:  # bad overrides stop the sweep before any run starts
        load_scenario(scenario, run.overrides)
    return Sweep(name, scenario, runs, spec.ray.address, spec.ray.num_cpus, spec.ray.num_gpus,
                 source)


def load_tuning(path: Path, results_dir: Path = Path("results")
                ) -> tuple[Sweep, str, dict[str, object]]:
    """(the sweep of the tuning file, its criterion, its grid); InputError on bad files."""
    raw = read_toml(path, "tuning")
    criterion = raw.pop("criterion", None)
    if criterion not in TUNING_CRITERIA:
        raise InputError(f"{path}: 'criterion' must be one of {sorted(TUNING_CRITERIA)}, "
                         f"got {criterion!r}")
    grid = raw.get("grid")
    if not isinstance(grid, dict) or not grid:
        raise InputError(f"{path}: [grid] with the candidate values is required")
    if criterion == "holdout_p90":
        common = raw.setdefault("set", {})
        if isinstance(common, dict):  # else sweep_from_table says what [set] must be
            common.setdefault("data.validation_fraction", DEFAULT_VALIDATION_FRACTION)
    return sweep_from_table(raw, path, results_dir), criterion, grid


def _with_includes(spec: SweepFile, path: Path, source: str) -> SweepFile:
    """The ``[set]`` and ``[variants.*]`` tables of the files listed in ``include`` (e.g. a
    tuning's chosen.toml) merged under the sweep's own, which win (an earlier file's win
    over a later one's)."""
    common, variants = dict(spec.set), dict(spec.variants)
    _check_variants(variants, source)
    for name in spec.include:
        where = path.parent / name
        included: Included = build_config(Included, read_toml(where, "included"), "", str(where))
        _check_variants(included.variants, str(where))
        common = {**included.set, **common}
        for vname, bundle in included.variants.items():
            if vname not in variants:
                raise InputError(f"{where}: variant '{vname}' is not in {source}")
            variants[vname] = {**bundle, **variants[vname]}
    return replace(spec, set=common, variants=variants)


def _check_variants(variants: dict[str, Any], source: str) -> None:
    for vname, bundle in variants.items():
        if not isinstance(bundle, dict):
            raise InputError(f"{source}: [variants.{vname}] must be a table of overrides")


def _check_tables(spec: SweepFile, source: str) -> None:
    """InputError for what the keys' types do not say: no seed twice, every grid key an
    array of distinct values (not the seed), and names that can be part of a run id."""
    if len(set(spec.seeds)) != len(spec.seeds):
        raise InputError(f"{source}: 'seeds' = {list(spec.seeds)} repeats a seed")
    for key, values in spec.grid.items():
        if not (isinstance(values, list) and values):
            raise InputError(f"{source}: grid key '{key}' must be a non-empty array")
        if key == "seed" or len({toml_value(v) for v in values}) != len(values):
            raise InputError(f"{source}: grid key '{key}' repeats a value or is the seed "
                             f"(use 'seeds')")
    _check_run_id_parts(source, spec.grid, spec.variants)


def _check_folder(name: str, results_dir: Path, source: str) -> None:
    """InputError unless ``results_dir/name`` can be the sweep's folder."""
    if not is_plain_name(name):
        raise InputError(f"{source}: 'name' = {name!r} must be a plain name (it names the "
                         f"folder results/<name>; no path separators, not '.' or '..')")
    out_dir = results_dir / name
    if (out_dir / MANIFEST).is_file():
        raise InputError(f"{out_dir}: a single run's directory (it has manifest.json), not "
                         f"the folder of sweep '{name}' ({source}): give the sweep another "
                         f"'name'")
    if out_dir.exists() and not out_dir.is_dir():
        raise InputError(f"{out_dir}: exists and is not a directory (the folder of sweep "
                         f"'{name}', {source})")


def _check_run_id_parts(source: str, grid: dict[str, list[Any]],
                        variants: dict[str, dict[str, Any]]) -> None:
    """InputError for a variant name or grid value that cannot be part of a run id. A run
    id (:func:`_expand`) is ``key=value`` pieces joined by commas: each piece holds an
    ``=``, so the id is never empty, ``.`` or ``..``; without ``/`` and NUL in its pieces it
    is one plain path component, a folder inside ``results/<sweep>/``."""
    def bad(piece: str) -> bool:
        return "/" in piece or "\0" in piece

    for vname in variants:
        if bad(vname):
            raise InputError(f"{source}: variant name {vname!r} cannot name a run folder "
                             f"(no '/' or NUL)")
    for key, values in grid.items():
        for value in values:
            if bad(f"{key.rsplit('.', 1)[-1]}={value}"):
                raise InputError(f"{source}: grid key '{key}': {value!r} cannot be part of a run "
                                 f"folder's name (no '/' or NUL); give such values a name as "
                                 f"[variants.NAME] instead")


def _expand(name: str, spec: SweepFile, results_dir: Path) -> tuple[SweepRun, ...]:
    grid = spec.grid
    variant_items = list(spec.variants.items()) or [("", {})]
    runs = []
    # Seeds outermost: a sweep cut short has run every configuration before repeating any.
    for seed, (vname, bundle), values in itertools.product(
            spec.seeds, variant_items, itertools.product(*grid.values())):
        params: dict[str, Any] = {"variant": vname} if vname else {}
        params |= {key.rsplit(".", 1)[-1]: v for key, v in zip(grid, values, strict=True)}
        params["seed"] = seed
        overrides = [f"{k}={toml_value(v)}" for k, v in (spec.set | bundle).items()]
        overrides += [f"{k}={toml_value(v)}" for k, v in zip(grid, values, strict=True)]
        overrides.append(f"seed={seed}")
        run_id = ",".join(f"{k}={v}" for k, v in params.items())
        runs.append(SweepRun(run_id, params, tuple(overrides), results_dir / name / run_id))
    return tuple(runs)


def check_ray_fits(sweep: Sweep, nodes: Sequence[dict[str, float]]) -> None:
    """InputError when no Ray node (``nodes``: each one's resources) has the CPUs and GPUs
    that the sweep's ``[ray]`` asks per run: Ray would wait for them for ever."""
    for key, asked, resource in (("num_cpus", sweep.num_cpus, "CPU"),
                                 ("num_gpus", sweep.num_gpus, "GPU")):
        most = max((node.get(resource, 0.0) for node in nodes), default=0.0)
        if asked > most:
            raise InputError(f"{sweep.source or sweep.name}: 'ray.{key}' = {asked:g} but no "
                             f"node of the Ray cluster has more than {most:g} {resource}s: no "
                             f"run could ever start (no run was started)")

"""The manifest a run starts with, and the checks a resume makes against it.

A run records, as it starts, its scenario and that scenario's sha256, the package
versions, the machine, where its device speeds came from, the fingerprints of its
inputs (data, trace) and its user plug-ins with their modules' sha256
(:func:`new_manifest`). A resume refuses (InputError, before it writes anything) a
run that is complete or not simfl's, whose scenario was edited, whose plug-ins' code,
data, trace or device speeds changed since: the rounds after the checkpoint would
not continue those before (:func:`resumable`, :func:`check_plugins_unchanged`,
:func:`check_built`)."""

from __future__ import annotations

import hashlib
import json
import os
import platform
import subprocess
import time
from importlib import metadata
from pathlib import Path
from typing import Any

import torch

from simfl.errors import InputError
from simfl.plugins import source_sha256
from simfl.population.build import Population
from simfl.rundir import (
    MANIFEST,
    check_output_path,
    check_simfl_run,
    drop_complete_lock,
    json_default,
    read_manifest,
)
from simfl.runs.build import Built
from simfl.runs.checkpoint import checkpoint_scenario
from simfl.scenario import Scenario, flatten, plugins_of, to_dict

PACKAGES = ("simfl", "torch", "numpy", "simpy", "polars", "pyarrow", "networkx", "seaborn")


def scenario_sha256(scenario: dict[str, Any]) -> str:
    """The sha256 of a scenario as plain data (as a manifest holds it): its JSON with
    sorted keys, so the manifest's copy read back hashes the same."""
    text = json.dumps(scenario, sort_keys=True, default=json_default)
    return hashlib.sha256(text.encode()).hexdigest()


def new_manifest(scenario: Scenario, built: Built) -> dict[str, Any]:
    """The manifest of a run as it starts (status running): what a resume checks it by
    and what a reader needs to tell how it was made."""
    user_plugins = {key: plugin for key, plugin in plugins_of(scenario).items()
                    if not plugin.builtin}
    versions: dict[str, str | None] = {}
    for package in PACKAGES:
        try:
            versions[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            versions[package] = None
    return {
        "status": "running",
        "scenario": to_dict(scenario),
        "scenario_sha256": scenario_sha256(to_dict(scenario)),
        "seed": scenario.seed,
        "versions": {"python": platform.python_version(), **versions},
        "git_commit": _git_commit(),
        **machine(built.device),
        "device_speeds": built.population.devices.speed_origin,
        "inputs": run_inputs(scenario, built),
        # each plug-in's import path and the version of the package providing it
        "plugins": {key: plugin.record() for key, plugin in user_plugins.items()},
        # the sha256 of each one's module file: resume refuses other code
        "plugin_sha256": {key: source_sha256(plugin.path)
                          for key, plugin in user_plugins.items()},
        "started_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }


def machine(device: torch.device) -> dict[str, Any]:
    """Where a session of the run trains: the device's name and the host's CPUs/threads."""
    return {"device": torch.cuda.get_device_name(device) if device.type == "cuda" else str(device),
            "host": {"cpus": os.cpu_count(), "torch_threads": torch.get_num_threads()}}


def _git_commit() -> str | None:
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=Path(__file__).parent,
                             capture_output=True, text=True, timeout=5, check=True)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None


def run_inputs(scenario: Scenario, built: Built) -> dict[str, str | None]:
    """What the run reads besides its scenario: the data's fingerprint (device ids,
    sample counts, labels) and the availability trace's sha256 (None: no trace)."""
    replayed = built.population.trace  # the availability trace the run replays, if any
    trace = None
    if replayed is not None:
        trace = hashlib.sha256(Path(replayed.path).read_bytes()).hexdigest()
    return {"data": built.learner.data.fingerprint(), "trace": trace}


def resumable(run_dir: Path, locked: bool = False,
              built_from: dict[str, Any] | None = None) -> dict[str, Any]:
    """``run_dir``'s manifest, checked for a resume: InputError if the run is complete,
    is not a simfl run holding only what simfl wrote, or its scenario was edited. Under
    the lock (``locked``), also if it is not the run of the scenario the resume built
    (``built_from``: a ``run --overwrite`` replaced it meanwhile); the lock of a run found
    complete goes again (a complete run has no checkpoint folder)."""
    manifest = read_manifest(run_dir)
    if manifest.get("status") == "complete":
        if locked:
            drop_complete_lock(run_dir)
        raise InputError(f"{run_dir}: the run is already complete")
    if not locked:  # its probe file once is enough
        check_output_path(run_dir)
    # resuming rewrites the run's tables around what else is there
    check_simfl_run(run_dir, manifest, ("; nothing to resume", "; move it out before resuming"))
    _check_scenario_unedited(run_dir, manifest)
    if built_from is not None and manifest["scenario"] != built_from:
        raise InputError(f"{run_dir}: another run replaced this one while the resume "
                         "prepared (its manifest holds another scenario now); resume again")
    return manifest


def check_built(run_dir: Path, manifest: dict[str, Any], built: Built,
                inputs: dict[str, str | None]) -> None:
    """InputError when what the resume built differs from what the run started with:
    device speeds from elsewhere, other data or another trace."""
    _check_speed_origin(run_dir, manifest, built.population)
    _check_inputs(run_dir, manifest, inputs)


def _check_speed_origin(run_dir: Path, manifest: dict[str, Any], population: Population) -> None:
    """InputError when the device speeds would come from elsewhere than when the run
    started (``speed_source = "auto"`` follows $SIMFL_DATA_DIR/devices): the replay could
    not retrace the simulated clock. Manifests from before this record are not checked."""
    started, now = manifest.get("device_speeds"), population.devices.speed_origin
    if started is not None and started != now:
        raise InputError(
            f"{run_dir}: the run started with device speeds from {started} but here they "
            f"would come from {now}: resume where $SIMFL_DATA_DIR/devices is as it was "
            "(population.compute.speed_source = 'auto' uses it when present)")


def _check_scenario_unedited(run_dir: Path, manifest: dict[str, Any]) -> None:
    """InputError when the manifest's scenario is not the one the run started with (its
    sha256, recorded at the start, differs): the rounds after the checkpoint would run
    another scenario than those before, under a manifest that names only one. Names the
    keys that differ from the last checkpoint's copy when there is one. Manifests from
    before this record are not checked."""
    recorded = manifest.get("scenario_sha256")
    if recorded is None or recorded == scenario_sha256(manifest["scenario"]):
        return
    started = checkpoint_scenario(run_dir)
    what = "its sha256 differs from the one recorded when the run started"
    if started is not None:  # compared as JSON reads it back (tuples as lists)
        started = json.loads(json.dumps(started, default=json_default))
        now, then = dict(flatten(manifest["scenario"])), dict(flatten(started))
        changed = sorted(set(now) | set(then), key=str)
        what = "; ".join(f"{key} = {now.get(key)!r}, the run started with {then.get(key)!r}"
                         for key in changed if now.get(key) != then.get(key)) or what
    raise InputError(f"{run_dir / MANIFEST}: its scenario was edited after the run "
                     f"started ({what}): a run resumes only with the scenario it started "
                     "with; restore it, or start a new run with the new values")


def check_plugins_unchanged(run_dir: Path, manifest: dict[str, Any],
                            scenario: Scenario) -> None:
    """InputError naming the first user plug-in whose module is not the one the run
    started with (the sha256 of its file, recorded at the start in ``plugin_sha256``,
    differs): the rounds after the checkpoint would run other code than those before.
    Only the module's own file counts, not what it imports. Manifests from before this
    record are not checked (the resume goes on), nor a plug-in whose module had no file."""
    recorded = manifest.get("plugin_sha256") or {}
    for key, plugin in plugins_of(scenario, str(run_dir / MANIFEST)).items():
        then = recorded.get(key)
        if plugin.builtin or then is None:
            continue
        now = source_sha256(plugin.path)
        if now != then:
            where = f" ({plugin.path})" if plugin.path != plugin.name else ""
            raise InputError(f"{run_dir}: plug-in '{key}' = {plugin.name!r}{where} changed "
                             f"since the run started (sha256 of its module's file "
                             f"{then[:12]} then, {str(now)[:12]} now): resume with the code "
                             "it started with, or start a new run")


def _check_inputs(run_dir: Path, manifest: dict[str, Any], now: dict[str, str | None]) -> None:
    """InputError when the data or the trace differ from those the run started with:
    its rounds after the checkpoint would mix two populations. Manifests from before
    this record are not checked."""
    started = manifest.get("inputs") or {}
    for key, where in (("data", "its data (data.path, $SIMFL_DATA_DIR)"),
                       ("trace", "its availability trace (population.availability.trace_path)")):
        if key in started and started[key] != now[key]:
            raise InputError(f"{run_dir}: {where} changed since the run started (sha256 "
                             f"{str(started[key])[:12]} then, {str(now[key])[:12]} now): "
                             "resume with the inputs it started with")

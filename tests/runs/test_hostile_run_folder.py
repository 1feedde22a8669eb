"""A run folder someone else wrote is safe to open: resuming one whose checkpoint
carries a code-running pickle, or whose manifest names a standard-library function as a
plug-in, is refused in one line with nothing executed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

from simfl.cli import main
from simfl.rundir import CHECKPOINT_DIR, STATE_FILE
from simfl.runs.run import scenario_sha256
from tests.test_bad_input import SCENARIO


@pytest.fixture
def stopped(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> Path:
    """A run that failed at round 9 (every update late), with checkpoints at 4 and 8."""
    scenario = tmp_path / "s.toml"
    scenario.write_text(SCENARIO)
    out = tmp_path / "run"
    assert main([str(scenario), "--out", str(out), "--quiet",
                 "--set", "server.deadline_s=0.001"]) == 1
    assert (out / CHECKPOINT_DIR / STATE_FILE).is_file()
    capsys.readouterr()
    return out


def refused(run_dir: Path, capsys: pytest.CaptureFixture[str]) -> str:
    assert main(["resume", str(run_dir), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    return err


@pytest.mark.slow
def test_a_checkpoint_carrying_code_is_refused_and_runs_nothing(
        stopped: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    marker = tmp_path / "ran"

    class Touch:
        def __reduce__(self) -> tuple[Any, ...]:
            return (os.system, (f"touch {marker}",))

    for target in (stopped / CHECKPOINT_DIR / STATE_FILE,
                   stopped / CHECKPOINT_DIR / "journal" / "000000.pt"):
        saved = target.read_bytes()
        torch.save({"format": 4, "learner": Touch()}, target)
        assert "cannot read the checkpoint (UnpicklingError" in refused(stopped, capsys)
        assert not marker.exists()
        target.write_bytes(saved)


@pytest.mark.slow
def test_a_manifest_naming_a_standard_library_function_as_a_rule_is_refused(
        stopped: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for path in (stopped / "manifest.json", stopped / CHECKPOINT_DIR / "progress.json"):
        record = json.loads(path.read_text())  # with its hash, so the edit goes unnoticed
        record["scenario"]["aggregator"]["name"] = "os:system"
        if "scenario_sha256" in record:
            record["scenario_sha256"] = scenario_sha256(record["scenario"])
        path.write_text(json.dumps(record))
    err = refused(stopped, capsys)
    assert "'aggregator.name' = 'os:system'" in err and "standard library" in err


def _name_plugin(run_dir: Path, name: str) -> None:
    """Make ``run_dir``'s manifest and checkpoint name ``name`` as the run's rule, with
    the hashes and plug-in record a real run would have, so only the code is foreign."""
    for path in (run_dir / "manifest.json", run_dir / CHECKPOINT_DIR / "progress.json"):
        record = json.loads(path.read_text())
        record["scenario"]["aggregator"]["name"] = name
        if "scenario_sha256" in record:
            record["scenario_sha256"] = scenario_sha256(record["scenario"])
            record["plugins"] = {"aggregator.name": {"name": name, "path": name,
                                                     "version": "unknown"}}
        path.write_text(json.dumps(record))


@pytest.mark.slow
@pytest.mark.parametrize("where", ["run folder", "working directory"])
def test_a_module_beside_or_inside_the_run_is_never_imported(stopped: Path, tmp_path: Path,
                                                             where: str) -> None:
    """The manifest names ``evil:rule``, whose module sits in the run folder or in the
    folder resume is started from (Python's implicit first path entry): refused in one
    line before anything is imported."""
    marker = tmp_path / "ran"
    folder = stopped if where == "run folder" else stopped.parent
    (folder / "evil.py").write_text(f"open({str(marker)!r}, 'w').close()\n"
                                    "def rule(**kwargs):\n    raise SystemExit(0)\n")
    _name_plugin(stopped, "evil:rule")
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(Path.cwd())}
    done = subprocess.run([sys.executable, "-m", "simfl", "resume", str(stopped), "--quiet"],
                          cwd=folder, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 2, done.stderr
    why = ("holds 'evil.py', which simfl did not write" if where == "run folder"
           else "would be imported from the working directory")
    assert done.stderr.count("\n") == 1 and why in done.stderr
    assert not marker.exists()

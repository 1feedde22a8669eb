"""A run folder someone else wrote is safe to open: resuming one whose checkpoint
carries a code-running pickle, or whose manifest names a standard-library function as a
plug-in, is refused in one line with nothing executed."""

from __future__ import annotations

import json
import os
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

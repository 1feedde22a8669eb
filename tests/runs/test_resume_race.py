"""Two resumes of one stopped run (issue 70): the one that takes the run's lock second
reads the manifest again there, and a run the other finished meanwhile is never opened
again: it exits 2 with one line, and the finished run's files stay byte for byte. The
manifest it writes back is the one read under the lock, and the lock a completing run
removes is taken again on the new file."""

from __future__ import annotations

import hashlib
import json
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import simfl.runs.run
from simfl import rundir
from simfl.rundir import CHECKPOINT_DIR, LOCK_FILE, run_lock, run_locked
from simfl.runs import checkpoint
from simfl.runs.run import scenario_sha256
from simfl.train.learner import Learner
from tests.runs.test_resume import (
    assert_same_files,
    manifest,
    resume,
    write_scenario,
)

COMPLETE = "the run is already complete"
BUSY = "another process is working on this run"
# A resume that, once it has read the manifest and built the run, waits for the file
# "go" in the gate folder (argv[1]) before it takes the run's lock.
GATED = """
import sys, time
from pathlib import Path
import simfl.runs.run as run
from simfl.cli import main
build, gate = run.build_run, Path(sys.argv[1])
def gated(scenario):
    built = build(scenario)
    (gate / "built").touch()
    while not (gate / "go").exists():
        time.sleep(0.01)
    return built
run.build_run = gated
sys.exit(main(sys.argv[2:]))
"""


@pytest.fixture(scope="module")
def scenario(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_scenario(tmp_path_factory.mktemp("scenario"))





def hashes(run_dir: Path) -> dict[str, str]:
    """The sha256 of every file under ``run_dir``, by its path there."""
    return {str(p.relative_to(run_dir)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(run_dir.rglob("*")) if p.is_file()}


def while_building(monkeypatch: pytest.MonkeyPatch, meanwhile: Any) -> None:
    """The first resume calls ``meanwhile()`` once it has read the manifest and built the
    run, before it takes the lock: as another process would, in the window."""
    build, calls = simfl.runs.run.build_run, []

    def building(*args: Any) -> Any:
        built = build(*args)
        calls.append(1)
        if len(calls) == 1:
            meanwhile()
        return built

    monkeypatch.setattr(simfl.runs.run, "build_run", building)


def refused_with(capsys: pytest.CaptureFixture[str], code: int, *named: str) -> None:
    assert code == 2
    err = capsys.readouterr().err
    assert all(name in err for name in named) and len(err.splitlines()) == 1, err


def test_a_resume_that_finds_the_run_finished_under_the_lock_leaves_it_as_it_is(
        out: Path, baseline: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    finished: dict[str, str] = {}

    def other_resume_finishes_it() -> None:
        assert resume(out) == 0
        finished.update(hashes(out))

    while_building(monkeypatch, other_resume_finishes_it)
    capsys.readouterr()
    refused_with(capsys, resume(out), str(out), COMPLETE)
    assert hashes(out) == finished  # byte for byte, and no lock left behind
    assert not (out / CHECKPOINT_DIR).exists()
    assert [s["from_round"] for s in manifest(out)["resumes"]] == [4]  # one did the work
    assert_same_files(out, baseline)


def test_the_manifest_written_back_is_the_one_read_under_the_lock(
        out: Path, baseline: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def other_resume_is_stopped_in_round_5() -> None:
        train = Learner.train

        def interrupting(self: Learner, round_idx: int, client_idx: np.ndarray) -> np.ndarray:
            if round_idx == 5:
                signal.raise_signal(signal.SIGINT)
            return train(self, round_idx, client_idx)

        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(Learner, "train", interrupting)
            patch.setattr(checkpoint, "STOP_GRACE_S", 60.0)
            assert resume(out) == 128 + signal.SIGINT

    while_building(monkeypatch, other_resume_is_stopped_in_round_5)
    assert resume(out) == 0
    # the other session's record stays, and this one went on from its checkpoint
    assert [s["from_round"] for s in manifest(out)["resumes"]] == [4, 6]
    assert_same_files(out, baseline)


def test_a_run_replaced_while_the_resume_built_is_refused(
        out: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    replaced: dict[str, str] = {}

    def replaced_by_another_seed() -> None:  # as by run --overwrite, then a kill
        info = manifest(out)
        info["scenario"]["seed"] += 1
        info["scenario_sha256"] = scenario_sha256(info["scenario"])
        (out / "manifest.json").write_text(json.dumps(info))
        replaced.update(hashes(out))

    while_building(monkeypatch, replaced_by_another_seed)
    monkeypatch.setattr(simfl.runs.run, "load_checkpoint",
                        lambda *args: pytest.fail("the replaced run was opened"))
    capsys.readouterr()
    refused_with(capsys, resume(out), str(out), "another run replaced")
    assert hashes(out) == replaced


def test_a_lock_got_on_a_file_removed_meanwhile_is_taken_again_on_the_new_one(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Opened before a completing run removed its checkpoint folder, locked after."""
    flock, path = rundir.fcntl.flock, tmp_path / CHECKPOINT_DIR / LOCK_FILE
    calls = []

    def removed_first(f: Any, operation: int) -> None:
        calls.append(operation)
        if len(calls) == 1:
            shutil.rmtree(path.parent)
        flock(f, operation)

    monkeypatch.setattr(rundir.fcntl, "flock", removed_first)
    with run_lock(tmp_path):
        assert path.is_file() and run_locked(tmp_path)  # the lock others see is held
    assert len(calls) == 3  # locked twice, then run_locked's look


# ---- two processes ------------------------------------------------------------------------


def simfl_resume(run_dir: Path) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "simfl", "resume", str(run_dir), "--quiet"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


@pytest.mark.slow
def test_a_resume_that_waited_while_another_process_finished_the_run_exits_2(
        out: Path, baseline: Path, tmp_path: Path) -> None:
    gate = tmp_path / "gate"
    gate.mkdir()
    waiting = subprocess.Popen([sys.executable, "-c", GATED, str(gate), "resume", str(out),
                                "--quiet"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True)
    deadline = time.monotonic() + 300
    while not (gate / "built").exists():  # it has read the manifest and built the run
        assert waiting.poll() is None and time.monotonic() < deadline, waiting.communicate()
        time.sleep(0.05)
    other = simfl_resume(out)
    assert other.wait(timeout=300) == 0, other.communicate()
    finished = hashes(out)
    (gate / "go").touch()
    _, err = waiting.communicate(timeout=300)
    assert waiting.returncode == 2 and len(err.splitlines()) == 1 and COMPLETE in err, err
    assert hashes(out) == finished
    assert len(manifest(out)["resumes"]) == 1
    assert_same_files(out, baseline)


@pytest.mark.slow
@pytest.mark.parametrize("delay_s", [1.2, 2.8])
def test_two_resumes_racing_one_does_the_work_the_other_exits_2(
        out: Path, baseline: Path, delay_s: float) -> None:
    """Started ``delay_s`` apart: whichever takes the lock first finishes the run; the
    other finds it busy or complete, exits 2 with one line and changes nothing."""
    first = simfl_resume(out)
    time.sleep(delay_s)
    resumes = [first, simfl_resume(out)]
    done: dict[subprocess.Popen[str], str] = {}
    snapshot: dict[str, str] = {}
    while len(done) < 2:
        for proc in resumes:
            if proc not in done and proc.poll() is not None:
                done[proc] = proc.communicate()[1]
                if proc.returncode == 0:
                    snapshot = hashes(out)
        time.sleep(0.05)
    codes = sorted(proc.returncode for proc in resumes)
    assert codes == [0, 2], done
    (err,) = [err for proc, err in done.items() if proc.returncode == 2]
    assert len(err.splitlines()) == 1 and (COMPLETE in err or BUSY in err), err
    assert hashes(out) == snapshot  # unchanged by the one refused
    assert len(manifest(out)["resumes"]) == 1
    assert_same_files(out, baseline)

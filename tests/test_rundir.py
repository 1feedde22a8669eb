"""A run directory's torch-free reading of a checkpoint's progress: ``progress.json``
beside ``state.pt``, read as JSON, without importing torch or anything it names."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from simfl.errors import InputError
from simfl.rundir import (
    CHECKPOINT_DIR,
    PROGRESS_FILE,
    STATE_FILE,
    checkpoint_progress,
    checkpoint_record,
)

PROGRESS = {"format": 4, "rounds_done": 7, "t_s": 1234.5, "wall_s": 12.25,
            "scenario": {"seed": 3, "server": {"num_rounds": 10},
                         "data": {"splits": [0.5, 0.5], "name": "x"}}}


def _write(run_dir: Path, progress: object, state: bytes = b"committed") -> Path:
    folder = run_dir / CHECKPOINT_DIR
    folder.mkdir(parents=True, exist_ok=True)
    (folder / STATE_FILE).write_bytes(state)  # the commit point: read by checkpoint.py only
    path = folder / PROGRESS_FILE
    path.write_text(json.dumps(progress))
    return path


def test_a_checkpoints_progress_is_read_as_written(tmp_path: Path) -> None:
    _write(tmp_path, PROGRESS)
    assert checkpoint_record(tmp_path) == PROGRESS
    assert checkpoint_progress(tmp_path) == (7, 12.25)


def test_no_checkpoint_is_none_and_an_unreadable_one_is_one_line(tmp_path: Path) -> None:
    assert checkpoint_record(tmp_path) is None and checkpoint_progress(tmp_path) is None
    path = _write(tmp_path, {"rounds_done": 1})  # no wall_s
    with pytest.raises(InputError, match=rf"^{path}: cannot read the checkpoint \(KeyError"):
        checkpoint_progress(tmp_path)
    for garbage in ("", "not json", "[1, 2]", json.dumps(PROGRESS)[:30]):
        path.write_text(garbage)
        with pytest.raises(InputError, match=rf"^{path}: cannot read the checkpoint") as e:
            checkpoint_progress(tmp_path)
        assert "\n" not in str(e.value)
    path.unlink()  # state.pt alone: an older simfl's pickled checkpoint
    with pytest.raises(InputError, match="a checkpoint of an older simfl"):
        checkpoint_record(tmp_path)
    (tmp_path / CHECKPOINT_DIR / STATE_FILE).unlink()
    path.write_text(json.dumps(PROGRESS))  # no commit point: no checkpoint yet
    assert checkpoint_record(tmp_path) is None


def test_reading_progress_and_loading_a_sweep_import_no_torch(tmp_path: Path) -> None:
    _write(tmp_path, PROGRESS)
    code = ("import sys; from pathlib import Path; import simfl.runs.sweep; "
            "from simfl.rundir import checkpoint_progress; "
            f"print(checkpoint_progress(Path({str(tmp_path)!r})), 'torch' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)
    assert done.stdout.split() == ["(7,", "12.25)", "False"], done.stderr

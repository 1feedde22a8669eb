"""A run directory's torch-free reading of a checkpoint's progress: the plain values of
``checkpoint/state.pt`` as torch wrote them, without importing torch or anything the
state names."""

from __future__ import annotations

import subprocess
import sys
from collections import OrderedDict
from pathlib import Path

import numpy as np
import pytest
import torch

from simfl.errors import InputError
from simfl.records import Committed
from simfl.rundir import CHECKPOINT_DIR, STATE_FILE, checkpoint_progress, checkpoint_record

PLAIN = {"format": 3, "rounds_done": 7, "t_s": 1234.5, "wall_s": 12.25,
         "journal_segments": 2, "scenario": {"seed": 3, "server": {"num_rounds": 10},
                                             "data": {"splits": (0.5, 0.5), "name": "x"}},
         "flags": {1, 2}, "none": None, "text": "é", "raw": b"\x00\x01"}


def _write_state(run_dir: Path, state: dict[str, object]) -> Path:
    path = run_dir / CHECKPOINT_DIR / STATE_FILE
    path.parent.mkdir(parents=True)
    torch.save(state, path)
    return path


def test_a_checkpoints_plain_values_are_read_as_torch_wrote_them(tmp_path: Path) -> None:
    learner = {"model": OrderedDict(w=torch.ones(3, 2), b=torch.zeros(2)),
               "aggregator": {"weights": np.arange(4.0), "step": np.float32(0.5)},
               "tables": {"rounds": Committed(num_parts=2, num_rows=10)},
               "dtype": np.dtype("float32"), "device": torch.device("cpu")}
    _write_state(tmp_path, {**PLAIN, "learner": learner, "last_eval": None})
    record = checkpoint_record(tmp_path)
    assert record is not None
    assert {key: record[key] for key in PLAIN} == PLAIN
    assert set(record["learner"]) == set(learner)  # what it holds besides: placeholders
    assert not any(isinstance(v, torch.Tensor | np.ndarray)
                   for v in record["learner"]["model"].values())
    assert checkpoint_progress(tmp_path) == (7, 12.25)


def test_no_checkpoint_is_none_and_an_unreadable_one_is_one_line(tmp_path: Path) -> None:
    assert checkpoint_record(tmp_path) is None and checkpoint_progress(tmp_path) is None
    path = _write_state(tmp_path, {"rounds_done": 1})  # no wall_s
    with pytest.raises(InputError, match=rf"^{path}: cannot read the checkpoint \(KeyError"):
        checkpoint_progress(tmp_path)
    for garbage in (b"", b"not a zip", path.read_bytes()[:100]):
        path.write_bytes(garbage)
        with pytest.raises(InputError, match=rf"^{path}: cannot read the checkpoint") as e:
            checkpoint_progress(tmp_path)
        assert "\n" not in str(e.value)


def test_reading_progress_and_loading_a_sweep_import_no_torch(tmp_path: Path) -> None:
    _write_state(tmp_path, {**PLAIN, "learner": {"w": torch.ones(2)}})
    code = ("import sys; from pathlib import Path; import simfl.runs.sweep; "
            "from simfl.rundir import checkpoint_progress; "
            f"print(checkpoint_progress(Path({str(tmp_path)!r})), 'torch' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)
    assert done.stdout.split() == ["(7,", "12.25)", "False"], done.stderr

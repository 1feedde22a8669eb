"""Checkpoints as plain data (simfl.runs.plain): every value a checkpoint holds comes back
equal and of the same type through torch.load(weights_only=True); what it cannot hold is
refused on the way in, and a tree it cannot have made on the way out."""

from __future__ import annotations

import io
import os
import pickle
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from simfl.aggregate.base import Selection
from simfl.quantile.secagg import LOSS_REPORT, Exchange
from simfl.records import Committed
from simfl.runs.plain import decode, encode
from simfl.train.evaluate import CohortEval


def through_torch(value: Any) -> Any:
    buffer = io.BytesIO()
    torch.save(encode(value), buffer)
    buffer.seek(0)
    return decode(torch.load(buffer, weights_only=True))


def same(a: Any, b: Any) -> bool:
    if type(a) is not type(b):
        return False
    if isinstance(a, np.ndarray):
        nan = a.dtype.kind == "f"
        return a.dtype == b.dtype and a.shape == b.shape and bool(
            np.array_equal(a, b, equal_nan=nan))
    if isinstance(a, torch.Tensor):
        return a.dtype == b.dtype and bool(torch.equal(a, b))
    if isinstance(a, list | tuple):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict):
        return list(a) == list(b) and all(same(a[k], b[k]) for k in a)
    if hasattr(a, "__dataclass_fields__"):
        return all(same(getattr(a, f), getattr(b, f)) for f in a.__dataclass_fields__)
    return bool(a == b)


JOURNAL = [  # (method, answer) entries as the journal records them
    ("selection_weights", None),
    ("report_losses", np.array([0.5, 1.25, np.nan])),
    ("select", (Selection(np.array([True, False]), 0.75, (LOSS_REPORT, Exchange(8, 4, "secagg")),
                          (("ipw", (LOSS_REPORT,)),)),
                {"round": 3, "estimator": ["a", "b"], "estimate": np.array([1.0, 2.0])})),
    ("train", np.array([0.1, 0.2], dtype=np.float32)),
    ("train_from", (np.array([0.3]), np.array([np.nan]))),
]


def test_the_journal_and_a_state_come_back_equal_and_of_the_same_types() -> None:
    state = {"format": 4, "rounds_done": np.int64(4), "t_s": np.float64(2400.5), "wall_s": 1.5,
             "learner": {"params": torch.arange(6.0).reshape(2, 3), "version": 4,
                         "aggregator_state": None, "updates": {3: torch.ones(2)},
                         "estimators": {"eta": np.float32(0.25), "bits": np.array([True])}},
             "tables": {"rounds": Committed(2, 10)}, "journal_segments": 2,
             "last_eval": {"test": CohortEval(np.ones(2), np.zeros(2), np.array([3, 4]))},
             "scenario": {"seed": 3, "splits": (0.5, 0.5)}}
    assert same(through_torch(JOURNAL), JOURNAL)
    assert same(through_torch(state), state)


class _Runs:
    def __reduce__(self) -> tuple[Any, ...]:
        return (os.system, ("true",))


@pytest.mark.parametrize("value", [_Runs(), {1, 2}, np.array(["a"]), b"bytes", object()])
def test_what_a_checkpoint_cannot_hold_is_refused_on_the_way_in(value: object) -> None:
    with pytest.raises(TypeError, match="a checkpoint holds no"):
        encode({"x": [value]})


@pytest.mark.parametrize("tree", [{"__type__": "Popen", "fields": {}},
                                  {"__ndarray__": torch.ones(1), "dtype": "object"},
                                  {"__call__": 1}])
def test_a_tree_it_cannot_have_made_is_refused_on_the_way_out(tree: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        decode(tree)


def test_a_file_carrying_code_is_refused_by_the_loader(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    path = tmp_path / "state.pt"

    class Touch:
        def __reduce__(self) -> tuple[Any, ...]:
            return (os.system, (f"touch {marker}",))

    torch.save({"learner": Touch()}, path)
    with pytest.raises(pickle.UnpicklingError):
        torch.load(path, weights_only=True)
    assert not marker.exists()

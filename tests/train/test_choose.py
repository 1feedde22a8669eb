"""train.backend = "auto": measured once per cohort size class, recorded, kept on resume."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

import simfl.train.batched
from simfl.cli import main
from simfl.errors import InputError
from simfl.runs import checkpoint
from simfl.train.batched import TrainHParams, train_cohort
from simfl.train.choose import LOOP_MARGIN, BackendChoice, size_class
from simfl.train.learner import Learner
from simfl.train.models import build_model, initial_params
from tests.conftest import make_cohort


def test_size_classes_are_powers_of_two() -> None:
    assert [size_class(k) for k in (1, 2, 3, 7, 8, 100, 128)] == [
        "1-1", "2-3", "2-3", "4-7", "8-15", "64-127", "128-255"]


def test_pick_measures_a_size_class_once_and_keeps_the_loop_only_when_clearly_faster() -> None:
    choice, calls, told = BackendChoice(), [], []
    choice.on_choice = lambda: told.append(len(choice.choices))

    def predict(seconds: dict[str, float]):  # noqa: ANN202
        return lambda: (calls.append(seconds), (seconds, "stacked"))[1]

    # the fastest batched candidate (the whole cohort) beats the loop's 1.0 × margin
    assert LOOP_MARGIN == 1.1
    near = {"loop": 1.0, "batched@18": 1.3, "batched@all": 1.09}
    assert choice.pick(100, predict(near)) == ("batched", 0)
    assert choice.pick(70, predict({"loop": 0.0, "batched@all": 1.0})) == ("batched", 0)
    assert choice.pick(5, predict({"loop": 1.0, "batched@3": 1.11})) == ("loop", 0)
    assert choice.pick(20, predict({"loop": 9.0, "batched@4": 1.0, "batched@16": 2.0})) == (
        "batched", 4)
    assert calls == [near, {"loop": 1.0, "batched@3": 1.11},
                     {"loop": 9.0, "batched@4": 1.0, "batched@16": 2.0}]
    assert told == [1, 2, 3]
    assert choice.record()["64-127"] == {"backend": "batched", "chunk": 0, "kernel": "stacked",
                                         "clients": 100, "predicted_s": near}


def test_restore_takes_back_a_record_and_refuses_another_thing() -> None:
    made = BackendChoice()
    made.pick(6, lambda: ({"loop": 1.0, "batched@all": 2.0}, "linear"))
    again = BackendChoice()
    again.restore(json.loads(json.dumps(made.record())), "m.json")  # through the manifest
    assert again.record() == made.record()
    again.restore(None, "m.json")  # a run that chose nothing yet
    assert again.record() == made.record()
    for bad in ([1], {"4-7": {"backend": "vmap", "chunk": 0}}, {"4-7": {"backend": "loop"}}):
        with pytest.raises(InputError, match="m.json: 'train_backend' must map"):
            BackendChoice().restore(bad, "m.json")


def mlp() -> nn.Module:
    return nn.Sequential(nn.Flatten(), nn.Linear(12, 8), nn.ReLU(), nn.Linear(8, 4))


def test_auto_trains_as_the_candidate_it_chose(monkeypatch: pytest.MonkeyPatch) -> None:
    """The candidates: the loop, chunks of the CPU budget's clients, of a quarter and of
    four times as many; auto's update is bit for bit the chosen backend's with the chosen
    chunk."""
    model, data = mlp(), make_cohort([5, 9, 30, 2, 17, 8, 11, 4, 6, 1, 13, 20], (12,), 4)
    params = initial_params(model, seed=0, dtype=torch.float64)
    monkeypatch.setattr(simfl.train.batched, "CPU_CHUNK_BYTES", params.numel() * 8 * 5)
    hp, seeds, choice = TrainHParams(1, 4, 0.1, 1e-3, 0.1, "auto"), list(range(12)), BackendChoice()
    auto = train_cohort(model, params, data, hp, seeds, choice)
    (chosen,) = choice.record().values()
    assert set(chosen["predicted_s"]) == {"loop", "batched@1", "batched@5", "batched@all"}
    assert chosen["kernel"] == "mlp" and chosen["clients"] == 12
    forced = TrainHParams(1, 4, 0.1, 1e-3, 0.1, chosen["backend"], chunk=chosen["chunk"])
    assert torch.equal(auto.deltas, train_cohort(model, params, data, forced, seeds).deltas)


def test_a_restored_choice_is_used_without_measuring(monkeypatch: pytest.MonkeyPatch) -> None:
    model, data = mlp(), make_cohort([5, 9, 30, 2, 17], (12,), 4)
    params = initial_params(model, seed=0, dtype=torch.float64)
    choice = BackendChoice()
    choice.restore({"4-7": {"backend": "loop", "chunk": 0}}, "m.json")

    def never(*args: object) -> None:
        raise AssertionError("measured again")

    monkeypatch.setattr(simfl.train.batched, "_predict", never)
    hp = TrainHParams(1, 4, 0.1)
    got = train_cohort(model, params, data, hp, range(5), choice).deltas
    loop = TrainHParams(1, 4, 0.1, backend="loop")
    assert torch.equal(got, train_cohort(model, params, data, loop, range(5)).deltas)


def test_one_client_trains_with_the_loop_unmeasured(monkeypatch: pytest.MonkeyPatch) -> None:
    """Nothing to batch: the loop, no choice recorded (nor a measurement to flip)."""
    model, data = mlp(), make_cohort([9], (12,), 4)
    params = initial_params(model, seed=0, dtype=torch.float64)

    def never(*args: object) -> None:
        raise AssertionError("measured")

    monkeypatch.setattr(simfl.train.batched, "_predict", never)
    choice = BackendChoice()
    got = train_cohort(model, params, data, TrainHParams(1, 4, 0.1), [3], choice).deltas
    loop = TrainHParams(1, 4, 0.1, backend="loop")
    assert torch.equal(got, train_cohort(model, params, data, loop, [3]).deltas)
    assert choice.record() == {}


SCENARIO = """
seed = 4
[data.synthetic]
num_clients = 30
[model]
name = "choosemodels:mlp"
[train]
lr = 0.05
[server]
num_rounds = 6
clients_per_round = 6
[eval]
every = 6
[run]
checkpoint_every = 2
"""


def manifest(run_dir: Path) -> dict:
    return dict(json.loads((run_dir / "manifest.json").read_text()))


def test_a_run_records_auto_s_choices_and_a_resume_keeps_them(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The manifest's train_backend holds a choice per cohort size class met (with the
    predicted seconds); a resume trains with the recorded choices, measuring nothing."""
    scenario, out = tmp_path / "s.toml", tmp_path / "run"
    scenario.write_text(SCENARIO)
    # a model auto measures (the linear model's closed form is taken without measuring)
    (tmp_path / "choosemodels.py").write_text(
        "from torch import nn\n"
        "def mlp(input_shape, num_classes):\n"
        "    return nn.Sequential(nn.Flatten(), nn.Linear(input_shape[0], 16), nn.ReLU(),\n"
        "                         nn.Linear(16, num_classes))\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    train = Learner.train

    def interrupting(self: Learner, round_idx: int, client_idx: np.ndarray) -> np.ndarray:
        if round_idx == 3:
            os.kill(os.getpid(), signal.SIGINT)
        return train(self, round_idx, client_idx)

    with monkeypatch.context() as patch:
        patch.setattr(Learner, "train", interrupting)
        patch.setattr(checkpoint, "STOP_GRACE_S", 60.0)
        assert main([str(scenario), "--out", str(out), "--quiet"]) == 128 + signal.SIGINT
    (chosen,) = manifest(out)["train_backend"].values()  # every round trains 6 devices
    assert manifest(out)["train_backend"] == {"4-7": chosen}
    assert chosen["kernel"] == "mlp"  # a ReLU MLP: the hand-written backward pass
    assert "loop" in chosen["predicted_s"] and len(chosen["predicted_s"]) >= 2
    forced = {key: {"backend": "loop", "chunk": 0, "note": "edited"}
              for key in ("1-1", "2-3", "4-7", "8-15")}
    written = manifest(out)
    written["train_backend"] = forced
    (out / "manifest.json").write_text(json.dumps(written))

    def never(*args: object) -> None:
        raise AssertionError("measured again")

    monkeypatch.setattr(simfl.train.batched, "_predict", never)
    assert main(["resume", str(out), "--quiet"]) == 0
    assert manifest(out)["status"] == "complete" and manifest(out)["train_backend"] == forced


def test_the_linear_model_is_batched_without_measuring(monkeypatch: pytest.MonkeyPatch) -> None:
    """Its closed form is always the faster, so auto does not time it: its runs are the
    same bytes on every machine."""
    def never(*args: object) -> None:
        raise AssertionError("measured")

    monkeypatch.setattr(simfl.train.batched, "_predict", never)
    model, data = build_model("linear", (12,), 4), make_cohort([5, 9, 30, 2, 17], (12,), 4)
    params = initial_params(model, seed=0, dtype=torch.float64)
    got = train_cohort(model, params, data, TrainHParams(1, 4, 0.1), range(5)).deltas
    batched = TrainHParams(1, 4, 0.1, backend="batched")
    assert torch.equal(got, train_cohort(model, params, data, batched, range(5)).deltas)

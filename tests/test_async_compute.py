"""bench/async_compute.py times the numerics the server asks for, in both modes."""

from __future__ import annotations

import pytest

from simfl.train.local import LocalWork
from tests.bench_scripts import bench_module
from tests.conftest import requires_data


@requires_data
@pytest.mark.parametrize("mode", ["sync", "async"])
@pytest.mark.slow
def test_the_timers_count_every_training_and_loss_report(mode: str) -> None:
    bench = bench_module("async_compute")
    result = bench.measure(mode, "deltafl", rounds=2)
    assert result["trained"] >= result["aggregated"] > 0
    assert result["train_s"] > 0 and result["losses_s"] > 0  # Δ-FL asks for F_k(w_v)
    if mode == "sync":
        assert result["train_calls"] == 2  # one batched call a round
    fedavg = bench.measure(mode, "fedavg", rounds=2)
    assert fedavg["losses_s"] == 0  # FedAvg needs no loss report
    assert LocalWork.train.__name__ == "train"  # the wrappers are undone

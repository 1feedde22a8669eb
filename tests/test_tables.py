"""The tables join as docs/design.md §8 ("Joining the tables") says, on real runs: round
keys, sent bytes, the driving threshold, and every message that would go on the wire in
comm.parquet (shadowing estimators' marked, the loss report counted)."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest

import simfl
from simfl.quantile.secagg import LOSS_REPORT
from simfl.tables import sent

pytestmark = pytest.mark.slow  # two whole runs

SCENARIO = {
    "data": {"dataset": "synthetic", "synthetic": {"num_clients": 30}},
    "model": {"name": "linear"},
    "train": {"lr": 0.05},
    "aggregator": {"name": "deltafl", "theta": 0.5},
    "estimator": {"name": "cohort_exact", "bias_every": 2,
                  "shadow": ["secure_mm", "secure_bisection", "tracking", "ipw"]},
    "server": {"num_rounds": 4, "clients_per_round": 5},
    "eval": {"every": 2},
}
IN_CLEAR = {"cohort_exact": True, "ipw": True, "secure_mm": False, "secure_bisection": False,
            "tracking": False}


@pytest.fixture(scope="module", params=["cohort_exact", "secure_bisection"])
def run(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> simfl.Run:
    scenario = simfl.load_scenario(SCENARIO, {"estimator.name": request.param})
    return simfl.simulate(scenario, tmp_path_factory.mktemp(request.param) / "run")


def test_rounds_bytes_are_the_sums_of_the_sent_messages(run: simfl.Run) -> None:
    by_round = (sent(run.comm).group_by("round", "direction").agg(pl.col("bytes").sum())
                .pivot("direction", index="round", values="bytes").sort("round"))
    rounds = run.rounds.sort("round")
    assert by_round["round"].to_list() == rounds["round"].to_list()
    np.testing.assert_array_equal(by_round["down"], rounds["bytes_down"])
    np.testing.assert_array_equal(by_round["up"], rounds["bytes_up"])
    per_device = (sent(run.comm).group_by("round", "client_idx", "direction")
                  .agg(pl.col("bytes").sum())
                  .pivot("direction", index=["round", "client_idx"], values="bytes"))
    clients = run.clients.join(per_device, on=["round", "client_idx"], how="left")
    np.testing.assert_array_equal(clients["bytes_up"], clients["up"].fill_null(0))


def test_eval_round_counts_rounds_completed(run: simfl.Run) -> None:
    """eval.round = r + 1 after round r: the last evaluation saw every round's bytes."""
    assert sorted(set(run.eval["round"])) == [0, 2, 4]
    table = run.tail_vs_bytes()
    assert table["round"].to_list() == [0, 2, 4]
    total = int(run.rounds["bytes_down"].sum() + run.rounds["bytes_up"].sum())
    first_two = run.rounds.filter(pl.col("round") < 2)
    assert table["bytes_cum"].to_list() == [
        0, int(first_two["bytes_down"].sum() + first_two["bytes_up"].sum()), total]
    final = run.eval.filter((pl.col("round") == 4) & (pl.col("split") == "test"))
    assert table["p90"][-1] == pytest.approx(float(np.quantile(final["error"], 0.9)))


def test_quantile_estimate_is_the_driving_rows_estimate(run: simfl.Run) -> None:
    driver = run.bias.filter(pl.col("driver")).sort("round")
    np.testing.assert_array_equal(run.rounds.sort("round")["quantile_estimate"],
                                  driver["estimate"])


def test_every_estimators_messages_are_in_comm(run: simfl.Run) -> None:
    """Each estimator's protocol_bytes per device are its comm rows: the driver's sent
    ones, a shadow's marked with its name, plus the loss report the driver's protocol
    already sent when both read losses in the clear."""
    driver = run.manifest["scenario"]["estimator"]["name"]
    comm = run.comm
    reporters = run.clients.filter(pl.col("loss_reported").is_not_null())
    for row in run.bias.iter_rows(named=True):
        name, rnd = row["estimator"], row["round"]
        devices = reporters.filter(pl.col("round") == rnd)["client_idx"]
        if name == driver:
            mine = sent(comm).filter((pl.col("round") == rnd)
                                     & ~pl.col("kind").is_in(["model", "update"]))
        else:
            mine = comm.filter((pl.col("round") == rnd) & (pl.col("shadow") == name))
            assert mine["t_start_s"].is_null().all()
        shared = LOSS_REPORT.up_bytes if (name != driver and IN_CLEAR[name]
                                          and IN_CLEAR[driver]) else 0
        per_device = mine.group_by("client_idx").agg(pl.col("bytes").sum())
        if shared == row["protocol_bytes"]:
            assert per_device.height == 0, name
            continue
        assert sorted(per_device["client_idx"]) == sorted(devices), (name, rnd)
        assert (per_device["bytes"] + shared == row["protocol_bytes"]).all(), (name, rnd)


def test_the_loss_report_counts_as_protocol_bytes(run: simfl.Run) -> None:
    bias = run.bias
    for name, clear in IN_CLEAR.items():
        cost = bias.filter(pl.col("estimator") == name)["protocol_bytes"]
        if clear:
            assert (cost == LOSS_REPORT.up_bytes).all(), name
        else:
            assert (cost > LOSS_REPORT.up_bytes).all(), name


def test_devices_join_every_training_device(run: simfl.Run) -> None:
    joined = run.clients.join(run.devices, on="client_idx", how="left")
    assert joined["region"].null_count() == 0
    assert (joined["client_id"] == joined["client_id_right"]).all()

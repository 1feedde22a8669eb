"""The asynchronous (FedBuff) server: hand-computed timelines, sync equivalence, dropouts."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import polars as pl
import pytest
import simpy
import torch

from simfl.aggregate import make_aggregator
from simfl.data import load_data
from simfl.plugins import AGGREGATORS
from simfl.population import always_online
from simfl.population.availability import Availability, from_intervals
from simfl.population.network import NetworkPaths
from simfl.records import Recorder
from simfl.rng import Streams
from simfl.scenario import (
    AggregatorConfig,
    DataConfig,
    EvalConfig,
    ServerConfig,
    SyntheticConfig,
    TrainConfig,
)
from simfl.sim import interface
from simfl.sim.async_server import AsyncLearnerLike, async_server, staleness_weight
from simfl.sim.health import Health, RunStalled
from simfl.sim.links import LinkSharing
from simfl.sim.server import LearnerLike, sync_server
from simfl.sim.tasks import Fleet, Wiring
from simfl.tables import sent
from simfl.train import build_model, initial_params
from simfl.train.learner import AsyncLearner
from simfl.train.local import LocalWork
from tests.sim.test_server import FakeLearner, paths


@dataclass
class FakeAsyncLearner(FakeLearner):
    """Bookkeeping of what the async server asks: trained groups, buffers, releases."""

    trained: list[tuple[int, list[int]]] = field(default_factory=list)
    buffers: list[tuple[list[int], list[int], list[float]]] = field(default_factory=list)
    discarded: list[tuple[int, int]] = field(default_factory=list)
    forgotten: list[int] = field(default_factory=list)

    def train_from(self, version: int, client_idx: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        self.trained.append((version, client_idx.tolist()))
        return np.zeros(len(client_idx)), client_idx.astype(float)

    def aggregate_buffer(self, client_idx: np.ndarray, versions: np.ndarray,
                         losses: np.ndarray, scales: np.ndarray) -> None:
        self.buffers.append((client_idx.tolist(), versions.tolist(), scales.tolist()))

    def discard(self, versions: np.ndarray, client_idx: np.ndarray) -> None:
        self.discarded += list(zip(versions.tolist(), client_idx.tolist(), strict=True))

    def forget(self, version: int) -> None:
        self.forgotten.append(version)


def simulate(tmp_path: Path, cfg: ServerConfig, availability: Availability,
             net_paths: NetworkPaths, learner: AsyncLearnerLike,
             train_s_per_sample: np.ndarray) -> dict[str, pl.DataFrame]:
    env = simpy.Environment()
    recorder = Recorder(tmp_path)
    fleet = Fleet(availability, train_s_per_sample, np.zeros(availability.num_devices), 1)
    wiring = Wiring(env, fleet, LinkSharing(env, net_paths), recorder, Streams(0),
                    Health(0, 1.0))
    env.process(async_server(wiring, cfg, learner, lambda r, t: None))
    env.run()
    recorder.merge()
    return {t: pl.read_parquet(tmp_path / f"{t}.parquet") for t in ("rounds", "clients", "comm")}


def toy(tmp_path: Path, **server: object) -> tuple[dict[str, pl.DataFrame], FakeAsyncLearner]:
    # Three devices, always online: 1000 B down and up at 1000 B/s (1 s each), compute
    # 10 samples x 0.1 / 0.3 / 0.5 s: tasks of 3, 5 and 7 s. All three are kept busy.
    cfg = ServerConfig(mode="async", num_rounds=5, clients_per_round=3, buffer_size=1,
                       staleness="polynomial", staleness_a=1.0, **server)  # type: ignore[arg-type]
    learner = FakeAsyncLearner(needs_losses=False)
    tables = simulate(tmp_path, cfg, always_online(np.zeros(3, np.int64), 1),
                      paths([1000] * 3, [1000] * 3), learner, np.array([0.1, 0.3, 0.5]))
    return tables, learner


def rows(clients: pl.DataFrame) -> list[tuple[int, int, int, int, str]]:
    return list(clients.select("round", "client_idx", "model_version", "staleness",
                               "status").iter_rows())


def test_staleness_and_arrival_order_match_the_hand_computed_timeline(tmp_path: Path) -> None:
    # t=0 all start from v0. t=3 d0 arrives (tau 0): update -> v1, d0 restarts from v1
    # (ends 6). t=5 d1 (v0, tau 1) -> v2, d1 restarts (ends 10). t=6 d0 (v1, tau 1) -> v3,
    # d0 restarts (ends 9). t=7 d2 (v0, tau 3) -> v4, restarts (ends 14). t=9 d0 (v3,
    # tau 1) -> v5, the last update. d1 (v2) at 10 and d2 (v4) at 14 are late.
    tables, learner = toy(tmp_path)
    rounds, clients = tables["rounds"], tables["clients"]
    np.testing.assert_array_equal(rounds["t_end_s"], [3.0, 5.0, 6.0, 7.0, 9.0])
    np.testing.assert_array_equal(rounds["t_start_s"], [0.0, 3.0, 5.0, 6.0, 7.0])
    assert rows(clients) == [(0, 0, 0, 0, "aggregated"), (1, 1, 0, 1, "aggregated"),
                             (2, 0, 1, 1, "aggregated"), (3, 2, 0, 3, "aggregated"),
                             (4, 0, 3, 1, "aggregated"), (5, 1, 2, 3, "late"),
                             (5, 2, 4, 1, "late")]
    np.testing.assert_array_equal(clients["t_dispatch_s"], [0, 0, 3, 0, 6, 5, 7])
    np.testing.assert_array_equal(clients["t_done_s"], [3, 5, 6, 7, 9, 10, 14])
    assert rounds["num_selected"].to_list() == [3, 1, 1, 1, 1]
    # s(tau) = 1 / (1 + tau) (polynomial, a = 1)
    assert [b[2] for b in learner.buffers] == [[1.0], [0.5], [0.5], [0.25], [0.5]]
    assert [(b[0], b[1]) for b in learner.buffers] == [([0], [0]), ([1], [0]), ([0], [1]),
                                                       ([2], [0]), ([0], [3])]
    # v0's three devices are trained in one call at the first arrival; the late ones never
    assert learner.trained == [(0, [0, 1, 2]), (1, [0]), (3, [0])]
    # an old version is released once no task in flight from it awaits training
    assert learner.forgotten == [0, 1, 3, 2, 4]
    # every byte is a message, and each task moved one model down and one update up
    assert tables["comm"]["bytes"].sum() == 7 * 2000
    assert rounds["bytes_up"].to_list() == [1000] * 5


def test_updates_beyond_max_staleness_are_dropped(tmp_path: Path) -> None:
    # As above until t=7, where d2 (v0, tau 3 > 2) is stale: no update, d2 restarts from v3
    # (ends 14). t=9 d0 (v3, tau 0) -> v4, restarts (ends 12). t=10 d1 (v2, tau 2) -> v5.
    tables, learner = toy(tmp_path, max_staleness=2)
    assert rows(tables["clients"]) == [
        (0, 0, 0, 0, "aggregated"), (1, 1, 0, 1, "aggregated"), (2, 0, 1, 1, "aggregated"),
        (3, 2, 0, 3, "stale"), (3, 0, 3, 0, "aggregated"), (4, 1, 2, 2, "aggregated"),
        (5, 0, 4, 1, "late"), (5, 2, 3, 2, "late")]
    np.testing.assert_array_equal(tables["rounds"]["t_end_s"], [3.0, 5.0, 6.0, 9.0, 10.0])
    assert (0, 2) in learner.discarded  # the stale update is never aggregated
    assert all(2 not in b[0] or b[1] != [0] for b in learner.buffers)


def test_devices_that_go_offline_mid_task_never_contribute(tmp_path: Path) -> None:
    # 1 s down, compute 10 samples x 0.1 s (device 2: x 0.2 s), 1 s up. Device 1 leaves at
    # 0.5 s, before its compute alone could end: certain to drop, it is not even trained.
    # Device 2 leaves at 3.5 s, during its upload (3 to 4 s): trained with device 0 in one
    # call when device 0 arrives at 3 s, but dropped. Both come back later (3 s and 4 s).
    availability = from_intervals(
        np.array([0, 1, 1, 2, 2]), np.array([0.0, 0.0, 3.0, 0.0, 4.0]),
        np.array([100.0, 0.5, 100.0, 3.5, 100.0]), np.zeros(3, np.int64), 1, horizon_s=100.0)
    cfg = ServerConfig(mode="async", num_rounds=3, clients_per_round=3, buffer_size=1)
    learner = FakeAsyncLearner(needs_losses=False)
    tables = simulate(tmp_path, cfg, availability, paths([1000] * 3, [1000] * 3), learner,
                      np.array([0.1, 0.1, 0.2]))
    clients = tables["clients"]
    dropped = clients.filter(pl.col("status") == "dropped").sort("client_idx")
    assert dropped["client_idx"].to_list() == [1, 2]
    np.testing.assert_array_equal(dropped["t_done_s"], [0.5, 3.5])  # when they left
    assert learner.trained[0] == (0, [0, 2])
    assert (0, 2) in learner.discarded
    aggregated = [(k, v) for b in learner.buffers for k, v in zip(b[0], b[1], strict=True)]
    assert sorted(aggregated) == [(0, 0), (0, 1), (1, 1)]  # (device, version)
    assert clients.filter(pl.col("status") == "late")["client_idx"].to_list() == [2]


def test_staleness_weights() -> None:
    # by hand: polynomial (1 + τ)^-a with a = 1/2 at τ = 0, 3, 8, 15 is 1, 1/2, 1/3, 1/4;
    # hinge with a = 2, b = 3 is 1 up to τ = 3, then 1 / (2 (τ − 3) + 1): 1/3 at 4, 1/7 at 6
    cfg = ServerConfig(mode="async", staleness="polynomial", staleness_a=0.5)
    np.testing.assert_allclose(staleness_weight(cfg, np.array([0, 3, 8, 15])),
                               [1, 1 / 2, 1 / 3, 1 / 4], rtol=1e-15)
    hinge = ServerConfig(mode="async", staleness="hinge", staleness_a=2.0, staleness_b=3.0)
    np.testing.assert_allclose(staleness_weight(hinge, np.array([0, 1, 3, 4, 6])),
                               [1, 1, 1, 1 / 3, 1 / 7], rtol=1e-15)
    np.testing.assert_array_equal(staleness_weight(ServerConfig(mode="async"),
                                                   np.array([0, 5])), [1.0, 1.0])


# ---- async reproduces sync FedAvg -----------------------------------------------------------


def real_learner(seed: int, rule: AggregatorConfig | None = None) -> AsyncLearner:
    streams = Streams(seed)
    data = load_data(DataConfig(synthetic=SyntheticConfig(num_clients=80, shared_model=3.0)),
                     streams)
    model = build_model("linear", data.input_shape, data.num_classes)
    params = initial_params(model, streams.seed("init"), torch.float64)
    work = LocalWork(model, data, TrainConfig(lr=0.2, dtype="float64"), 1e-3,
                     EvalConfig().batch_size, streams)
    return AsyncLearner(work, params, make_aggregator(rule or AggregatorConfig(name="fedavg")))


def run_server(server: object, cfg: ServerConfig, learner: AsyncLearner,
               tmp_path: Path) -> pl.DataFrame:
    """Every task takes exactly as long: model down and up at 1e5 B/s and no compute time
    (c / n_k * n_k is not exactly c for every client size n_k)."""
    n = learner.data.train.num_clients
    env = simpy.Environment()
    recorder = Recorder(tmp_path)
    fleet = Fleet(always_online(np.zeros(n, np.int64), 1), np.zeros(n), np.zeros(n), 1)
    wiring = Wiring(env, fleet, LinkSharing(env, paths([1e5] * n, [1e5] * n)), recorder,
                    Streams(5), Health(0, 1.0))
    env.process(server(wiring, cfg, learner, lambda r, t: None))  # type: ignore[operator]
    env.run()
    recorder.merge()
    return pl.read_parquet(tmp_path / "clients.parquet")


def test_async_with_equal_times_and_constant_weights_is_sync_fedavg(tmp_path: Path) -> None:
    # buffer = concurrency = clients_per_round, equal task times, s = 1, server lr 1: each
    # buffer is a sync round's cohort, drawn from the same streams; same model, bit for bit.
    sync_cfg = ServerConfig(num_rounds=6, clients_per_round=5)
    sync, async_ = real_learner(1), real_learner(1)
    sync_clients = run_server(sync_server, sync_cfg, sync, tmp_path / "sync")
    async_clients = run_server(async_server, ServerConfig(
        mode="async", num_rounds=6, clients_per_round=5, concurrency=5, buffer_size=5),
        async_, tmp_path / "async")
    assert torch.equal(sync.model.params, async_.model.params)
    assert not torch.equal(sync.model.params, real_learner(1).model.params)  # it did train
    key = ["round", "client_idx", "status", "t_dispatch_s", "t_done_s", "train_loss"]
    assert async_clients.filter(pl.col("status") != "late").select(key).equals(
        sync_clients.select(key))
    assert (async_clients["staleness"] == 0).all()
    assert sync_clients["model_version"].to_list() == sync_clients["round"].to_list()


def test_results_do_not_depend_on_how_clients_are_grouped() -> None:
    """A client's update from a version is the same trained alone or in a group."""
    learner = real_learner(2)
    clients = np.array([3, 5, 8])
    together = learner.train_from(0, clients)
    deltas = learner.model.updates.take(np.zeros(3, np.int64), clients)
    assert len(learner.model.updates) == 0
    alone = real_learner(2)
    for i, k in enumerate(clients):
        train_loss, _ = alone.train_from(0, np.array([k]))
        np.testing.assert_allclose(train_loss, together[0][i], rtol=1e-12)
        torch.testing.assert_close(alone.model.updates.take(np.array([0]), np.array([k]))[0],
                                   deltas[i], rtol=1e-10, atol=1e-12)


def test_aggregate_buffer_weights_by_samples_and_scales_from_kept_versions() -> None:
    learner = real_learner(3)
    w0 = learner.model.params.clone()
    d1, d2 = learner.work.train(w0, 0, np.array([1, 2]), 0.0)[0]
    learner.train_from(0, np.array([1, 2]))
    nan = np.array([np.nan])
    learner.aggregate_buffer(np.array([1]), np.array([0]), nan, np.array([1.0]))
    assert learner.model.version == 1
    torch.testing.assert_close(learner.model.params, w0 + d1)
    w1 = learner.model.params
    (d4,) = learner.work.train(w1, 1, np.array([4]), 0.0)[0]
    learner.train_from(1, np.array([4]))  # from v1, while v0's update of client 2 waits
    n2, n4 = learner.num_samples(np.array([2, 4])).astype(float)
    learner.aggregate_buffer(np.array([2, 4]), np.array([0, 1]), np.r_[nan, nan],
                             np.array([0.5, 2.0]))
    want = w0 + d1 + (n2 * 0.5 * d2 + n4 * 2.0 * d4) / (n2 + n4)
    torch.testing.assert_close(learner.model.params, want)
    assert len(learner.model.updates) == 0 and set(learner.model.kept) == {0, 1}
    learner.forget(0)
    assert set(learner.model.kept) == {1}


def test_fedbuff_step_is_the_rules_combine_with_scaled_weights() -> None:
    """TERM's tilted weights, normalised, then scaled by c_k: through the rule's combine."""
    tilt = 2.0
    learner = real_learner(4, AggregatorConfig(name="term", tilt=tilt))
    w0, clients = learner.model.params.clone(), np.array([1, 2, 6])
    _, losses = learner.train_from(0, clients)
    np.testing.assert_allclose(losses, learner.report_losses(clients))  # F_k(w_0)
    deltas = list(learner.work.train(w0, 0, clients, 0.0)[0])
    scales = np.array([1.0, 0.5, 0.25])
    learner.aggregate_buffer(clients, np.zeros(3, np.int64), losses, scales)
    pi = learner.num_samples(clients) * np.exp(tilt * (losses - losses.max()))
    coef = pi / pi.sum() * scales
    want = w0 + sum(float(c) * d for c, d in zip(coef, deltas, strict=True))
    torch.testing.assert_close(learner.model.params, want)


def test_term_runs_in_async_mode_on_the_buffers_loss_reports(tmp_path: Path) -> None:
    learner = real_learner(6, AggregatorConfig(name="term", tilt=1.0))
    w0 = learner.model.params.clone()
    clients = run_server(async_server, ServerConfig(
        mode="async", num_rounds=4, clients_per_round=5, concurrency=5, buffer_size=5),
        learner, tmp_path)
    aggregated = clients.filter(pl.col("status") == "aggregated")
    assert aggregated.height == 4 * 5 and learner.model.version == 4
    # each update came with F_k(w_{v_k}), which TERM tilts by
    assert aggregated["loss_reported"].null_count() == 0
    assert not torch.equal(learner.model.params, w0)


def test_every_async_question_has_a_replay_rule() -> None:
    extra = ({n for n in dir(AsyncLearnerLike) if not n.startswith("_")}
             - {n for n in dir(LearnerLike) if not n.startswith("_")})
    assert sorted(extra) == sorted(interface.ASYNC)


REFUSED = {p.name: p.async_refused for p in AGGREGATORS.builtins() if p.async_refused}


@pytest.mark.parametrize("rule", sorted(REFUSED))
def test_rules_async_mode_cannot_run_are_refused_with_the_reason(rule: str) -> None:
    from simfl.errors import InputError
    from simfl.scenario import from_dict

    with pytest.raises(InputError) as refused:
        from_dict({"server": {"mode": "async"}, "aggregator": {"name": rule}})
    assert f"'aggregator.name' = {rule!r} does not work with 'server.mode' = 'async': " \
           f"{REFUSED[rule]}" in str(refused.value)
    # every other rule loads in async mode
    assert set(REFUSED) < set(AGGREGATORS.table)
    for other in {p.name for p in AGGREGATORS.builtins()} - set(REFUSED):
        from_dict({"server": {"mode": "async"}, "aggregator": {"name": other}})


@pytest.mark.parametrize("table, key", [
    ({"server": {"mode": "async", "staleness_b": 2.0}}, "server.staleness_b"),
    ({"server": {"mode": "async", "staleness_a": 2.0}}, "server.staleness_a"),
    ({"server": {"mode": "async", "max_staleness": -2}}, "server.max_staleness"),
    ({"server": {"mode": "async"}, "aggregator": {"name": "qffl"}}, "aggregator.name"),
    ({"server": {"mode": "async"}, "aggregator": {"name": "deltafl"},
      "estimator": {"name": "secure_mm"}}, "estimator.name"),
])
def test_keys_async_mode_cannot_use_are_rejected(table: dict[str, object], key: str) -> None:
    """(The other mode's keys are noted, not refused: tests/test_async_switch.py.)"""
    from simfl.errors import InputError
    from simfl.scenario import from_dict

    with pytest.raises(InputError, match=key.replace(".", r"\.")):
        from_dict(table)


# ---- end to end: deterministic bytes, resumable -----------------------------------------------

ASYNC_SCENARIO = """
seed = 3
[data.synthetic]
num_clients = 80
[train]
lr = 0.05
batch_size = 1000
[aggregator]
name = "deltafl"
[estimator]
shadow = ["ipw", "tracking"]
bias_every = 2
[server]
mode = "async"
num_rounds = 9
clients_per_round = 4
concurrency = 7
staleness = "hinge"
staleness_b = 1.0
max_staleness = 6
[eval]
every = 3
batch_size = 8192
[run]
checkpoint_every = 2
[population]
failure_rate_per_h = 3000.0
[population.availability]
mode = "diurnal"
horizon_s = 86400.0
"""


@pytest.mark.slow
def test_async_runs_are_deterministic_and_resume_to_the_same_files(
        tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.runs.test_resume import assert_same_files, resume, run, run_killed

    scenario = tmp_path / "async.toml"
    scenario.write_text(ASYNC_SCENARIO)
    baseline, again, killed = tmp_path / "baseline", tmp_path / "again", tmp_path / "killed"
    assert run(scenario, baseline) == 0
    clients = pl.read_parquet(baseline / "clients.parquet")
    # the scenario does what it is for: stale updates, filtered ones, dropouts, late ones
    assert {"aggregated", "filtered", "dropped", "late"} <= set(clients["status"].unique())
    # a task dropped during its upload trained (train_loss), but its loss, which goes up
    # with the update, never reached the server
    dropped = clients.filter(pl.col("status") == "dropped")
    assert dropped["train_loss"].null_count() < dropped.height
    assert dropped["loss_reported"].null_count() == dropped.height
    arrived = clients.filter(pl.col("status").is_in(["aggregated", "filtered"]))
    assert arrived["loss_reported"].null_count() == 0
    assert clients["staleness"].to_numpy().max() > 0
    assert pl.read_parquet(baseline / "rounds.parquet").height == 9  # server updates
    # a device starts at most one task from each model version
    assert clients.select("client_idx", "model_version").is_duplicated().sum() == 0
    # every byte is a message: per server update, rounds' totals are comm's and clients' sums
    comm = sent(pl.read_parquet(baseline / "comm.parquet")).filter(pl.col("round") < 9)
    sums = comm.group_by("round").agg(
        pl.col("bytes").filter(pl.col("direction") == "up").sum().alias("up")).sort("round")
    rounds = pl.read_parquet(baseline / "rounds.parquet")
    assert sums["up"].to_list() == rounds["bytes_up"].to_list()
    per_client = clients.filter(pl.col("round") < 9).group_by("round").agg(
        pl.col("bytes_down").sum()).sort("round")
    assert per_client["bytes_down"].to_list() == rounds["bytes_down"].to_list()
    assert run(scenario, again) == 0
    assert_same_files(again, baseline)
    # SIGKILL while writing the second checkpoint (after round 4): resume from round 2
    run_killed(["commit", "2", str(scenario), "--out", str(killed), "--quiet"])
    assert resume(killed) == 0
    assert_same_files(killed, baseline)
    import simfl.plots.runs
    from simfl.cli import main
    from simfl.metrics import error_summary
    from simfl.plots.runs import reach_level

    figures, save = [], simfl.plots.runs.save_figure
    monkeypatch.setattr(simfl.plots.runs, "save_figure",
                        lambda fig, out: figures.append((out.name, fig)) or save(fig, out))
    capsys.readouterr()
    png = tmp_path / "cmp.png"
    assert main(["plot", str(baseline), str(again), "--compare-time", str(png), "--all",
                 "--level", "1.0"]) == 0
    out = capsys.readouterr().out
    assert str(baseline / "plots" / "staleness.png") in out.splitlines()
    # the comparison draws each run's test p90 at each evaluation after the start (in hours)
    first = pl.read_parquet(baseline / "eval.parquet").filter(pl.col("split") == "test")
    later = first.filter(pl.col("t_s") > 0).sort("round").partition_by("round")
    lines = dict(figures)["cmp.png"].axes[0].get_lines()
    assert [line.get_label() for line in lines] == ["deltafl θ=0.5, async (baseline)",
                                                    "deltafl θ=0.5, async (again)"]
    for line in lines:
        np.testing.assert_allclose(line.get_xdata(), [ev["t_s"][0] / 3600 for ev in later])
        np.testing.assert_allclose(line.get_ydata(),
                                   [error_summary(ev["error"].to_numpy())["p90"] for ev in later])
    assert png.stat().st_size > 0
    hit = reach_level(baseline, 1.0)  # every error is <= 1: the first test evaluation
    assert hit is not None and hit["round"] == first["round"].min()
    assert f"{baseline}: p90 <= 1.0 at {hit['t_s'] / 3600:.2f} h, round {hit['round']}" in out


def test_staleness_counts_and_time_to_level() -> None:
    from simfl.plots.runs import staleness_counts, time_to_level

    clients = pl.DataFrame({
        "staleness": [0, 1, 1, 2, 1, 0, 3],
        "status": ["aggregated", "aggregated", "filtered", "stale", "aggregated", "late",
                   "dropped"]})
    assert staleness_counts(clients).rows() == [(0, "aggregated", 1), (1, "aggregated", 2),
                                                (1, "filtered", 1), (2, "stale", 1)]
    # three evaluations (after 0, 2 and 4 updates) of two test devices
    ev = pl.DataFrame({"round": [0, 0, 2, 2, 4, 4], "t_s": [0.0, 0, 5, 5, 9, 9],
                       "client_id": ["a", "b"] * 3, "split": ["test"] * 6,
                       "num_samples": [1] * 6, "loss": [1.0] * 6,
                       "error": [0.9, 0.8, 0.5, 0.7, 0.2, 0.3]})
    rounds = pl.DataFrame({"round": [0, 1, 2, 3], "bytes_down": [10, 10, 10, 10],
                           "bytes_up": [1, 2, 3, 4]})
    # p90 of (0.5, 0.7) is 0.68 (linear interpolation): reached after 2 updates, 23 bytes
    assert time_to_level(ev, rounds, 0.69) == {"t_s": 5.0, "round": 2, "bytes_cum": 23}
    assert time_to_level(ev, rounds, 0.1) is None


def test_tasks_ended_on_few_devices_are_no_stall_while_one_is_in_flight(
        tmp_path: Path) -> None:
    # Four devices, buffer 1, idle window 10; devices 0-2 drop (they leave mid-task),
    # device 1 twice, while device 3's long task (10 s of compute) is in flight. Four
    # tasks end before server update 1 on three devices: not "a task on every device".
    # Before, the rule counted tasks against min(10 x 1, 4 devices) and stopped the run
    # at t = 7.5; it completes, device 2 and then device 3 aggregated.
    intervals = {0: [(0, 5.5), (6, 100)], 1: [(0, 3.5), (4, 7.5), (8, 100)],
                 2: [(0, 4.5), (5, 100)], 3: [(0, 100)]}
    availability = from_intervals(
        np.array([d for d in intervals for _ in intervals[d]]),
        np.array([a for d in intervals for a, _ in intervals[d]], float),
        np.array([b for d in intervals for _, b in intervals[d]], float),
        np.zeros(4, np.int64), 1, horizon_s=100.0)
    env = simpy.Environment()
    recorder = Recorder(tmp_path)
    fleet = Fleet(availability, np.array([0.1, 0.2, 0.3, 1.0]), np.zeros(4), 1)
    wiring = Wiring(env, fleet, LinkSharing(env, paths([1000] * 4, [1000] * 4)), recorder,
                    Streams(0), Health(10, 1.0))
    cfg = ServerConfig(mode="async", num_rounds=3, clients_per_round=4, buffer_size=1)
    env.process(async_server(wiring, cfg, FakeAsyncLearner(needs_losses=False),
                             lambda r, t: None))
    env.run()
    recorder.merge()
    clients = pl.read_parquet(tmp_path / "clients.parquet")
    assert clients.filter(pl.col("round") == 1).select("client_idx", "status").rows() == [
        (1, "dropped"), (2, "dropped"), (0, "dropped"), (1, "dropped"), (2, "aggregated")]
    assert clients.filter(pl.col("round") == 2)["client_idx"].to_list() == [3]


def test_a_stall_where_every_device_ran_its_task_from_the_version(tmp_path: Path) -> None:
    # Two devices, buffer 2: device 0 leaves mid-task (dropped), device 1's update is
    # buffered; neither may start again from version 0, so no update can come: stalled
    # once both tasks ended, whatever the idle window's task count (10 x 2).
    availability = from_intervals(np.array([0, 0, 1]), np.array([0.0, 2.0, 0.0]),
                                  np.array([1.5, 100.0, 100.0]), np.zeros(2, np.int64), 1,
                                  horizon_s=100.0)
    env = simpy.Environment()
    fleet = Fleet(availability, np.array([0.1, 0.1]), np.zeros(2), 1)
    wiring = Wiring(env, fleet, LinkSharing(env, paths([1000] * 2, [1000] * 2)),
                    Recorder(tmp_path), Streams(0), Health(10, 1.0))
    cfg = ServerConfig(mode="async", num_rounds=3, clients_per_round=2, buffer_size=2)
    env.process(async_server(wiring, cfg, FakeAsyncLearner(needs_losses=False),
                             lambda r, t: None))
    with pytest.raises(RunStalled, match=r"2 tasks ended, every device's task from this "
                                         r"version without filling a buffer of 2 for server "
                                         r"update 0 \(1 dropped, 1 buffered\)"):
        env.run()


def test_a_device_coming_online_is_drawn_at_that_instant(tmp_path: Path) -> None:
    # Device 0 is online from 0 s, device 1 from 1 s; tasks take 3 s (1 s down, 1 s
    # compute, 1 s up). Device 1 starts at 1 s from v0 (no poll: the wake is the instant
    # it comes online); device 0 arrives at 3 (v1) and starts again from v1; device 1
    # arrives at 4, one version stale, for v2, the last update.
    availability = from_intervals(np.array([0, 1]), np.array([0.0, 1.0]),
                                  np.array([100.0, 100.0]), np.zeros(2, np.int64), 1,
                                  horizon_s=100.0)
    cfg = ServerConfig(mode="async", num_rounds=2, clients_per_round=2, buffer_size=1)
    tables = simulate(tmp_path, cfg, availability, paths([1000] * 2, [1000] * 2),
                      FakeAsyncLearner(needs_losses=False), np.array([0.1, 0.1]))
    got = tables["clients"].select("client_idx", "model_version", "t_dispatch_s", "status")
    assert sorted(got.rows()) == [(0, 0, 0.0, "aggregated"), (0, 1, 3.0, "late"),
                                  (1, 0, 1.0, "aggregated")]
    np.testing.assert_array_equal(tables["rounds"]["t_end_s"], [3.0, 4.0])


def test_a_draw_waits_for_the_other_events_of_its_instant(tmp_path: Path) -> None:
    # As above, but device 1 comes online at 3 s, the instant device 0 arrives (v1): one
    # draw, after the arrival, fills both slots from v1 (a draw first would start device
    # 1 from v0, one version stale).
    availability = from_intervals(np.array([0, 1]), np.array([0.0, 3.0]),
                                  np.array([100.0, 100.0]), np.zeros(2, np.int64), 1,
                                  horizon_s=100.0)
    cfg = ServerConfig(mode="async", num_rounds=2, clients_per_round=2, buffer_size=1)
    tables = simulate(tmp_path, cfg, availability, paths([1000] * 2, [1000] * 2),
                      FakeAsyncLearner(needs_losses=False), np.array([0.1, 0.1]))
    assert tables["clients"].select("client_idx", "model_version", "t_dispatch_s").rows() == [
        (0, 0, 0.0), (0, 1, 3.0), (1, 1, 3.0)]

"""FedAU and MIFA as options of FedAvg and Δ-FL (simfl.aggregate.participation): weights
and memory by hand, FedAU's estimate against known participation rates, MIFA equal to
FedAvg under full participation, the papers' claim on a quadratic, the state through a
checkpoint, the scenario keys and async mode refused."""

from __future__ import annotations

import re
import signal
from pathlib import Path

import numpy as np
import pytest
import torch

import simfl.runs.build
from simfl.aggregate import Aggregator, RoundInputs, deltafl, fedavg, make_aggregator
from simfl.aggregate import participation as part
from simfl.aggregate.base import Reports, weighted_mean
from simfl.errors import InputError, RunFailed
from simfl.plugins import PARTICIPATION_ASYNC_REFUSED
from simfl.runs.memory import LIMIT_ENV, check_memory, estimate
from simfl.scenario import AggregatorConfig, from_dict
from simfl.train.learner import Learner
from tests.aggregate.helpers import DELTAS, GLOBAL
from tests.runs.test_plain import same, through_torch
from tests.runs.test_resume import assert_same_files, interrupt_round_3, resume, run

SAMPLES = np.array([1.0, 1.0, 2.0])  # α = n_k; A = 4
# Who takes part in rounds 0..5 of the hand-computed schedule (cutoff K = 3)
SCHEDULE = [[0], [0, 1], [], [0], [2], [1, 2]]
# Client k's update is the k-th unit vector: a round's step is its coefficients
UNIT, ORIGIN = torch.eye(3, dtype=torch.float64), torch.zeros(3, dtype=torch.float64)


def step(rule: Aggregator, state: object, arrived: list[int], lr: float = 0.5,
         deltas: torch.Tensor = DELTAS, reports: Reports | None = None,
         params: torch.Tensor = GLOBAL) -> tuple[torch.Tensor, object]:
    """One round's combine from ``params``: the updates ``deltas[arrived]`` arrived."""
    idx = np.array(arrived, dtype=np.int64)
    out = rule.combine(params, RoundInputs(deltas[idx], SAMPLES[idx], idx, lr,
                                           reports=reports), state)
    return out.params - params, out.state


def test_fedau_weights_a_three_client_schedule_as_computed_by_hand() -> None:
    """Intervals (K = 3): client 0 closes 1, 1, 2 (rounds 0, 1, 3); client 1 closes 2
    (round 1), 3 by the cutoff (round 4), 1 (round 5); client 2 closes 3 by the cutoff
    (round 2), 2, 1. A round's weight ω is the mean of the intervals closed before it
    (1 before any), and the step is Σ α_k ω_k Δ_k / A."""
    rule, coef = fedavg("fedau", fedau_cutoff=3), []
    state = rule.init(SAMPLES)
    for arrived in SCHEDULE:
        delta, state = step(rule, state, arrived, deltas=UNIT, params=ORIGIN)
        coef.append(delta.numpy())
    expected = [[0.25, 0, 0], [0.25, 0.25, 0], [0, 0, 0], [0.25, 0, 0], [0, 0, 2 / 4 * 3],
                [0, 1 / 4 * 2.5, 2 / 4 * 2.5]]
    np.testing.assert_allclose(coef, expected, atol=1e-12)
    np.testing.assert_allclose(state["mean_interval"], [4 / 3, 2, 2])
    np.testing.assert_array_equal(state["intervals"], [3, 3, 3])
    np.testing.assert_array_equal(state["since"], [2, 0, 0])


def test_fedau_under_deltafl_counts_every_reporter_and_weighs_the_kept_over_theta() -> None:
    """The same reporters as the schedule above, some filtered (client 0 in round 1,
    client 1 in round 5): the intervals are those above, since a filtered reporter took
    part; the kept updates weigh α_k ω_k / (θ A) with θ A = 2."""
    rule = deltafl(0.5, "fedau", fedau_cutoff=3)
    kept = [[0], [1], [], [0], [2], [2]]
    state, coef = rule.init(SAMPLES), []
    for reporters, arrived in zip(SCHEDULE, kept, strict=True):
        reports = Reports(np.array(reporters, dtype=np.int64), np.ones(len(reporters)), 1.0)
        delta, state = step(rule, state, arrived, deltas=UNIT, params=ORIGIN, reports=reports)
        coef.append(delta.numpy())
    np.testing.assert_allclose(coef, [[0.5, 0, 0], [0, 0.5, 0], [0, 0, 0], [0.5, 0, 0],
                                      [0, 0, 3.0], [0, 0, 2.5]], atol=1e-12)
    np.testing.assert_allclose(state["mean_interval"], [4 / 3, 2, 2])


@pytest.mark.parametrize("cutoff", [10**6, 5])
def test_fedau_mean_interval_converges_to_the_inverse_participation_rate(cutoff: int) -> None:
    """Devices taking part independently with known p_k for 40,000 rounds: the mean
    interval Ω_k → E[min(G_k, K)] = (1 − (1 − p_k)^K) / p_k (1/p_k without a cutoff).
    Tolerance: 5 standard errors of a mean of ~40,000 p_k geometric intervals."""
    p = np.array([0.02, 0.05, 0.1, 0.3, 0.6, 0.9, 1.0])
    rng, state = np.random.default_rng(7), part.fedau_init(np.ones(len(p)))
    rounds = 40_000
    for _ in range(rounds):
        _, state = part.fedau_round(state, np.flatnonzero(rng.random(len(p)) < p), cutoff)
    expected = (1 - (1 - p) ** cutoff) / p
    std_error = np.sqrt((1 - p) / p**2 / (rounds * p))
    assert np.all(np.abs(state["mean_interval"] - expected) < 5 * std_error + 1e-12), (
        state["mean_interval"], expected)
    if cutoff == 5:
        assert state["mean_interval"].max() <= 5


def test_mifa_steps_with_every_devices_latest_update_rescaled_to_the_rounds_lr() -> None:
    """Round 0 (lr 0.5): clients 0 and 2 arrive; client 1 counts as 0. Round 1 (lr 0.25):
    client 1 arrives, the stored ones count at 0.25 / 0.5. Round 2: nobody arrives, the
    memory steps again. Round 3: client 0 sends a new update."""
    rule = fedavg("mifa")
    state = rule.init(SAMPLES)
    delta, state = step(rule, state, [0, 2], lr=0.5)
    torch.testing.assert_close(delta, 0.25 * DELTAS[0] + 0.5 * DELTAS[2])
    delta, state = step(rule, state, [1], lr=0.25)
    expected = DELTAS[0] / 8 + DELTAS[1] / 4 + DELTAS[2] / 4
    torch.testing.assert_close(delta, expected)
    delta, state = step(rule, state, [], lr=0.25)
    torch.testing.assert_close(delta, expected)
    new = DELTAS.clone()
    new[0] = torch.tensor([2.0, 2.0], dtype=torch.float64)
    delta, state = step(rule, state, [0], lr=0.25, deltas=new)
    torch.testing.assert_close(delta, (new[0] + DELTAS[1] + DELTAS[2]) / 4)


def test_mifa_under_deltafl_keeps_stored_updates_by_their_latest_loss_report() -> None:
    rule = deltafl(0.5, "mifa")
    state = rule.init(SAMPLES)
    # round 0: reports 1, 3, 2; η̂ = 2 keeps clients 1 and 2, both arrive: Δ-FL's own step
    reports = Reports(np.arange(3), np.array([1.0, 3.0, 2.0]), 2.0)
    delta, state = step(rule, state, [1, 2], reports=reports)
    torch.testing.assert_close(delta, deltafl(0.5).combine(
        GLOBAL, RoundInputs(DELTAS[1:], SAMPLES[1:]), None).params - GLOBAL)
    # round 1: client 0 alone reports 2.5 = η̂ and arrives; client 1's stale 3.0 counts,
    # client 2's stale 2.0 does not
    delta, state = step(rule, state, [0], reports=Reports(np.array([0]), np.array([2.5]), 2.5))
    torch.testing.assert_close(delta, (DELTAS[0] + DELTAS[1]) / 2)
    # round 2: client 1 reports 0.5 (filtered), client 2 reports 2.2 = η̂ (kept) but does
    # not arrive: its round-0 update counts, with client 0's stale one
    reports = Reports(np.array([1, 2]), np.array([0.5, 2.2]), 2.2)
    delta, state = step(rule, state, [], reports=reports)
    torch.testing.assert_close(delta, DELTAS[0] / 3 + 2 * DELTAS[2] / 3)
    # round 3: no reports, so no threshold: the model stays
    delta, state = step(rule, state, [])
    assert not delta.any()
    np.testing.assert_array_equal(state["loss"], [2.5, 0.5, 2.2])


def _learner(aggregator: dict[str, object], seed: int = 0) -> Learner:
    """A run's learner for a tiny synthetic scenario with 12 training devices."""
    scenario = {"seed": seed, "data": {"synthetic": {"num_clients": 24, "dim": 5,
                                                     "num_classes": 3}},
                "train": {"lr": 0.1, "lr_decay_every": 2, "lr_decay_factor": 0.5},
                "aggregator": aggregator}
    return simfl.runs.build.build_run(from_dict(scenario)).learner


def test_mifa_is_fedavg_under_full_participation_to_the_bit() -> None:
    """Every training device's update arrives every round, over 6 rounds with a decaying
    lr: MIFA's memory holds fresh updates only, and its step is FedAvg's."""
    learners = [_learner({"name": "fedavg"}), _learner({"name": "fedavg",
                                                        "participation": "mifa"})]
    everyone = np.arange(learners[0].data.train.num_clients)
    for r in range(6):
        for learner in learners:
            learner.train(r, everyone)
            learner.aggregate(everyone, np.full(len(everyone), np.nan))
        assert torch.equal(learners[0].model.params, learners[1].model.params), r
    assert not torch.equal(learners[0].model.params, _learner({"name": "fedavg"}).model.params)


def test_the_learner_gives_the_rule_its_rounds_reporters_and_rounds_without_updates() -> None:
    """Δ-FL with FedAU: the reporters the learner's select saw take part, the filtered
    ones too; a round whose kept devices all fail still counts."""
    learner = _learner({"name": "deltafl", "participation": "fedau"})
    cohort = np.array([1, 4, 7, 9])
    selection, _ = learner.select(np.array([3.0, 0.1, 0.2, 2.0]), cohort, 0, 0.0)
    kept = cohort[selection.keep]
    assert 0 < len(kept) < len(cohort)
    learner.train(0, kept)
    learner.aggregate(kept, np.zeros(len(kept)))
    state = learner.model.aggregator_state
    np.testing.assert_array_equal(np.flatnonzero(state["intervals"]), cohort)
    learner.select(np.array([0.5, 0.6]), np.array([2, 3]), 1, 600.0)
    learner.aggregate(np.zeros(0, dtype=np.int64), np.zeros(0))  # nobody's update arrived
    state = learner.model.aggregator_state
    np.testing.assert_array_equal(np.flatnonzero(state["intervals"]), [1, 2, 3, 4, 7, 9])
    np.testing.assert_array_equal(state["since"][cohort], [1, 1, 1, 1])
    assert learner.reports is None


def _quadratic(rule: Aggregator, rounds: int = 4000, seed: int = 0) -> float:
    """Ten clients with F_k(x) = (x − k)² / 2 (optimum of their mean: 4.5), taking part
    independently with p_k = 0.05 + 0.09 k, their local training a step β(k − x),
    β = 0.2: the mean of x over the rounds after the first 1000."""
    c, p = np.arange(10.0), 0.05 + 0.09 * np.arange(10)
    rng, x, state, xs = np.random.default_rng(seed), GLOBAL[:1] * 0, rule.init(np.ones(10)), []
    for _ in range(rounds):
        idx = np.flatnonzero(rng.random(10) < p)
        if len(idx) or rule.every_round:
            deltas = torch.from_numpy(0.2 * (c[idx] - float(x))).reshape(-1, 1)
            out = rule.combine(x, RoundInputs(deltas, np.ones(len(idx)), idx, 0.1), state)
            x, state = out.params, out.state
        xs.append(float(x))
    return float(np.mean(xs[1000:]))


def test_the_papers_claim_fedavg_leans_to_frequent_clients_fedau_and_mifa_do_not() -> None:
    """FedAU's (Bernoulli participation, unknown p_k) and MIFA's setting on a quadratic:
    FedAvg over the devices that took part settles near Σ p_k k / Σ p_k = 6.13, FedAU and
    MIFA at the full-participation optimum 4.5 (FedAU with K = 50 at 4.535: its weights
    estimate 1 − (1 − p_k)^50 for p_0 = 0.05, in expectation)."""
    biased = _quadratic(fedavg())
    assert abs(biased - 6.13) < 0.3
    weights = 1 - (1 - (0.05 + 0.09 * np.arange(10))) ** 50
    assert abs(_quadratic(fedavg("fedau")) - weights @ np.arange(10) / weights.sum()) < 0.15
    assert abs(_quadratic(fedavg("mifa")) - 4.5) < 1e-9


@pytest.mark.parametrize("participation", ["fedau", "mifa"])
def test_the_state_is_plain_data_and_survives_a_checkpoint(participation: str) -> None:
    rule = deltafl(0.5, participation)
    state = rule.init(SAMPLES)
    assert same(through_torch(state), state)  # MIFA's memory not yet allocated
    reports = Reports(np.arange(3), np.array([1.0, 3.0, 2.0]), 2.0)
    _, state = step(rule, state, [1, 2], reports=reports)
    copy = through_torch(state)
    assert same(copy, state)
    reports = Reports(np.array([0, 2]), np.array([2.5, 2.6]), 2.5)
    assert torch.equal(step(rule, state, [0, 2], reports=reports)[0],
                       step(rule, copy, [0, 2], reports=reports)[0])


SCENARIO = """
seed = 5
[data.synthetic]
num_clients = 60
[model]
name = "linear"
[train]
lr = 0.05
batch_size = 1000
[aggregator]
name = "deltafl"
participation = "{participation}"
[server]
num_rounds = 6
clients_per_round = 4
over_selection = 0.5
[eval]
every = 3
[run]
checkpoint_every = 2
[population.availability]
mode = "diurnal"
horizon_s = 86400.0
"""


@pytest.mark.parametrize("participation", ["fedau", "mifa"])
def test_a_run_stopped_and_resumed_ends_with_the_uninterrupted_files(
        tmp_path: Path, participation: str) -> None:
    path = tmp_path / f"{participation}.toml"
    path.write_text(SCENARIO.format(participation=participation))
    assert run(path, tmp_path / "whole") == 0
    with pytest.MonkeyPatch.context() as patch:
        interrupt_round_3(patch)
        assert run(path, tmp_path / "stopped") == 128 + signal.SIGINT
    assert resume(tmp_path / "stopped") == 0
    assert_same_files(tmp_path / "stopped", tmp_path / "whole")


def test_the_registry_composes_the_option_and_leaves_the_default_rules_as_they_were() -> None:
    for name in ("fedavg", "deltafl"):
        plain = make_aggregator(AggregatorConfig(name=name))
        assert (plain.name, plain.every_round, plain.combine) == (name, False, weighted_mean)
        for option in ("fedau", "mifa"):
            rule = make_aggregator(AggregatorConfig(name=name, participation=option))
            assert (rule.name, rule.every_round) == (f"{name}+{option}", True)
            assert rule.needs_losses == plain.needs_losses
    assert AggregatorConfig().fedau_cutoff == part.FEDAU_CUTOFF


@pytest.mark.parametrize("table, message", [
    ({"aggregator": {"name": "qffl", "participation": "fedau"}},
     "'aggregator.participation' = 'fedau' has no meaning with 'aggregator.name' = 'qffl'"),
    ({"aggregator": {"participation": "mifa", "fedau_cutoff": 10}},
     "'aggregator.fedau_cutoff' = 10 has no meaning with 'aggregator.participation' = 'mifa'"),
    ({"aggregator": {"participation": "fedau", "fedau_cutoff": 0}},
     "'aggregator.fedau_cutoff' = 0 must be > 0"),
    ({"aggregator": {"participation": "ipw"}}, "'aggregator.participation'"),
    ({"aggregator": {"participation": "fedau"}, "server": {"mode": "async"}},
     "'aggregator.participation' = 'fedau' does not work with 'server.mode' = 'async': "
     + PARTICIPATION_ASYNC_REFUSED),
])
def test_bad_participation_keys_are_one_line_naming_the_key(table: dict[str, object],
                                                            message: str) -> None:
    with pytest.raises(InputError, match=re.escape(message)):
        from_dict(table)


def test_mifas_memory_is_in_the_runs_estimate_and_refused_beyond_its_limit(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """500 training devices of a linear model of 60 × 10 + 10 = 610 float32 parameters;
    a checkpoint adds three copies. Beyond the memory available the run is refused
    before it starts, naming the key; beyond MAX_MEMORY_BYTES (data whose keys do not
    give N) the first update fails the run."""
    table = {"data": {"synthetic": {"num_clients": 1000}}, "aggregator": {
        "participation": "mifa"}}
    terms = {what: size for size, _, what in estimate(from_dict(table))}
    assert terms["MIFA's latest update of each of 500 devices"] == 4 * 500 * 610
    assert terms["the checkpoints' copies of MIFA's updates"] == 3 * 4 * 500 * 610
    assert not any("MIFA" in what for _, _, what in estimate(from_dict(
        {"data": {"synthetic": {"num_clients": 1000}}})))
    big = {"data": {"synthetic": {"num_clients": 20_000, "num_classes": 10_000}},
           "aggregator": {"participation": "mifa"}}  # 10^4 devices × 610,000 parameters
    monkeypatch.setenv(LIMIT_ENV, str(2**30))
    with pytest.raises(InputError, match=re.escape("'aggregator.participation' = 'mifa' with "
                                                   "'data.synthetic.num_clients' = 20000")):
        check_memory(from_dict(big))
    monkeypatch.setattr(part, "MAX_MEMORY_BYTES", 3 * 2 * 8 - 1)
    rule = fedavg("mifa")
    with pytest.raises(RunFailed, match=re.escape(
            "'aggregator.participation' = 'mifa' (fedavg+mifa) would keep the latest update "
            "of 3 devices of 2 parameters")):
        step(rule, rule.init(SAMPLES), [0])

"""The baseline rules (FedProx, fedavg_sub, q-FFL, TERM, AFL, DRFA): hand-computed
three-client cases, their invariants, the simplex kernel, λ-weighted selection and
end-to-end runs."""

from __future__ import annotations

import dataclasses
import itertools
import math
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import polars as pl
import pytest
import torch

from simfl.aggregate import (
    Aggregator,
    RoundInputs,
    afl,
    drfa,
    fedavg,
    fedavg_sub,
    fedprox,
    make_aggregator,
    qffl,
    term,
)
from simfl.aggregate.base import LossOracle
from simfl.aggregate.simplex import ascend_mixture, project_simplex
from simfl.errors import InputError
from simfl.population import always_online
from simfl.run import run_scenario
from simfl.scenario import AggregatorConfig, ServerConfig, from_dict, load_scenario
from tests.sim.test_server import FakeLearner, paths, simulate

GLOBAL = torch.tensor([1.0, 1.0], dtype=torch.float64)
DELTAS = torch.tensor([[1.0, 0.0], [0.0, 2.0], [-1.0, -1.0]], dtype=torch.float64)
WEIGHTS = np.array([1.0, 1.0, 2.0])  # α = 1/4, 1/4, 1/2
COHORT = np.array([0, 1, 2])
LOSSES = np.array([1.0, 3.0, 2.0])  # F_k(w_t) of clients 0, 1, 2


def fixed_losses(table: np.ndarray) -> LossOracle:
    """A loss oracle that ignores the model: F_k = table[k]."""
    return lambda params, client_idx: table[client_idx]


def inputs(deltas: torch.Tensor = DELTAS, weights: np.ndarray = WEIGHTS,
           client_idx: np.ndarray = COHORT, table: np.ndarray = LOSSES, lr: float = 0.5,
           seed: int = 0) -> RoundInputs:
    return RoundInputs(deltas, weights, client_idx, lr, fixed_losses(table),
                       np.random.default_rng(seed), table[client_idx])


def close(actual: torch.Tensor, expected: list[float]) -> None:
    torch.testing.assert_close(actual, torch.tensor(expected, dtype=torch.float64))


# --- the simplex kernel -------------------------------------------------------------------

def brute_force_projection(v: np.ndarray) -> np.ndarray:
    """Over every support S: the projection onto {x_S = v_S − τ, Σ x = 1} if it is ≥ 0;
    the feasible candidate nearest to v is the projection (the optimum has some support)."""
    best, best_dist = None, math.inf
    for size in range(1, len(v) + 1):
        for support in itertools.combinations(range(len(v)), size):
            s = list(support)
            x = np.zeros_like(v)
            x[s] = v[s] - (v[s].sum() - 1.0) / size
            if (x >= -1e-12).all() and (d := float(((x - v) ** 2).sum())) < best_dist:
                best, best_dist = x, d
    assert best is not None
    return best


@pytest.mark.parametrize("v, expected", [
    ([0.5, 0.5, 0.5], [1 / 3, 1 / 3, 1 / 3]),  # τ = 1/6
    ([2.0, 0.0, 0.0], [1.0, 0.0, 0.0]),  # τ = 1
    ([1.0, 0.5, 0.0], [0.75, 0.25, 0.0]),  # support {0, 1}: τ = (1.5 − 1) / 2 = 0.25
    ([-1.0, -2.0, -4.0], [1.0, 0.0, 0.0]),  # τ = −2
    ([0.2, 0.3, 0.5], [0.2, 0.3, 0.5]),  # already on the simplex
])
def test_projection_known_cases(v: list[float], expected: list[float]) -> None:
    np.testing.assert_allclose(project_simplex(np.array(v)), expected, atol=1e-12)


def test_projection_matches_brute_force() -> None:
    rng = np.random.default_rng(0)
    for _ in range(200):
        v = rng.normal(scale=rng.choice([0.1, 1.0, 5.0]), size=rng.integers(1, 7))
        x = project_simplex(v)
        np.testing.assert_allclose(x, brute_force_projection(v), atol=1e-10)
        assert (x >= 0).all() and x.sum() == pytest.approx(1.0)
        np.testing.assert_allclose(project_simplex(x), x, atol=1e-12)  # idempotent


def test_ascend_mixture_hand_case() -> None:
    # N = 4, m = 2 clients {0, 2} with losses 1, 3: v = (4/2)(1, 0, 3, 0) = (2, 0, 6, 0).
    # λ + 0.1 v = (0.45, 0.25, 0.85, 0.25), sum 1.8; every entry stays: τ = 0.8 / 4 = 0.2.
    lam = np.full(4, 0.25)
    new = ascend_mixture(lam, np.array([0, 2]), np.array([1.0, 3.0]), step=0.1)
    np.testing.assert_allclose(new, [0.25, 0.05, 0.65, 0.05])
    np.testing.assert_array_equal(lam, np.full(4, 0.25))  # the input is not mutated


# --- FedProx and fedavg_sub ---------------------------------------------------------------

def test_fedprox_combines_as_fedavg_and_carries_mu_to_training() -> None:
    rule = fedprox(0.3)
    assert rule.prox_mu == 0.3 and fedavg().prox_mu == 0.0
    # 1 + (1/4·1 + 1/4·0 + 1/2·(−1)), 1 + (0 + 1/4·2 + 1/2·(−1))
    close(rule.combine(GLOBAL, inputs(), None).params, [0.75, 1.0])
    with pytest.raises(ValueError, match="mu"):
        fedprox(-1.0)


def test_fedavg_sub_asks_for_theta_of_the_cohort() -> None:
    rule = fedavg_sub(0.25)
    assert rule.cohort_fraction == 0.25 and fedavg().cohort_fraction == 1.0
    assert not rule.needs_losses
    close(rule.combine(GLOBAL, inputs(), None).params, [0.75, 1.0])


# --- q-FFL --------------------------------------------------------------------------------

def test_qffl_hand_case() -> None:
    # lr = 0.5: L = 2; q = 1; ‖δ_k‖² = 1, 4, 2; F = 1, 3, 2.
    # h_k = q F^0 L²‖δ_k‖² + L F = 4‖δ‖² + 2F = 6, 22, 12; Σh = 40.
    # c_k = L F_k / Σh = 2/40, 6/40, 4/40 = 0.05, 0.15, 0.10.
    # w = (1, 1) + 0.05 (1, 0) + 0.15 (0, 2) + 0.10 (−1, −1) = (0.95, 1.2).
    new = qffl(1.0).combine(GLOBAL, inputs(lr=0.5), None).params
    close(new, [0.95, 1.2])


def test_qffl_q2_hand_case() -> None:
    # lr = 1: L = 1; q = 2; h_k = 2 F ‖δ‖² + F² = 2·1·1 + 1, 2·3·4 + 9, 2·2·2 + 4 = 3, 33, 12.
    # Σh = 48; c_k = F² / 48 = 1/48, 9/48, 4/48: w = (1 + (1 − 4)/48, 1 + (18 − 4)/48).
    new = qffl(2.0).combine(GLOBAL, inputs(lr=1.0), None).params
    close(new, [1 - 3 / 48, 1 + 14 / 48])


def test_qffl_q0_is_the_uniform_mean_not_the_alpha_weighted_one() -> None:
    # q = 0: h_k = L, c_k = L / (K L) = 1/K whatever the losses, weights and lr. q-FFL
    # weights the cohort uniformly because it samples devices ∝ p_k (its sampling rule).
    rng = np.random.default_rng(1)
    deltas = torch.from_numpy(rng.normal(size=(5, 3)))
    weights = rng.integers(1, 50, 5).astype(float)
    table = rng.exponential(size=5)
    params = torch.zeros(3, dtype=torch.float64)
    got = qffl(0.0).combine(params, inputs(deltas, weights, np.arange(5), table, lr=0.3),
                            None).params
    torch.testing.assert_close(got, deltas.mean(dim=0))
    fedavg_params = fedavg().combine(params, inputs(deltas, weights, np.arange(5), table),
                                     None).params
    assert not torch.allclose(got, fedavg_params)
    num_samples = np.array([10, 30, 60])
    np.testing.assert_array_equal(qffl(0.0).sampling(None, num_samples), num_samples)
    assert fedavg().sampling(None, num_samples) is None


def test_qffl_large_q_follows_the_worst_client() -> None:
    # As q grows, c_k ∝ F_k^q concentrates on client 1 (F = 3).
    new = qffl(40.0).combine(GLOBAL, inputs(lr=0.5), None).params
    step = new - GLOBAL
    cosine = float(step @ DELTAS[1] / (step.norm() * DELTAS[1].norm()))
    assert cosine > 0.999


# --- TERM ---------------------------------------------------------------------------------

def test_term_hand_case() -> None:
    # t = ln 2: exp(t F) = 2, 8, 4; α exp(t F) ∝ 1·2, 1·8, 2·4 = 2, 8, 8 → π = 1/9, 4/9, 4/9.
    # w = (1, 1) + (1/9 − 4/9, 8/9 − 4/9) = (2/3, 13/9).
    new = term(math.log(2.0)).combine(GLOBAL, inputs(), None).params
    close(new, [2 / 3, 13 / 9])


def test_term_tilt_to_zero_is_fedavg_and_large_tilts_pick_one_client() -> None:
    expected = fedavg().combine(GLOBAL, inputs(), None).params
    torch.testing.assert_close(term(0.0).combine(GLOBAL, inputs(), None).params, expected,
                               rtol=0, atol=0)
    torch.testing.assert_close(term(1e-9).combine(GLOBAL, inputs(), None).params, expected)
    # t → +∞: the worst client (1); t → −∞: the best (0). The shift by max keeps exp finite.
    close(term(1e4).combine(GLOBAL, inputs(), None).params, (GLOBAL + DELTAS[1]).tolist())
    close(term(-1e4).combine(GLOBAL, inputs(), None).params, (GLOBAL + DELTAS[0]).tolist())


# --- AFL ----------------------------------------------------------------------------------

NUM_SAMPLES = np.array([1.0, 1.0, 2.0, 4.0])  # N = 4 training clients: α = 1/8, 1/8, 1/4, 1/2


def test_afl_hand_case() -> None:
    rule = afl(lambda_step=0.1)
    lam = rule.init(NUM_SAMPLES)
    np.testing.assert_allclose(lam, [1 / 8, 1 / 8, 1 / 4, 1 / 2])
    out = rule.combine(GLOBAL, inputs(), lam)
    # Model: λ on the cohort {0, 1, 2} = 1/8, 1/8, 1/4 → 1/4, 1/4, 1/2: the FedAvg case above.
    close(out.params, [0.75, 1.0])
    # λ: v = (N/K) F = (4/3)(1, 3, 2, 0); λ + 0.1 v = (31, 63, 62, 60) / 120, sum 216/120;
    # all four stay in the support: τ = (96/120) / 4 = 24/120 → (7, 39, 38, 36) / 120.
    assert out.state is not None
    np.testing.assert_allclose(out.state, np.array([7, 39, 38, 36]) / 120)
    np.testing.assert_allclose(lam, [1 / 8, 1 / 8, 1 / 4, 1 / 2])  # returned, not mutated


def test_afl_without_lambda_steps_is_fedavg() -> None:
    rule, rng = afl(lambda_step=0.0), np.random.default_rng(2)
    num_samples = rng.integers(1, 50, 12).astype(float)
    lam = rule.init(num_samples)
    params = torch.zeros(3, dtype=torch.float64)
    for _ in range(5):
        cohort = np.sort(rng.choice(12, 4, replace=False))
        deltas = torch.from_numpy(rng.normal(size=(4, 3)))
        step = inputs(deltas, num_samples[cohort], cohort, rng.exponential(size=12))
        out = rule.combine(params, step, lam)
        torch.testing.assert_close(out.params, fedavg().combine(params, step, None).params)
        assert out.state is not None
        np.testing.assert_allclose(out.state, num_samples / num_samples.sum())
        params, lam = out.params, out.state


def test_afl_cohort_without_weight_keeps_the_model() -> None:
    out = afl(0.1).combine(GLOBAL, inputs(), np.array([0.0, 0.0, 0.0, 1.0]))
    close(out.params, [1.0, 1.0])


# --- DRFA ---------------------------------------------------------------------------------

@dataclass
class RecordingOracle:
    table: np.ndarray
    calls: list[tuple[torch.Tensor, np.ndarray]]

    def __call__(self, params: torch.Tensor, client_idx: np.ndarray) -> np.ndarray:
        self.calls.append((params.clone(), np.array(client_idx)))
        return self.table[client_idx]


def test_drfa_hand_case() -> None:
    # N = 3 = m, so U is every client and v = (N/m) F = F = (1, 3, 2) whatever the draws.
    rule = drfa(lambda_step=0.1)
    lam = rule.init(WEIGHTS)  # α = 1/4, 1/4, 1/2
    np.testing.assert_array_equal(rule.sampling(lam, WEIGHTS), lam)  # cohort drawn ∝ λ
    oracle = RecordingOracle(LOSSES, [])
    step = RoundInputs(DELTAS, WEIGHTS, COHORT, 0.5, oracle, np.random.default_rng(0))
    out = rule.combine(GLOBAL, step, lam)
    # Model: the uniform mean of the updates, (0, 1/3) (not α-weighted).
    close(out.params, [1.0, 4 / 3])
    # λ + 0.1 F = (0.35, 0.55, 0.7), sum 1.6: τ = 0.6 / 3 = 0.2 → (0.15, 0.35, 0.5).
    assert out.state is not None
    np.testing.assert_allclose(out.state, [0.15, 0.35, 0.5])
    # The losses were taken once, at a point of the chord w_t + u (w_{t+1} − w_t), u ∈ (0, 1].
    [(probe, probed)] = oracle.calls
    np.testing.assert_array_equal(probed, [0, 1, 2])
    u = float((probe[1] - 1.0) / (1 / 3))
    assert probe[0] == 1.0 and 0.0 < u <= 1.0


def test_drfa_lambda_stays_on_the_simplex_and_probes_m_distinct_clients() -> None:
    rng = np.random.default_rng(3)
    num_clients, m = 20, 5
    rule = drfa(lambda_step=0.05)
    lam = rule.init(rng.integers(1, 50, num_clients).astype(float))
    params = torch.zeros(4, dtype=torch.float64)
    table = rng.exponential(size=num_clients)
    oracle = RecordingOracle(table, [])
    for r in range(50):
        cohort = np.sort(rng.choice(num_clients, m, replace=False))  # λ only steers sampling
        step = RoundInputs(torch.from_numpy(rng.normal(size=(m, 4))), np.ones(m), cohort, 0.1,
                           oracle, np.random.default_rng(r))
        out = rule.combine(params, step, lam)
        assert out.state is not None
        assert (out.state >= 0).all() and out.state.sum() == pytest.approx(1.0)
        probed = oracle.calls[-1][1]
        assert len(np.unique(probed)) == m
        # λ moved only on the probed clients, up to the common shift τ of the projection.
        unprobed = np.setdiff1d(np.arange(num_clients), probed)
        shift = (lam - out.state)[unprobed][out.state[unprobed] > 0]
        np.testing.assert_allclose(shift, shift[0] if shift.size else shift)
        params, lam = out.params, out.state
    # The largest losses gained mass: λ ends up correlated with F.
    assert np.corrcoef(lam, table)[0, 1] > 0.5


def test_drfa_without_lambda_steps_keeps_lambda() -> None:
    lam = drfa(0.0).init(WEIGHTS)
    out = drfa(0.0).combine(GLOBAL, inputs(), lam)
    assert out.state is not None
    np.testing.assert_allclose(out.state, lam)


def test_stateful_rules_refuse_to_run_without_their_state() -> None:
    for rule in (afl(0.1), drfa(0.1)):
        with pytest.raises(ValueError, match="needs λ"):
            rule.combine(GLOBAL, inputs(), None)
    with pytest.raises(ValueError, match="qffl needs losses"):
        qffl(1.0).combine(GLOBAL, RoundInputs(DELTAS, WEIGHTS, COHORT, 0.5), None)


# --- selection ∝ weights on the server ----------------------------------------------------

def test_weighted_sampling_draws_only_positive_weights_in_proportion() -> None:
    availability = always_online(np.zeros(6, dtype=np.int64), 1)
    weights = np.array([0.0, 1.0, 0.0, 3.0, 0.0, 0.0])
    counts = np.zeros(6)
    for seed in range(2000):
        [device] = availability.sample_online(0.0, 1, np.random.default_rng(seed), None, weights)
        counts[device] += 1
    assert counts[[0, 2, 4, 5]].sum() == 0
    # P(device 3) = 3/4: 1500 of 2000 expected, sd = sqrt(2000 · 3/4 · 1/4) ≈ 19.4.
    assert abs(counts[3] - 1500) < 4 * 19.4
    # Asking for more than the positive-weight eligible devices returns just those.
    busy = np.zeros(6, dtype=bool)
    busy[1] = True
    np.testing.assert_array_equal(
        availability.sample_online(0.0, 4, np.random.default_rng(0), busy, weights), [3])


def test_uniform_sampling_is_unchanged_without_weights() -> None:
    availability = always_online(np.zeros(50, dtype=np.int64), 1)
    for k in (3, 40):
        a = availability.sample_online(0.0, k, np.random.default_rng(7))
        b = availability.sample_online(0.0, k, np.random.default_rng(7), None, None)
        np.testing.assert_array_equal(a, b)


@dataclass
class WeightedLearner(FakeLearner):
    weights: np.ndarray | None = None

    def selection_weights(self) -> np.ndarray | None:
        return self.weights


def test_server_selects_with_the_rules_chances_and_cohort_share(tmp_path: Path) -> None:
    n = 6
    (tmp_path / "w").mkdir()
    (tmp_path / "s").mkdir()
    availability = always_online(np.zeros(n, dtype=np.int64), 1)
    learner = WeightedLearner(needs_losses=False,
                              weights=np.array([0.0, 0.0, 1.0, 0.0, 3.0, 0.0]))
    cfg = ServerConfig(num_rounds=3, clients_per_round=4)
    tables = simulate(tmp_path / "w", cfg, availability, paths([1e3] * n, [1e3] * n), learner,
                      np.full(n, 0.01))
    assert set(tables["clients"]["client_idx"].to_list()) == {2, 4}
    assert tables["rounds"]["num_selected"].to_list() == [2, 2, 2]
    # fedavg_sub-like: a quarter of 4 devices, uniformly.
    sub = WeightedLearner(needs_losses=False, cohort_fraction=0.25)
    tables = simulate(tmp_path / "s", cfg, availability, paths([1e3] * n, [1e3] * n), sub,
                      np.full(n, 0.01))
    assert tables["rounds"]["num_selected"].to_list() == [1, 1, 1]


# --- configuration ------------------------------------------------------------------------

def test_registry_builds_every_rule_with_its_hyperparameters() -> None:
    cfg = AggregatorConfig(theta=0.25, mu=0.5, q=2.0, tilt=-1.0, lambda_step=0.3)
    names = ("fedavg", "fedprox", "deltafl", "fedavg_sub", "qffl", "term", "afl", "drfa")
    rules: dict[str, Aggregator] = {
        name: make_aggregator(dataclasses.replace(cfg, name=name)) for name in names}
    assert {name: rule.name for name, rule in rules.items()} == {n: n for n in names}
    assert rules["fedprox"].prox_mu == 0.5 and rules["fedavg_sub"].cohort_fraction == 0.25
    assert [name for name, rule in rules.items() if rule.needs_losses] == [
        "deltafl", "qffl", "term", "afl"]
    # q = 2 through the registry: the q2 hand case above.
    close(rules["qffl"].combine(GLOBAL, inputs(lr=1.0), None).params,
          [1 - 3 / 48, 1 + 14 / 48])


@pytest.mark.parametrize("key, value, message", [
    ("mu", -0.1, "'aggregator.mu' = -0.1 must be in [0, 1e30]"),
    ("q", -1.0, "'aggregator.q' = -1.0 must be >= 0"),
    ("tilt", math.inf, "'aggregator.tilt' must be a finite number"),
    ("lambda_step", -1e-3, "'aggregator.lambda_step' = -0.001 must be in [0, 1e30]"),
    ("name", "fedsgd", "'aggregator.name' = 'fedsgd' must be one of"),
])
def test_bad_hyperparameters_are_rejected(key: str, value: object, message: str) -> None:
    with pytest.raises(InputError, match=re.escape(message)):
        from_dict({"aggregator": {key: value}})


def test_mu_has_one_home() -> None:
    with pytest.raises(InputError, match="unknown key 'train.prox_mu'"):
        from_dict({"train": {"prox_mu": 0.1}})


# --- end to end ---------------------------------------------------------------------------

TINY = """
seed = 0
[data]
dataset = "synthetic"
[data.synthetic]
num_clients = {num_clients}
dim = 10
num_classes = 3
[model]
name = "linear"
[train]
lr = 0.05
batch_size = 256
[server]
num_rounds = 4
clients_per_round = 4
[eval]
every = 4
"""
DIURNAL = """
[population.availability]
mode = "diurnal"
horizon_s = 172800.0
"""
RULES = ["fedavg", "fedprox", "deltafl", "fedavg_sub", "qffl", "term", "afl", "drfa"]


def run_tiny(tmp_path: Path, name: str, *overrides: str, diurnal: bool = False) -> Path:
    text = TINY.format(num_clients=60 if diurnal else 24) + (DIURNAL if diurnal else "")
    path = tmp_path / f"{name}.toml"
    path.write_text(text)
    out = tmp_path / "results" / name
    manifest = run_scenario(load_scenario(path, overrides), out, progress=False)
    assert manifest["status"] == "complete"
    return out


@pytest.mark.parametrize("diurnal", [False, True], ids=["always", "diurnal"])
@pytest.mark.parametrize("rule", RULES)
def test_every_rule_runs_end_to_end(tmp_path: Path, rule: str, diurnal: bool) -> None:
    step = ("aggregator.lambda_step=0.001",) if rule in ("afl", "drfa") else ()
    out = run_tiny(tmp_path, rule, f'aggregator.name="{rule}"', *step, diurnal=diurnal)
    rounds = pl.read_parquet(out / "rounds.parquet")
    assert rounds["round"].to_list() == [0, 1, 2, 3]
    wanted = 2 if rule == "fedavg_sub" else 4  # round(θ = 0.5 × 4)
    if diurnal:
        assert (rounds["num_selected"] <= wanted).all() and (rounds["num_selected"] > 0).all()
    else:
        assert rounds["num_selected"].to_list() == [wanted] * 4
    clients = pl.read_parquet(out / "clients.parquet")
    # the rules that weigh or filter by F_k(w_t) get a report from every device that trained
    trained = clients.filter(pl.col("train_loss").is_not_null())
    reports = trained["loss_reported"].null_count() == 0
    assert reports == (rule in ("deltafl", "qffl", "term", "afl")), rule
    assert clients.filter(pl.col("train_loss").is_null())["status"].is_in(
        ["filtered", "dropped", "late"]).all()
    # only Δ-FL filters: exactly the devices below its round's threshold η̂
    with_eta = clients.join(rounds.select("round", "quantile_estimate"), on="round")
    reported = with_eta.filter(pl.col("loss_reported").is_not_null())
    if rule == "deltafl":
        assert rounds["quantile_estimate"].null_count() == 0
        below = reported["loss_reported"] < reported["quantile_estimate"]
        assert (below == (reported["status"] == "filtered")).all() and below.any()
    else:
        assert rounds["quantile_estimate"].null_count() == 4
        assert (rounds["num_kept"] == rounds["num_selected"]).all()
    aggregated = clients.filter(pl.col("status") == "aggregated").group_by("round").len()
    counts = rounds.join(aggregated, on="round", how="left")["len"].fill_null(0)
    assert counts.to_list() == rounds["num_aggregated"].to_list()
    # the model learns: after 4 rounds the training devices' mean loss is lower
    evals = pl.read_parquet(out / "eval.parquet").filter(pl.col("split") == "train")
    before, after = (evals.filter(pl.col("round") == r)["loss"].mean() for r in (0, 4))
    assert after < before, (before, after)


@pytest.mark.parametrize("overrides, exact", [
    (('aggregator.name="fedprox"', "aggregator.mu=0.0"), True),
    (('aggregator.name="term"', "aggregator.tilt=0.0"), True),
    # λ_k = n_k / Σ n normalised again on the cohort: equal to α up to rounding.
    (('aggregator.name="afl"', "aggregator.lambda_step=0.0"), False),
], ids=["fedprox_mu0", "term_tilt0", "afl_step0"])
def test_degenerate_hyperparameters_reproduce_fedavg(tmp_path: Path, overrides: tuple[str, ...],
                                                     exact: bool) -> None:
    rule = pl.read_parquet(run_tiny(tmp_path, "rule", *overrides) / "eval.parquet")
    avg = pl.read_parquet(run_tiny(tmp_path, "fedavg") / "eval.parquet")
    # The same clients train; TERM and AFL ask for loss reports, which only take time.
    assert rule.drop("t_s", "loss").equals(avg.drop("t_s", "loss"))
    if exact:
        assert rule["loss"].equals(avg["loss"])
    np.testing.assert_allclose(rule["loss"], avg["loss"], rtol=1e-5)


def test_fedprox_mu_reaches_local_training(tmp_path: Path) -> None:
    prox = pl.read_parquet(run_tiny(tmp_path, "prox", 'aggregator.name="fedprox"',
                                    "aggregator.mu=10.0") / "eval.parquet")
    avg = pl.read_parquet(run_tiny(tmp_path, "fedavg") / "eval.parquet")
    assert not prox["loss"].equals(avg["loss"])


@pytest.mark.parametrize("rule", ["fedavg_sub", "deltafl"])
def test_phone_speeds_move_the_clock_not_the_training_of_a_synchronous_run(
        tmp_path: Path, rule: str) -> None:
    """Devices always online, no deadline: how fast the phones are sets the simulated time
    of each round, never who is drawn or what they train (the papers' tables depend only
    on the latter; docs/reproduction.md, "The H100 runs")."""
    lognormal = ('population.compute.speed_source="lognormal"',)  # with or without the data
    fast = run_tiny(tmp_path, "fast", f'aggregator.name="{rule}"', *lognormal,
                    "population.compute.speed_log_sigma=0.1")
    spread = run_tiny(tmp_path, "spread", f'aggregator.name="{rule}"', *lognormal,
                      "population.compute.speed_log_sigma=2.0")
    cols = ["round", "client_id", "status", "train_loss", "num_samples", "bytes_up"]
    a, b = (pl.read_parquet(out / "clients.parquet").select(cols).sort("round", "client_id")
            for out in (fast, spread))
    assert a.height == (16 if rule == "deltafl" else 8)  # 4 rounds of 4 (fedavg_sub: 2)
    assert a.equals(b)
    evals = [pl.read_parquet(out / "eval.parquet").sort("round", "split", "client_id")["error"]
             for out in (fast, spread)]
    assert evals[0].equals(evals[1])
    t_end = [pl.read_parquet(out / "rounds.parquet")["t_end_s"] for out in (fast, spread)]
    assert (t_end[0] != t_end[1]).all()

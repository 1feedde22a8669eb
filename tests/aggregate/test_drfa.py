"""DRFA: a hand-computed round, λ on the simplex over many rounds, and the rules that
cannot run without their state."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest
import torch

from simfl.aggregate import RoundInputs, afl, drfa, qffl
from tests.aggregate.helpers import COHORT, DELTAS, GLOBAL, LOSSES, WEIGHTS, close, inputs


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

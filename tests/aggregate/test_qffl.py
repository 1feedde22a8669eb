"""q-FFL: hand-computed cases, q = 0 as the uniform mean and large q as the worst client."""

from __future__ import annotations

import numpy as np
import torch

from simfl.aggregate import fedavg, qffl
from tests.aggregate.helpers import DELTAS, GLOBAL, close, inputs


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

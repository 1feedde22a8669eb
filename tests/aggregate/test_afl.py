"""AFL: a hand-computed step of the model and of λ, and its degenerate cases."""

from __future__ import annotations

import numpy as np
import torch

from simfl.aggregate import afl, fedavg
from tests.aggregate.helpers import GLOBAL, close, inputs

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

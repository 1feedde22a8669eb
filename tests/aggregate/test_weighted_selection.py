"""Selection ∝ the rule's weights: availability draws only devices of positive weight, in
proportion, and the server asks the learner for the weights and the cohort share."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from simfl.population import always_online, sample_online
from simfl.scenario import ServerConfig
from tests.sim.test_server import FakeLearner, paths, simulate


def test_weighted_sampling_draws_only_positive_weights_in_proportion() -> None:
    availability = always_online(np.zeros(6, dtype=np.int64), 1)
    weights = np.array([0.0, 1.0, 0.0, 3.0, 0.0, 0.0])
    counts = np.zeros(6)
    for seed in range(2000):
        [device] = sample_online(availability, 0.0, 1, np.random.default_rng(seed), None, weights)
        counts[device] += 1
    assert counts[[0, 2, 4, 5]].sum() == 0
    # P(device 3) = 3/4: 1500 of 2000 expected, sd = sqrt(2000 · 3/4 · 1/4) ≈ 19.4.
    assert abs(counts[3] - 1500) < 4 * 19.4
    # Asking for more than the positive-weight eligible devices returns just those.
    busy = np.zeros(6, dtype=bool)
    busy[1] = True
    np.testing.assert_array_equal(
        sample_online(availability, 0.0, 4, np.random.default_rng(0), busy, weights), [3])


def test_uniform_sampling_is_unchanged_without_weights() -> None:
    availability = always_online(np.zeros(50, dtype=np.int64), 1)
    for k in (3, 40):
        a = sample_online(availability, 0.0, k, np.random.default_rng(7))
        b = sample_online(availability, 0.0, k, np.random.default_rng(7), None, None)
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

"""The first-order availability term: by hand on five devices, against the online
quantile simulated on a large population, and the oracle rates rebuilt from a run's
tables equal to the model's."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import polars as pl
import pytest

import simfl
from simfl.quantile import weighted_quantile
from simfl.study.theory import oracle_rates, predicted_term, run_points, weighted_density


def test_the_prediction_by_hand_on_five_devices() -> None:
    # losses 1..5 of equal weight, level 0.5: Q = 3 (F(3) = 0.6); the first two always
    # online, the rest half the time: F_on(3) = (1 + 1 + 0.5) / 3.5 = 0.7143.
    # Density at 3: mean 3, sd √2 (IQR 4 − 2 = 2, /1.34 = 1.49 > √2), n = 5, so
    # h = 0.9 √2 5^(-1/5) = 0.92249 and f(3) = Σ φ((3 − x_i)/h) / (5 h) = 0.19911.
    losses, alpha = np.array([1.0, 2, 3, 4, 5]), np.ones(5)
    assert weighted_density(losses, alpha, 3.0) == pytest.approx(0.19911, abs=1e-5)
    term = predicted_term(losses, alpha, np.array([1, 1, 0.5, 0.5, 0.5]), 0.5)
    assert term == pytest.approx(-(2.5 / 3.5 - 0.6) / 0.19911, rel=1e-4)
    # every device equally often online: no term
    assert predicted_term(losses, alpha, np.full(5, 0.3), 0.5) == 0.0


def test_the_prediction_matches_the_online_quantile_on_a_large_population() -> None:
    """Devices online with probabilities tied to their losses: the mean of the online
    devices' weighted quantile, less the population's, against the first-order term."""
    rng = np.random.default_rng(0)
    n = 20_000
    losses = rng.gamma(4.0, 0.5, n)
    alpha = rng.uniform(0.5, 1.5, n)
    rank = losses.argsort().argsort() / n
    pi = 0.15 + 0.2 * (1 - rank)  # low losses online more
    q = weighted_quantile(losses, alpha, 0.5)
    shifts = [weighted_quantile(losses[on], alpha[on], 0.5) - q
              for on in (rng.random((40, n)) < pi)]
    predicted = predicted_term(losses, alpha, pi, 0.5)
    assert predicted < -0.05
    assert np.mean(shifts) == pytest.approx(predicted, rel=0.1)


SCENARIO = """
seed = 4
[data.synthetic]
num_clients = 60
[aggregator]
name = "deltafl"
theta = 0.5
[estimator]
bias_every = 4
decomposition_draws = 5
[server]
num_rounds = 8
clients_per_round = 6
round_interval_s = 3600.0
[eval]
every = 4
[population.availability]
mode = "habits"
horizon_s = 172800.0
[population.availability.habits]
covariate_correlation = 0.6
weekend_logit_shift = [0.5]
charge_prob = 0.3
"""


@pytest.mark.slow
def test_oracle_rates_rebuilt_from_the_tables_are_the_models(tmp_path: Path) -> None:
    path = tmp_path / "s.toml"
    path.write_text(SCENARIO)
    scenario = simfl.load_scenario(path)
    run = simfl.simulate(scenario, tmp_path / "run")
    from simfl.population import known_rates
    from simfl.runs.run import scenario_population

    population = scenario_population(scenario)
    truth = known_rates(scenario.population.availability, population.devices,
                        population.habits)
    manifest = json.loads((tmp_path / "run" / "manifest.json").read_text())
    rebuilt = oracle_rates(manifest, run.devices)
    idx = np.arange(population.devices.num_devices)
    for t in (0.0, 5 * 3600.0, 4.9 * 86400.0, 5.3 * 86400.0):  # a weekday, a Saturday
        np.testing.assert_allclose(rebuilt.online_prob(idx, t), truth.online_prob(idx, t),
                                   rtol=1e-12)
    points = run_points(tmp_path / "run", (4, 8))
    assert points["round"].to_list() == [4] and points["loss_round"].to_list() == [4]
    assert np.isfinite(points["predicted"].to_numpy()).all()
    assert pl.read_parquet(tmp_path / "run" / "bias.parquet").height > 0


@pytest.mark.slow
def test_a_kept_run_gives_the_same_points(tmp_path: Path) -> None:
    """What --keep writes (the devices' columns and the losses at the bias rounds that
    are evaluation rounds) reproduces the run folder's points at those rounds."""
    from simfl.study.theory import KEPT, keep

    path = tmp_path / "s.toml"
    path.write_text(SCENARIO)
    simfl.simulate(simfl.load_scenario(path), tmp_path / "runs" / "run")
    kept = keep(tmp_path / "runs" / "run", tmp_path / "kept")
    assert sorted(p.name for p in kept.iterdir()) == ["bias.parquet", "manifest.json", KEPT]
    whole = run_points(tmp_path / "runs" / "run", (4, 5))
    small = run_points(kept, (4, 5))
    assert whole["round"].to_list() == small["round"].to_list() == [4]
    np.testing.assert_allclose(small["predicted"], whole["predicted"], rtol=1e-5)

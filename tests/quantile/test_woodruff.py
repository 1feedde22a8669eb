"""Woodruff intervals (simfl.quantile.woodruff): a hand-worked 5-device interval, 95 %
coverage of the population quantile by cohort_exact's on a stationary population, the
weights each built-in estimator exposes, the bias.parquet columns of a tiny run and the
coverage command (simfl.study.coverage) on it."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from simfl.cli import main
from simfl.plugins import PluginBroke
from simfl.quantile.estimators import IPW, Cohort, CohortExact, Estimate, PostStratified
from simfl.quantile.kernels import weighted_quantile
from simfl.quantile.panel import EstimatorPanel, check_estimate
from simfl.quantile.woodruff import woodruff_interval
from simfl.rng import Streams
from simfl.scenario import EstimatorConfig
from simfl.study import coverage

RNG = np.random.default_rng(0)


@pytest.mark.parametrize(("z", "expected"), [(1.959963984540054, (1.0, 5.0)), (1.0, (2.0, 4.0)),
                                             (0.6, (3.0, 4.0))])
def test_a_hand_worked_five_device_interval(z: float, expected: tuple[float, float]) -> None:
    # sorted losses 1, 2, 3, 4, 5 with normalised weights 1/6, 1/6, 1/6, 1/3, 1/6: the
    # cumulative weights 1/6, 1/3, 1/2, 5/6, 1 reach p = 0.5 at 3, so η̂ = 3 and every
    # 1[y ≤ 3] − 0.5 is ±0.5: V̂ = 0.25 (4/36 + 1/9) = 1/18, √V̂ = 0.2357. z = 1.96:
    # levels 0.038 and 0.962, losses 1 and 5; z = 1: 0.264 and 0.736, losses 2 and 4;
    # z = 0.6: 0.359 and 0.641, losses 3 and 4
    losses, weights = np.array([3.0, 1.0, 4.0, 2.0, 5.0]), np.array([1.0, 1.0, 2.0, 1.0, 1.0])
    assert woodruff_interval(losses, weights, 0.5, z) == expected
    assert woodruff_interval(losses, weights * 7.0, 0.5, z) == expected  # scale-free
    assert all(map(math.isnan, woodruff_interval(np.array([1.0, np.nan]), np.ones(2), 0.5)))


def test_cohort_exact_covers_the_population_quantile_95_percent_of_the_time() -> None:
    """Uniform random cohorts of 50 to 200 from a stationary population with unequal
    device weights; measured 95.2 % (binomial sd 0.5 points at 2,000 cohorts)."""
    rng = np.random.default_rng(1)
    n, level = 5000, 0.5
    losses, alpha = rng.gamma(2.0, 1.0, n), rng.lognormal(0.0, 0.8, n)
    alpha /= alpha.mean()
    target = weighted_quantile(losses, alpha, level)
    covered = []
    for _ in range(2000):
        idx = rng.choice(n, rng.integers(50, 201), replace=False)
        made = CohortExact().estimate(Cohort(losses[idx], alpha[idx], idx, 0.0), level, RNG)
        assert made.weights is not None
        low, high = woodruff_interval(losses[idx], made.weights, level)
        assert low <= made.threshold <= high
        covered.append(low <= target <= high)
    assert np.mean(covered) == pytest.approx(0.95, abs=0.02)


class _Rates:
    def online_prob(self, device_idx: np.ndarray, t_s: float) -> np.ndarray:
        return 0.2 + 0.1 * device_idx


def test_each_estimator_exposes_the_weights_of_its_quantile() -> None:
    cohort = Cohort(np.array([0.5, 3.0, 2.0, 1.0, 4.0, 2.5]), np.array([1.0, 2, 1, 1, 3, 1]),
                    np.arange(6), 0.0)
    ipw = IPW(_Rates()).estimate(cohort, 0.5, RNG)
    assert np.array_equal(ipw.weights, cohort.weights / (0.2 + 0.1 * np.arange(6)))
    strat = PostStratified(np.array([0, 0, 1, 1, 1, 1, 0, 0])).estimate(cohort, 0.5, RNG)
    # stratum 0 has 4 devices, 2 in the cohort; stratum 1 has 4, all 4 in it
    assert np.array_equal(strat.weights, cohort.weights * [2, 2, 1, 1, 1, 1])
    for made in (ipw, strat):
        assert made.threshold == weighted_quantile(cohort.losses, made.weights, 0.5)
    cfg = EstimatorConfig(name="cohort_exact", shadow=("secure_mm", "secure_bisection",
                                                       "tracking", "population_quantile"))
    panel = EstimatorPanel(cfg, 0.5, 6, Streams(0))
    estimates = panel.estimate(cohort, 0, cohort)
    cols = panel.bias_columns(0, cohort, estimates, None)
    ci = dict(zip(cols["estimator"], zip(cols["ci_low"], cols["ci_high"], strict=True),
                  strict=True))
    # the secure protocols keep cohort_exact's set: its interval, from the same weights
    assert ci["secure_mm"] == ci["secure_bisection"] == ci["cohort_exact"] == \
        woodruff_interval(cohort.losses, cohort.weights, 0.5)
    assert all(map(math.isnan, ci["tracking"]))  # no weights: no interval
    q = estimates["population_quantile"].threshold
    assert ci["population_quantile"] == (q, q)  # a census: no sampling error


def test_a_plugins_weights_must_fit_the_losses_it_saw() -> None:
    who = "'estimator.name' = 'mine' (mine:factory)"
    check_estimate(Estimate(1.0, weights=np.ones(3)), who, 3)
    for bad in (np.ones(2), -np.ones(3), np.array([1.0, np.inf, 1.0]), np.zeros(3),
                np.array(["a", "b", "c"])):
        with pytest.raises(PluginBroke, match="its estimate returned the weights"):
            check_estimate(Estimate(1.0, weights=bad), who, 3)


SCENARIO = """
seed = 3
[data.synthetic]
num_clients = 40
[aggregator]
name = "deltafl"
theta = 0.5
[estimator]
name = "cohort_exact"
shadow = ["secure_bisection", "tracking", "ipw", "model_assisted"]
bias_every = 2
decomposition_draws = 4
[server]
num_rounds = 6
clients_per_round = 8
[eval]
every = 6
"""


def test_a_run_writes_the_intervals_and_the_coverage_command_reads_them(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    scenario = tmp_path / "s.toml"
    scenario.write_text(SCENARIO)
    assert main([str(scenario), "--out", str(tmp_path / "run"), "--quiet"]) == 0
    bias = pl.read_parquet(tmp_path / "run" / "bias.parquet")
    with_interval = bias.filter(pl.col("estimator").is_in(["cohort_exact", "ipw",
                                                           "secure_bisection"]))
    assert len(with_interval) == 18 and with_interval["ci_low"].null_count() == 0
    exact = bias.filter(pl.col("estimator") == "cohort_exact")
    assert ((exact["ci_low"] <= exact["estimate"]) & (exact["estimate"] <= exact["ci_high"])).all()
    assert bias.filter(pl.col("estimator").is_in(["tracking", "model_assisted"]))[
        "ci_low"].null_count() == 12
    capsys.readouterr()
    assert coverage.main([str(tmp_path / "run")]) == 0
    lines = capsys.readouterr().out.splitlines()
    rows = {line.split(" | ")[0].strip("| "): line for line in lines[2:]}
    assert set(rows) == {"cohort_exact", "ipw", "secure_bisection", "tracking",
                         "model_assisted"}
    assert "| 1 | 3 | 100 % |" in rows["cohort_exact"]  # one run, rounds 0, 2, 4
    assert "| 0 % | — |" in rows["tracking"]
    table = coverage.coverage_table(coverage.read_bias([tmp_path]))  # a sweep's folder
    row = table.filter(pl.col("estimator") == "cohort_exact").row(0, named=True)
    rounds = exact.filter(pl.col("oracle_quantile").is_not_null())
    held = ((rounds["ci_low"] <= rounds["oracle_quantile"])
            & (rounds["oracle_quantile"] <= rounds["ci_high"])).mean()
    assert row["coverage"] == pytest.approx(held) and row["runs"] == 1
    assert math.isnan(row["run_half"])  # one run: no spread across runs
    assert coverage.main([str(tmp_path / "nowhere")]) == 2

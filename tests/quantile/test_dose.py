"""The dose of a dose-response: ``shifted`` moves its base's threshold by exactly the
configured offset and level shift, in hand-checked cohorts and in a run's tables."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import polars as pl
import pytest

from simfl.cli import main
from simfl.errors import InputError
from simfl.quantile.dose import Shifted, dose
from simfl.quantile.estimators import Cohort, CohortExact
from simfl.quantile.panel import EstimatorPanel
from simfl.rng import Streams
from simfl.scenario import EstimatorConfig, ShiftedConfig

RNG = np.random.default_rng(0)  # unused by cohort_exact
# four devices of equal weight: the lower quantile at level 0.5 is 2, at 0.75 is 3
COHORT = Cohort(np.array([4.0, 1.0, 3.0, 2.0]), np.ones(4), np.arange(4), 0.0)


@pytest.mark.parametrize(("offset", "shift", "expected"), [
    (0.0, 0.0, 2.0), (0.1, 0.0, 2.1), (-0.3, 0.0, 1.7),
    (0.0, 0.25, 3.0), (0.0, -0.25, 1.0), (0.5, 0.25, 3.5),
    (0.0, 0.9, 4.0), (0.0, -0.9, 1.0),  # clipped to levels 1 and 0
])
def test_shifted_threshold_is_the_base_quantile_at_the_shifted_level_plus_the_offset(
        offset: float, shift: float, expected: float) -> None:
    made = Shifted(CohortExact(), offset, shift).estimate(COHORT, 0.5, RNG, 0)
    assert made.threshold == pytest.approx(expected, abs=1e-15)
    assert made.state == 1  # one round estimated
    assert dose(Shifted(CohortExact(), offset, shift), 0) == (offset, shift)
    assert dose(CohortExact(), 0) == (0.0, 0.0)


def test_before_from_round_the_threshold_is_the_base_alone() -> None:
    late = Shifted(CohortExact(), 0.5, 0.25, from_round=3)
    assert [late.estimate(COHORT, 0.5, RNG, r).threshold for r in range(5)] == \
        [2.0, 2.0, 2.0, 3.5, 3.5]
    assert [dose(late, r) for r in (2, 3)] == [(0.0, 0.0), (0.5, 0.25)]


def test_the_panel_builds_shifted_around_its_base_and_refuses_a_stateful_base() -> None:
    cfg = EstimatorConfig(name="shifted", shifted=ShiftedConfig("secure_bisection", 0.2, 0.1))
    panel = EstimatorPanel(cfg, 0.5, 4, Streams(0))
    made = panel.estimate(COHORT, 0)["shifted"]
    # secure_bisection at level 0.6 keeps exactly cohort_exact's set there (losses >= 3)
    # with a threshold in (2, 3]; the offset moves that threshold by 0.2
    assert 2.0 + 0.2 < made.threshold <= 3.0 + 0.2
    assert np.array_equal(COHORT.losses >= made.threshold - 0.2, COHORT.losses >= 3.0)
    assert made.secure_sums > 0  # the base's protocol, unchanged
    with pytest.raises(InputError, match="estimator.shifted.base"):
        EstimatorPanel(EstimatorConfig(name="shifted", shifted=ShiftedConfig("tracking")),
                       0.5, 4, Streams(0))


SCENARIO = """
seed = 3
[data.synthetic]
num_clients = 40
[aggregator]
name = "deltafl"
theta = 0.5
[estimator]
name = "shifted"
shadow = ["cohort_exact"]
bias_every = 2
[estimator.shifted]
offset_nats = 0.25
from_round = 2
[server]
num_rounds = 6
clients_per_round = 8
[eval]
every = 6
"""


def test_a_run_filters_on_the_shifted_threshold_and_records_the_dose(tmp_path: Path) -> None:
    scenario = tmp_path / "s.toml"
    scenario.write_text(SCENARIO)
    assert main([str(scenario), "--out", str(tmp_path / "run"), "--quiet"]) == 0
    bias = pl.read_parquet(tmp_path / "run" / "bias.parquet")
    driver = bias.filter(pl.col("driver")).sort("round")
    base = bias.filter(pl.col("estimator") == "cohort_exact").sort("round")
    assert driver["estimator"].unique().to_list() == ["shifted"]
    assert len(driver) == 6
    # rounds 0 and 1 use cohort_exact's threshold, rounds 2 to 5 add the offset
    np.testing.assert_allclose(driver["estimate"] - base["estimate"], [0.0] * 2 + [0.25] * 4,
                               atol=1e-12)
    assert driver["offset_nats"].to_list() == [0.0] * 2 + [0.25] * 4
    assert base["offset_nats"].to_list() == [0.0] * 6
    rounds = pl.read_parquet(tmp_path / "run" / "rounds.parquet").sort("round")
    assert rounds["quantile_estimate"].to_list() == driver["estimate"].to_list()
    bias_rounds = driver.filter(pl.col("oracle_quantile").is_not_null())
    # the bias carries the dose: shifted's is cohort_exact's plus the offset
    assert bias_rounds["round"].to_list() == [0, 2, 4]
    np.testing.assert_allclose(
        bias_rounds["bias"] - base.filter(pl.col("oracle_quantile").is_not_null())["bias"],
        [0.0, 0.25, 0.25], atol=1e-12)

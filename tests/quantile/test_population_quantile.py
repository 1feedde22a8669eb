"""The oracle driver ``population_quantile``: its threshold is Q_pop itself, every round,
from an evaluation of every training device (no server has it: the study's ceiling)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import polars as pl

from simfl.cli import main
from simfl.quantile.estimators import Cohort, PopulationQuantile
from simfl.quantile.panel import EstimatorPanel
from simfl.rng import Streams
from simfl.scenario import EstimatorConfig

SCENARIO = """
seed = 5
[data.synthetic]
num_clients = 40
[aggregator]
name = "deltafl"
theta = 0.5
[estimator]
name = "population_quantile"
shadow = ["cohort_exact"]
bias_every = 1
decomposition_draws = 3
[server]
num_rounds = 5
clients_per_round = 6
[eval]
every = 5
"""


def test_the_panel_gives_the_oracle_the_population_and_the_others_the_cohort() -> None:
    panel = EstimatorPanel(EstimatorConfig(name="population_quantile", shadow=("cohort_exact",)),
                           0.5, 4, Streams(0))
    assert panel.reads_population
    cohort = Cohort(np.array([4.0, 1.0]), np.ones(2), np.array([0, 1]), 0.0)
    everyone = Cohort(np.array([4.0, 1.0, 3.0, 2.0]), np.ones(4), np.arange(4), 0.0)
    made = panel.estimate(cohort, 0, everyone)
    assert made["population_quantile"].threshold == 2.0  # the lower median of 1, 2, 3, 4
    assert made["cohort_exact"].threshold == 1.0  # the lower median of 1, 4
    assert PopulationQuantile().losses_in_clear


def test_a_run_driven_by_the_population_quantile_has_no_bias(tmp_path: Path) -> None:
    scenario = tmp_path / "s.toml"
    scenario.write_text(SCENARIO)
    assert main([str(scenario), "--out", str(tmp_path / "run"), "--quiet"]) == 0
    bias = pl.read_parquet(tmp_path / "run" / "bias.parquet")
    driver = bias.filter(pl.col("driver")).sort("round")
    assert driver["estimator"].unique().to_list() == ["population_quantile"]
    assert len(driver) == 5
    np.testing.assert_allclose(driver["bias"], 0.0, atol=1e-12)
    # its decomposition: no sampling, availability or selection term
    for term in ("sampling_bias", "availability_bias", "selection_bias"):
        np.testing.assert_allclose(driver[term], 0.0, atol=1e-12)
    shadow = bias.filter(pl.col("estimator") == "cohort_exact")
    assert np.abs(shadow["bias"].to_numpy()).max() > 0  # a cohort of 6 misses Q_pop

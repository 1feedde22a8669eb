"""The registry is the one place that knows what a rule is: no aggregation rule's name is
compared outside its own entry, and a plug-in rule that filters by the estimator panel's
threshold gets what Δ-FL gets (the panel, its shadows, bias.parquet)."""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from simfl import plugins
from simfl.cli import main

PACKAGE = Path(__file__).resolve().parents[1] / "simfl"


def test_no_rule_name_is_compared_outside_the_registry() -> None:
    names = "|".join(re.escape(p.name) for p in plugins.AGGREGATORS.builtins())
    quoted = rf"""["']({names})["']"""
    compared = re.compile(rf"(==|!=|\bin)\s*\(?\s*{quoted}|{quoted}\s*(==|!=|in\b)")
    found = [f"{path.relative_to(PACKAGE.parent)}:{i}: {line.strip()}"
             for path in PACKAGE.rglob("*.py")
             if path.name != "plugins.py" and "aggregate" not in path.parts
             for i, line in enumerate(path.read_text().splitlines(), 1)
             if compared.search(line)]
    assert found == []


SCENARIO = """
seed = 2
[data.synthetic]
num_clients = 40
[aggregator]
name = "tailrules:tail_average"
theta = 0.5
[estimator]
name = "ipw"
shadow = ["cohort_exact"]
bias_every = 2
decomposition_draws = 4
[server]
num_rounds = 4
clients_per_round = 8
[eval]
every = 4
"""


def test_a_plugin_rule_that_filters_by_threshold_gets_the_panel(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "tailrules.py").write_text(textwrap.dedent('''
        from simfl.aggregate.deltafl import deltafl

        def tail_average(theta):
            """Δ-FL's mean of the kept updates, as a user would wrap it."""
            return deltafl(theta)

        tail_average.filters_by_threshold = True
    '''))
    monkeypatch.syspath_prepend(str(tmp_path))
    scenario = tmp_path / "s.toml"
    scenario.write_text(SCENARIO)
    assert main([str(scenario), "--out", str(tmp_path / "run"), "--quiet"]) == 0
    bias = pl.read_parquet(tmp_path / "run" / "bias.parquet")
    assert sorted(bias["estimator"].unique().to_list()) == ["cohort_exact", "ipw"]
    assert bias.filter(pl.col("driver"))["estimator"].unique().to_list() == ["ipw"]
    rounds = pl.read_parquet(tmp_path / "run" / "rounds.parquet").sort("round")
    driver = bias.filter(pl.col("driver")).sort("round")
    np.testing.assert_array_equal(rounds["quantile_estimate"], driver["estimate"])
    assert driver.filter(pl.col("oracle_quantile").is_not_null())["round"].to_list() == [0, 2]

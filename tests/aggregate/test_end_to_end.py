"""Every rule runs a small scenario end to end, always online and diurnal; degenerate
hyperparameters reproduce FedAvg; phone speeds move the clock, not the training."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import polars as pl
import pytest

from simfl.runs.run import run_scenario
from simfl.scenario import load_scenario

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


@pytest.fixture(scope="module")
def fedavg_eval(tmp_path_factory: pytest.TempPathFactory) -> pl.DataFrame:
    """eval.parquet of the tiny scenario under FedAvg, run once for the tests that compare
    a rule with it."""
    return pl.read_parquet(run_tiny(tmp_path_factory.mktemp("fedavg"), "fedavg") / "eval.parquet")


@pytest.mark.parametrize("overrides, exact", [
    (('aggregator.name="fedprox"', "aggregator.mu=0.0"), True),
    (('aggregator.name="term"', "aggregator.tilt=0.0"), True),
    # λ_k = n_k / Σ n normalised again on the cohort: equal to α up to rounding.
    (('aggregator.name="afl"', "aggregator.lambda_step=0.0"), False),
], ids=["fedprox_mu0", "term_tilt0", "afl_step0"])
def test_degenerate_hyperparameters_reproduce_fedavg(
        tmp_path: Path, overrides: tuple[str, ...], exact: bool, fedavg_eval: pl.DataFrame) -> None:
    rule = pl.read_parquet(run_tiny(tmp_path, "rule", *overrides) / "eval.parquet")
    avg = fedavg_eval
    # The same clients train; TERM and AFL ask for loss reports, which only take time.
    assert rule.drop("t_s", "loss").equals(avg.drop("t_s", "loss"))
    if exact:
        assert rule["loss"].equals(avg["loss"])
    np.testing.assert_allclose(rule["loss"], avg["loss"], rtol=1e-5)


def test_fedprox_mu_reaches_local_training(tmp_path: Path, fedavg_eval: pl.DataFrame) -> None:
    prox = pl.read_parquet(run_tiny(tmp_path, "prox", 'aggregator.name="fedprox"',
                                    "aggregator.mu=10.0") / "eval.parquet")
    assert not prox["loss"].equals(fedavg_eval["loss"])


@pytest.mark.parametrize("rule", ["fedavg_sub", "deltafl"])
def test_phone_speeds_move_the_clock_not_the_training_of_a_synchronous_run(
        tmp_path: Path, rule: str) -> None:
    """Devices always online, no deadline: how fast the phones are sets the simulated time
    of each round, never who is drawn or what they train (the papers' tables depend only
    on the latter; docs/reproduction/convnet_gpu.md)."""
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

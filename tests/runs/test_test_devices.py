"""Unseen test devices are devices: a region, availability habits, compute and links drawn
like the training devices' (from streams of their own, so the training devices' draws stay
as they were), rows of devices.parquet with split "test" that eval.parquet joins on
(client_id, split), and never selected by the server."""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from scipy import stats

import simfl
from simfl.metrics import error_summary
from simfl.population.build import build_population, build_unseen
from simfl.population.devices import region_counts
from simfl.population.trace import write_trace
from simfl.rng import Streams
from simfl.scenario import AvailabilityConfig, PopulationConfig, Region

# devices.parquet of a small run (habits, regions by covariate) written by the code before
# the unseen devices were drawn: its rows are the training devices (tests/golden)
GOLDEN = json.loads((Path(__file__).parents[1] / "golden" / "train_devices_before.json")
                    .read_text())
REGIONS = (Region("a", -5.0, 0.2), Region("b", 1.0, 0.3, link_scale=0.5), Region("c", 8.0, 0.5))
SHARES = np.array([r.share for r in REGIONS])


@pytest.fixture(autouse=True, scope="module")
def _no_data_dir() -> object:
    """Built-in device speeds, whatever $SIMFL_DATA_DIR says (the golden rows were)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.delenv("SIMFL_DATA_DIR", raising=False)
        yield


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> simfl.Run:
    """GOLDEN's scenario: 24 synthetic clients, 12 of them unseen test devices."""
    scenario = simfl.load_scenario(GOLDEN["scenario"])
    return simfl.simulate(scenario, tmp_path_factory.mktemp("unseen") / "run")


def test_devices_parquet_has_a_row_per_training_and_test_device(run: simfl.Run) -> None:
    """One row per device of eval.parquet's first evaluation (every device of both
    splits), its id, split, sample count and index as eval has them (test: null)."""
    devices, first = run.devices, run.eval.filter(pl.col("round") == 0)
    assert devices.height == first.height == 24
    assert devices["split"].to_list() == ["train"] * 12 + ["test"] * 12
    for split in ("train", "test"):
        want = first.filter(pl.col("split") == split).sort("client_id")
        got = devices.filter(pl.col("split") == split).sort("client_id")
        for column in ("client_id", "client_idx", "num_samples"):
            assert got[column].to_list() == want[column].to_list(), (split, column)
    test = devices.filter(pl.col("split") == "test")
    assert test["client_idx"].null_count() == 12
    drawn = [c for c in devices.columns
             if c not in ("client_idx", "client_id", "split", "charge_start_h")]  # no charging
    assert all(test[c].null_count() == 0 for c in drawn)
    assert (test["speed_rel"] > 0).all() and (test["latency_s"] > 0).all()
    assert test["phase_h"].std() > 0  # habits drawn device by device, as in training


def test_training_rows_are_those_written_before_test_devices_were(run: simfl.Run) -> None:
    """Bit for bit: the unseen devices draw from streams the training devices never read."""
    train = run.devices.filter(pl.col("split") == "train").drop(
        "split", "engaged_share", "charge_start_h")  # columns added since, of no component
    assert train.to_dict(as_series=False) == GOLDEN["rows"]


def test_the_server_selects_training_devices_only(run: simfl.Run) -> None:
    train = run.devices.filter(pl.col("split") == "train")
    assert run.clients.height > 0
    assert set(run.clients["client_id"]) <= set(train["client_id"])
    assert set(run.clients["client_idx"]) <= set(train["client_idx"])


def test_per_region_p90_of_test_devices_is_one_join(run: simfl.Run) -> None:
    """docs/api.md's join against each region's p90 from the eval rows by hand (the
    manifest's linear-interpolation p90, simfl.metrics.error_summary)."""
    last = int(run.eval["round"].max())
    tail = (run.eval.filter((pl.col("split") == "test") & (pl.col("round") == last))
            .join(run.devices, on=["client_id", "split"])
            .group_by("region").agg(pl.col("error").quantile(0.9, "linear").alias("p90"),
                                    pl.len().alias("devices")))
    region_of = {cid: region for cid, region, split in
                 run.devices.select("client_id", "region", "split").iter_rows() if split == "test"}
    errors: dict[str, list[float]] = defaultdict(list)
    for cid, split, rnd, error in run.eval.select("client_id", "split", "round",
                                                  "error").iter_rows():
        if split == "test" and rnd == last:
            errors[region_of[cid]].append(error)
    assert sum(tail["devices"]) == 12 and len(errors) == tail.height
    for region, p90 in zip(tail["region"], tail["p90"], strict=True):
        assert p90 == pytest.approx(error_summary(np.array(errors[region]))["p90"], abs=1e-12)


def _cfg(mode: str = "always", by_covariate: bool = False) -> PopulationConfig:
    return PopulationConfig(regions=REGIONS, availability=AvailabilityConfig(mode=mode),
                            region_assignment="covariate" if by_covariate else "random")


def test_unseen_regions_follow_the_configured_shares() -> None:
    """Largest-remainder counts of the shares (|count − share M| < 1), each device's
    region random: over 400 seeds the share of seeds putting device d in region r is
    share_r within 4 binomial standard errors (sqrt(s (1 − s) / 400) <= 0.025)."""
    unseen = build_unseen(_cfg(), 5003, None, Streams(0), "linear").devices
    counts = np.bincount(unseen.region_idx, minlength=3)
    assert counts.tolist() == region_counts(SHARES, 5003).tolist()
    assert np.all(np.abs(counts - SHARES * 5003) < 1)
    seeds = 400
    first = np.array([build_unseen(_cfg(), 10, None, Streams(s), "linear").devices.region_idx[:3]
                      for s in range(seeds)])  # (seeds, 3): devices 0, 1, 2
    for d in range(3):
        share = np.bincount(first[:, d], minlength=3) / seeds
        assert np.all(np.abs(share - SHARES) <= 4 * np.sqrt(SHARES * (1 - SHARES) / seeds)), d


def test_unseen_devices_are_drawn_like_the_training_devices_not_as_copies() -> None:
    """Same distributions (two-sample Kolmogorov–Smirnov, p > 0.001, 3,000 devices a
    side) of speed, links (link_scale per region included), latency and habits; the
    draws themselves independent (Spearman |ρ| < 4 / sqrt(3000) device by device)."""
    cfg = PopulationConfig(regions=REGIONS, availability=AvailabilityConfig(
        mode="habits", horizon_s=3600.0))
    population = build_population(cfg, 3000, None, Streams(11), "linear", 3000)
    assert population.unseen is not None
    train, unseen = population.devices, population.unseen.devices
    for column in ("speed_rel", "down_bytes_per_s", "up_bytes_per_s", "latency_s"):
        a, b = getattr(train, column), getattr(unseen, column)
        assert stats.ks_2samp(a, b).pvalue > 1e-3, column
        assert abs(stats.spearmanr(a, b).statistic) < 4 / np.sqrt(3000), column
    habits, unseen_habits = population.habits, population.unseen.habits
    assert habits is not None and unseen_habits is not None
    assert stats.ks_2samp(habits.phase_s, unseen_habits.phase_s).pvalue > 1e-3
    assert abs(stats.spearmanr(habits.phase_s, unseen_habits.phase_s).statistic) < 4 / np.sqrt(3000)


def test_the_unseen_devices_leave_the_training_population_alone() -> None:
    """With or without unseen devices the training devices, habits, availability
    intervals and covariate are the same arrays; the server's availability holds the
    training devices only. Regions by covariate: the unseen devices' own (strength 1:
    sorted)."""
    cfg = _cfg("habits", by_covariate=True)
    covariate = np.random.default_rng(0).random(40)
    alone = build_population(cfg, 40, covariate, Streams(7), "linear")
    both = build_population(cfg, 40, covariate, Streams(7), "linear", 25, np.arange(25.0))
    assert alone.unseen is None and both.unseen is not None
    for name, column in alone.devices.columns().items():
        np.testing.assert_array_equal(column, both.devices.columns()[name], err_msg=name)
    for name in ("logit_shift", "phase_s", "session_mean_s"):
        np.testing.assert_array_equal(getattr(alone.habits, name), getattr(both.habits, name))
    for name in ("offsets", "t_on_s", "t_off_s"):
        np.testing.assert_array_equal(getattr(alone.availability, name),
                                      getattr(both.availability, name))
    assert both.availability.num_devices == 40 and both.unseen.devices.num_devices == 25
    assert np.all(np.diff(both.unseen.devices.region_idx) >= 0)
    assert both.unseen.devices.client_idx.tolist() == list(range(25))


def test_a_trace_bounds_the_training_devices_only(tmp_path: Path) -> None:
    """A trace holds the training devices' intervals: unseen devices beyond its device
    count are built all the same (they draw no intervals)."""
    trace = tmp_path / "trace.csv"
    write_trace(trace, np.arange(4), np.zeros(4), np.full(4, 3600.0))
    cfg = PopulationConfig(regions=REGIONS, availability=AvailabilityConfig(
        mode="trace", trace_path=str(trace)))
    population = build_population(cfg, 4, None, Streams(0), "linear", 9)
    assert population.availability.num_devices == 4
    assert population.unseen is not None and population.unseen.devices.num_devices == 9
    assert population.unseen.habits is None

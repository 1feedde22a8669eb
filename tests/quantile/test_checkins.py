"""Realistic check-ins: the server sees a random share of the online devices' check-ins
(``estimator.checkin_share``) and keeps them for a number of days
(``estimator.checkin_memory_days``). At share 1 and memory 0 a run is the one before the
keys existed; a thinned count divided by the share is unbiased; a common factor of the
weights leaves a weighted quantile alone; a record with memory is the record of the
days it keeps."""

from __future__ import annotations

import io
import json
from pathlib import Path

import numpy as np
import polars as pl
import pytest
import torch

from simfl.cli import main
from simfl.errors import InputError
from simfl.quantile.estimators import IPW, CheckIns, Cohort, HistoryStratified
from simfl.quantile.kernels import weighted_quantile
from simfl.quantile.panel import EstimatorPanel, Presence
from simfl.rng import Streams
from simfl.runs.plain import decode, encode
from simfl.scenario import EstimatorConfig, from_dict

HOUR_S, DAY_S = 3600.0, 86400.0
GOLDEN = Path(__file__).parents[1] / "golden" / "checkins_before.json"
# Two regions, habits availability tied to the data, 60 rounds half an hour apart (30
# hours: ipw_days and poststrat_history have a day of history for the last 6 hours).
SCENARIO = """
seed = 5
[data.synthetic]
num_clients = 240
shared_model = 0.0   # the default when the golden file was written (LEAF's generator)
[aggregator]
name = "deltafl"
theta = 0.5
[estimator]
name = "ipw_days"
shadow = ["ipw", "poststrat_history", "cohort_exact", "poststrat"]
bias_every = 5
decomposition_draws = 4
checkin_share = 1.0
checkin_memory_days = 0
[server]
num_rounds = 60
clients_per_round = 20
round_interval_s = 1800.0
[eval]
every = 60
[population.availability]
mode = "habits"
horizon_s = 259200.0
[[population.regions]]
name = "a"
utc_offset_h = 0.0
[[population.regions]]
name = "b"
utc_offset_h = 8.0
[population.availability.habits]
covariate_correlation = 0.8
"""


def test_at_share_one_and_no_memory_a_run_is_the_one_before_the_keys(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every estimate of every check-in reader, to the bit, and every round's kept count,
    as the code before the keys wrote them (tests/golden/checkins_before.json)."""
    monkeypatch.delenv("SIMFL_DATA_DIR", raising=False)  # the built-in device speeds
    scenario = tmp_path / "s.toml"
    scenario.write_text(SCENARIO)
    assert main([str(scenario), "--out", str(tmp_path / "run"), "--quiet"]) == 0
    golden = json.loads(GOLDEN.read_text())
    bias = pl.read_parquet(tmp_path / "run" / "bias.parquet").sort("round", "estimator")
    for name, values in golden["estimate"].items():
        made = bias.filter(pl.col("estimator") == name)["estimate"].to_list()
        assert [float(v).hex() for v in made] == values, name
    rounds = pl.read_parquet(tmp_path / "run" / "rounds.parquet").sort("round")
    assert rounds["num_kept"].to_list() == golden["num_kept"]
    ipw = bias.filter(pl.col("estimator") == "ipw")["estimate"]
    assert (ipw != bias.filter(pl.col("estimator") == "cohort_exact")["estimate"]).sum() > 5


def _presence(n: int, share: float) -> tuple[Presence, CheckIns]:
    """A panel's presence at ``share`` with both records; its earlier days' record."""
    presence = Presence.start(n, EstimatorConfig(checkin_share=share), True, Streams(4))
    assert presence.checkins_days is not None
    return presence, presence.checkins_days


def test_the_records_see_one_random_share_of_the_online_devices() -> None:
    """Both records count the same subset; the decomposition still sees everyone online;
    the subset is keyed by the round's time (drawn again the same) and has about the
    share's size."""
    presence, days = _presence(2000, 0.3)
    online = np.arange(0, 2000, 2)
    presence.online = online
    first = presence.seen(5 * HOUR_S)
    np.testing.assert_array_equal(first, presence.seen(5 * HOUR_S))
    assert not np.array_equal(first, presence.seen(6 * HOUR_S))
    assert np.isin(first, online).all()
    assert abs(first.size / online.size - 0.3) < 4 * np.sqrt(0.3 * 0.7 / online.size)
    presence.observe(5 * HOUR_S, online)
    presence.observe(DAY_S + 5 * HOUR_S, online)  # counts the first round in both records
    np.testing.assert_array_equal(np.flatnonzero(presence.checkins.seen[:, 5]), first)
    np.testing.assert_array_equal(np.flatnonzero(days.seen[:, 5]), first)
    np.testing.assert_array_equal(presence.online, online)
    assert np.array_equal(_presence(10, 1.0)[0].seen(0.0), np.arange(10))  # no draw at share 1


@pytest.mark.parametrize("share", [1.0, 0.3])
def test_a_thinned_count_over_the_share_estimates_the_online_rate(share: float) -> None:
    """Devices online with probability 0.2 or 0.7 at every hour, one round an hour for
    five days: π̂ = (c / s + a) / (n + 2a) has the mean (n π + a) / (n + 2a) whatever the
    share s (4 standard errors; a the Beta prior's 1)."""
    n_dev, days = 4000, 5
    rng = np.random.default_rng(11)
    pi = np.where(np.arange(n_dev) % 2 == 0, 0.2, 0.7)
    presence, record = _presence(n_dev, share)
    for r in range(days * 24 + 1):
        presence.observe(r * HOUR_S, np.flatnonzero(rng.random(n_dev) < pi))
    hat = record.online_prob(np.arange(n_dev), days * DAY_S + 3 * HOUR_S)
    n = days  # rounds at 03:00 UTC on earlier days
    for p in (0.2, 0.7):
        group = hat[pi == p]
        sd = np.sqrt(n * p * (1 - share * p) / share) / (n + 2)  # of (c / s + 1) / (n + 2)
        assert abs(group.mean() - (n * p + 1) / (n + 2)) < 4 * sd / np.sqrt(group.size)


class _Rates:
    def __init__(self, pi: np.ndarray) -> None:
        self.pi = pi

    def online_prob(self, device_idx: np.ndarray, t_s: float) -> np.ndarray:
        return self.pi[device_idx]


def test_a_common_factor_of_the_rates_cancels_in_the_weighted_quantile() -> None:
    """Rates that all are s π (the undivided thinned rates without a prior) give IPW the
    same threshold as π: the quantile of weights c w is that of w."""
    rng = np.random.default_rng(2)
    pi = rng.uniform(0.05, 0.9, 300)
    for _ in range(40):
        idx = rng.choice(300, 30, replace=False)
        cohort = Cohort(rng.gamma(2.0, size=30), rng.lognormal(size=30), idx, 0.0)
        for level in (0.1, 0.5, 0.9):
            full = IPW(_Rates(pi)).estimate(cohort, level, rng).threshold
            assert IPW(_Rates(0.3 * pi)).estimate(cohort, level, rng).threshold == full
            assert full == weighted_quantile(cohort.losses, cohort.weights / pi[idx], level)


def _through_a_checkpoint(state: dict[str, object]) -> dict[str, object]:
    """``state`` written and read back as a checkpoint's (simfl.runs.checkpoint)."""
    buffer = io.BytesIO()
    torch.save(encode(state), buffer)
    buffer.seek(0)
    state_back: dict[str, object] = decode(torch.load(buffer, weights_only=True))
    return state_back


def _feed(record: CheckIns, rounds: list[tuple[float, np.ndarray]]) -> CheckIns:
    for t_s, online in rounds:
        record.observe(t_s, online)
    return record


@pytest.mark.parametrize("earlier_days", [False, True])
def test_a_record_with_memory_counts_the_days_it_keeps(earlier_days: bool) -> None:
    """Six days of rounds every three hours; with memory_days = 2, on day 5 the record
    holds days 3 and 4 (and today's earlier rounds without earlier_days): exactly a
    fresh record fed those rounds only. Read back from a checkpoint it goes on the same."""
    rng = np.random.default_rng(3)
    rounds = [(d * DAY_S + h * HOUR_S, np.flatnonzero(rng.random(50) < 0.4))
              for d in range(6) for h in range(0, 24, 3)]
    kept = _feed(CheckIns(50, earlier_days=earlier_days, memory_days=2), rounds[:-4])
    fresh = _feed(CheckIns(50, earlier_days=earlier_days),
                  [r for r in rounds[:-4] if r[0] >= 3 * DAY_S])
    np.testing.assert_array_equal(kept.seen, fresh.seen)
    np.testing.assert_array_equal(kept.rounds, fresh.rounds)
    assert kept.rounds.sum() == (16 if earlier_days else 19)  # days 3-4 (+ today's 3)
    assert kept.forgotten == 3  # days 0, 1 and 2 dropped
    again = CheckIns(50, earlier_days=earlier_days, memory_days=2)
    again.load_state_dict(_through_a_checkpoint(kept.state_dict()))
    for record in (kept, again):
        _feed(record, rounds[-4:] + [(6 * DAY_S, np.arange(0))])
    np.testing.assert_array_equal(kept.seen, again.seen)
    np.testing.assert_array_equal(kept.rounds, again.rounds)
    assert sorted(again.kept) == [4, 5]  # day 3 dropped on day 6; today's round pending


def test_history_strata_follow_a_forgetting_record() -> None:
    """A day forgotten as another is counted can leave the round counts as they were;
    poststrat_history's strata are still made again from the new counts."""
    record = CheckIns(40, earlier_days=True, memory_days=1)
    strata = HistoryStratified(np.zeros(40, dtype=np.int64), record, bins=2)
    for day, online in enumerate((np.arange(20), np.arange(20), np.arange(20, 40),
                                  np.arange(20, 40))):
        record.observe(day * DAY_S, online)
        made = strata.history_strata().copy()
        np.testing.assert_array_equal(
            made, HistoryStratified(np.zeros(40, dtype=np.int64), record, 2).history_strata())
    assert record.rounds.sum() == 1 and made[20:].min() == 1 and made[:20].max() == 0


def test_the_keys_are_checked() -> None:
    with pytest.raises(InputError, match=r"'estimator.checkin_share' = 0.0 must be in"):
        from_dict({"estimator": {"shadow": ["ipw"], "checkin_share": 0.0}})
    with pytest.raises(InputError, match=r"'estimator.checkin_memory_days' is set but no "
                                         r"estimator that reads it \(ipw, ipw_days"):
        from_dict({"estimator": {"checkin_memory_days": 3}})
    cfg = from_dict({"estimator": {"name": "ipw_days", "checkin_share": 0.5,
                                   "checkin_memory_days": 7}}).estimator
    panel = EstimatorPanel(cfg, 0.5, 10, Streams(0))
    assert panel.wants_checkins
    for record in (panel.presence.checkins, panel.presence.checkins_days):
        assert record is not None and (record.share, record.memory_days) == (0.5, 7)

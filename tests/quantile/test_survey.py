"""Survey-sampling estimators (simfl/quantile/survey.py): raking worked by hand, the
beta-binomial fit and the strata rule by hand, each estimator unbiased on a synthetic
population where its assumption holds and biased where it fails, and a run that writes
their rows to bias.parquet."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from simfl.cli import main
from simfl.errors import InputError
from simfl.quantile.estimators import (
    CheckIns,
    Cohort,
    CohortExact,
    Estimator,
    HistoryStratified,
    PostStratified,
)
from simfl.quantile.kernels import weighted_quantile
from simfl.quantile.survey import (
    Raked,
    ShrunkIPW,
    ShrunkStrata,
    bins_by_rule,
    fit_beta_binomial,
    raking,
    shrunk_rates,
)
from simfl.scenario import from_dict

NO_NOISE = np.random.default_rng(0)  # none of them draws
HOUR_S, DAY_S = 3600.0, 86400.0


def test_raking_a_two_by_two_worked_by_hand() -> None:
    """One cohort member per cell (a, b), margins A = (60, 40), B = (70, 30). From 25 each,
    A's sweep: 30, 30 | 20, 20; B's: columns 50 -> 70 (x 1.4) and 50 -> 30 (x 0.6): 42, 18
    | 28, 12, which match A too: one sweep, the independence table N_a N_b / N."""
    labels = [np.array([0, 0, 1, 1]), np.array([0, 1, 0, 1])]
    totals = [np.array([60.0, 40.0]), np.array([70.0, 30.0])]
    d, sweeps, converged = raking(labels, totals, 1e-12, 10)
    np.testing.assert_allclose(d, [42.0, 18.0, 28.0, 12.0], rtol=1e-14)
    assert (sweeps, converged) == (1, True)
    # the threshold: losses 1 to 4 weigh 0.42, 0.18, 0.28, 0.12; cumulative 0.42, 0.60, ...
    losses = np.array([1.0, 2.0, 3.0, 4.0])
    assert [weighted_quantile(losses, d, p) for p in (0.3, 0.5, 0.65, 0.9)] == [
        1.0, 2.0, 3.0, 4.0]


def test_raking_an_unbalanced_cohort_keeps_the_cross_ratio_and_matches_every_margin() -> None:
    """Two members in cell (0, 0). Sweep 1 by hand from 20 each: A's rows already sum to
    60 and 40; B's column 0 sums 60 -> 70 (x 7/6), column 1 40 -> 30 (x 3/4). Converged,
    both margins hold and the weights keep the start's cross-product ratio d00 d11 /
    (d01 d10) = 1 (raking is multiplicative: d = f(a) g(b))."""
    labels = [np.array([0, 0, 0, 1, 1]), np.array([0, 0, 1, 0, 1])]
    totals = [np.array([60.0, 40.0]), np.array([70.0, 30.0])]
    first, sweeps, converged = raking(labels, totals, 1e-12, 1)
    np.testing.assert_allclose(first, [70 / 3, 70 / 3, 15.0, 70 / 3, 15.0], rtol=1e-14)
    assert (sweeps, converged) == (1, False)
    d, sweeps, converged = raking(labels, totals, 1e-12, 200)
    assert converged and 1 < sweeps < 200
    for lab, tot in zip(labels, totals, strict=True):
        np.testing.assert_allclose(np.bincount(lab, d), tot, rtol=1e-11)
    assert d[0] == d[1]
    assert d[0] * d[4] / (d[2] * d[3]) == pytest.approx(1.0, rel=1e-12)


def test_raking_loses_an_absent_category_and_stops_where_margins_cannot_both_hold() -> None:
    """A's category 1 has no cohort member: A's targets become (100, 0) and B alone
    decides (42 + 28 -> 70, ...). Members only on the diagonal cannot match A = (60, 40)
    and B = (70, 30) at once: after max_iterations sweeps it says so, B (the last margin)
    matched."""
    d, _, converged = raking([np.array([0, 0]), np.array([0, 1])],
                             [np.array([60.0, 40.0]), np.array([70.0, 30.0])], 1e-12, 50)
    assert converged
    np.testing.assert_allclose(d, [70.0, 30.0], rtol=1e-14)
    d, sweeps, converged = raking([np.array([0, 1]), np.array([0, 1])],
                                  [np.array([60.0, 40.0]), np.array([70.0, 30.0])], 1e-9, 7)
    assert (sweeps, converged) == (7, False)
    np.testing.assert_allclose(d, [70.0, 30.0], rtol=1e-14)


def _record(counts: Sequence[int] | np.ndarray, rounds: int, hour: int = 5,
            share: float = 1.0) -> CheckIns:
    """Earlier days' record: one round a day at ``hour`` for ``rounds`` days, device k
    online in the first counts[k] of them."""
    record = CheckIns(len(counts), earlier_days=True, share=share)
    for day in range(rounds):
        record.observe(day * DAY_S + hour * HOUR_S, np.flatnonzero(np.asarray(counts) > day))
    record.observe(rounds * DAY_S, np.arange(0))
    return record


def test_the_beta_binomial_fit_by_hand() -> None:
    """Region 0: counts 0, 1, 3, 4 of n = 4: μ̂ = (8 + 1/2) / (16 + 1) = 1/2, S² = 10/4,
    n μ̂ (1 − μ̂) = 1, ρ̂ = (2.5 − 1) / 3 = 1/2, M̂ = 1: posterior means (c + 1/2) / 5 =
    0.1, 0.3, 0.7, 0.9. Region 1: counts 2, 2, 2, 2: no spread, ρ̂ = 0, M̂ = ∞: every
    device its region's 1/2. A share of 1/2 seen doubles the rates; one round
    identifies no spread (M̂ = ∞)."""
    counts, groups = np.array([0, 1, 3, 4, 2, 2, 2, 2]), np.repeat([0, 1], 4)
    mu, strength = fit_beta_binomial(counts.astype(float), 4, groups)
    np.testing.assert_allclose(mu, [0.5, 0.5], rtol=1e-15)
    assert strength[0] == pytest.approx(1.0, rel=1e-14) and strength[1] == np.inf
    t_s = 4 * DAY_S + 5 * HOUR_S
    rates = shrunk_rates(_record(counts, 4), groups, t_s)
    np.testing.assert_allclose(rates, [0.1, 0.3, 0.7, 0.9, 0.5, 0.5, 0.5, 0.5], rtol=1e-14)
    np.testing.assert_allclose(shrunk_rates(_record(counts, 4, share=0.5), groups, t_s),
                               2 * rates, rtol=1e-15)
    assert fit_beta_binomial(np.array([0.0, 1.0, 1.0]), 1, np.zeros(3, int))[1][0] == np.inf


def test_stabilised_and_trimmed_inverse_rates_by_hand() -> None:
    """Rates 0.1, 0.3, 0.7, 0.9: 1/π over its mean (250/63) is 2.52, 0.84, 0.36, 0.28;
    the median 0.6, so trim 2 caps the first at 1.2. With losses 4, 3, 2, 1 the median
    moves from 4 (cumulative 0.07, 0.16, 0.37, 1) to 3 (0.10, 0.24, 0.55, 1)."""
    record = _record([0, 1, 3, 4], 4)
    cohort = Cohort(np.array([4.0, 3.0, 2.0, 1.0]), np.ones(4), np.arange(4),
                    4 * DAY_S + 5 * HOUR_S)
    regions = np.zeros(4, dtype=np.int64)
    np.testing.assert_allclose(ShrunkIPW(regions, record, trim=0).inverse_rates(cohort),
                               [2.52, 0.84, 0.36, 0.28], rtol=1e-13)
    trimmed = ShrunkIPW(regions, record, trim=2.0)
    np.testing.assert_allclose(trimmed.inverse_rates(cohort), [1.2, 0.84, 0.36, 0.28],
                               rtol=1e-13)
    assert ShrunkIPW(regions, record, trim=0).estimate(cohort, 0.5, NO_NOISE).threshold == 4.0
    assert trimmed.estimate(cohort, 0.5, NO_NOISE).threshold == 3.0


@pytest.mark.parametrize(("min_expected", "bins"), [
    (0.4, [0] * 4 + [1] * 4 + [2] * 4 + [3] * 4 + [4] * 4),  # 5 bins: 0.5, 1, 2, 4, 4.5
    (1.4, [0] * 8 + [1] * 4 + [2] * 4 + [3] * 4),  # 4: 1.5, 2, 4, 4.5
    (2.0, [0] * 12 + [1] * 8),  # 4 and 3 have a bin of 1.5; 2: 3.5, 8.5
    (4.0, [0] * 20),  # not even two
])
def test_the_strata_rule_by_hand(min_expected: float, bins: list[int]) -> None:
    """Rates 0.1, 0.2, 0.4, 0.8, 0.9 four devices each, a cohort of 12: each expects
    12 π / 9.6 = 1.25 π members. Equal-count bins keep ties together."""
    rates = np.repeat([0.1, 0.2, 0.4, 0.8, 0.9], 4)
    assert bins_by_rule(rates, 12 * rates / rates.sum(), min_expected).tolist() == bins


def _cohort(rng: np.random.Generator, size: int = 30) -> Cohort:
    return Cohort(rng.gamma(2.0, size=size), rng.lognormal(size=size),
                  rng.choice(400, size, replace=False), 3 * DAY_S + 7 * HOUR_S)


def test_with_the_region_margin_alone_or_no_history_they_are_poststrat() -> None:
    """Raking on regions alone is post-stratification; before any day is counted the hour
    and rate margins are one category and rake is poststrat, every π̂ is 1/2 and
    ipw_shrunk is cohort_exact, and poststrat_shrunk has one stratum per region."""
    rng = np.random.default_rng(8)
    regions = rng.integers(0, 3, 400)
    history = CheckIns(400, earlier_days=True)
    for h in range(0, 72, 3):
        history.observe(h * HOUR_S, np.flatnonzero(rng.random(400) < 0.3))
    empty = CheckIns(400, earlier_days=True)
    post = PostStratified(regions)
    for _ in range(30):
        cohort = _cohort(rng)
        expected = post.estimate(cohort, 0.4, NO_NOISE).threshold
        assert Raked(regions, history, ("region",)).estimate(
            cohort, 0.4, NO_NOISE).threshold == expected
        assert Raked(regions, empty).estimate(cohort, 0.4, NO_NOISE).threshold == expected
        assert ShrunkStrata(regions, empty).estimate(
            cohort, 0.4, NO_NOISE).threshold == expected
        assert ShrunkIPW(regions, empty).estimate(cohort, 0.4, NO_NOISE).threshold == (
            CohortExact().estimate(cohort, 0.4, NO_NOISE).threshold)


def _history(prob_at_hour: Callable[[int], np.ndarray], n: int, days: int,
             rng: np.random.Generator, hours: Sequence[int] = range(24)) -> CheckIns:
    """Earlier days' record of devices online with probability prob_at_hour(h) (N,) at one
    round an hour (of ``hours``), and the first round of the day after (which counts
    them)."""
    record = CheckIns(n, earlier_days=True)
    for day in range(days):
        for h in hours:
            record.observe(day * DAY_S + h * HOUR_S,
                           np.flatnonzero(rng.random(n) < prob_at_hour(h)))
    record.observe(days * DAY_S, np.arange(0))
    return record


def _means(estimators: Sequence[Estimator], prob_now: np.ndarray, losses: np.ndarray,
           level: float, t_s: float, rng: np.random.Generator,
           draws: int = 200) -> list[np.ndarray]:
    """Each estimator's η̂ over ``draws`` cohorts of 60 drawn among the devices online
    with probability ``prob_now``."""
    out: list[list[float]] = [[] for _ in estimators]
    for _ in range(draws):
        online = np.flatnonzero(rng.random(losses.size) < prob_now)
        idx = rng.choice(online, size=60, replace=False)
        cohort = Cohort(losses[idx], np.ones(60), idx, t_s)
        for made, e in zip(out, estimators, strict=True):
            made.append(e.estimate(cohort, level, NO_NOISE).threshold)
    return [np.array(x) for x in out]


def _quantile(losses: np.ndarray, level: float) -> float:
    return weighted_quantile(losses, np.ones(losses.size), level)


def _unbiased(made: np.ndarray, q: float, floor: float = 0.02) -> bool:
    """Within 4 standard errors of the Monte-Carlo mean (at least ``floor``: the cohort's
    size adds a small sampling term of its own)."""
    return abs(made.mean() - q) < max(4 * made.std() / np.sqrt(made.size), floor)


def test_rake_is_unbiased_where_being_online_is_a_product_of_margin_factors() -> None:
    """Morning devices are online in UTC hours 0-7, evening ones in 16-23 (at 0.2 of it
    otherwise), each at rate 0.6 or 0.15: at 04:00 the online chance is a rate factor
    times a block factor, raking's model. Losses grow with both (evening +0.8, low rate
    +0.5): the cohort and region-only post-stratification are biased down by more than
    0.2, the raked estimate is within Monte-Carlo error."""
    rng = np.random.default_rng(31)
    n, k = 3000, np.arange(3000)
    region, morning, high = k % 2, (k // 2) % 2 == 0, (k // 4) % 2 == 0
    rate = np.where(high, 0.6, 0.15)

    def prob(h: int) -> np.ndarray:
        own = np.where(morning, h < 8, h >= 16)
        return rate * np.where(own, 1.0, 0.2)

    losses = 0.8 * ~morning + 0.5 * ~high + rng.random(n)
    q, level = _quantile(losses, 0.5), 0.5
    raked = Raked(region, _history(prob, n, 10, rng), rate_classes=2)
    classes, _ = raked.population_classes()
    # the blocks found (but for a few low-rate devices' noise), and the rates
    assert np.mean(classes[1] == np.where(morning, 0, 2)) > 0.99
    assert np.array_equal(classes[2], high.astype(int))
    made, cohort, post = _means([raked, CohortExact(), PostStratified(region)], prob(4),
                                losses, level, 10 * DAY_S + 4 * HOUR_S, rng)
    assert _unbiased(made, q)
    assert q - cohort.mean() > 0.2 and q - post.mean() > 0.2


def test_rake_is_biased_where_the_propensity_hides_inside_a_margin_category() -> None:
    """Half the devices are online in UTC hours 0-3, the other half in 4-7 (0.5, and
    0.05 at other hours): one block, one daily rate, so no margin tells them apart,
    and at 02:00 the cohort is the first half, whose losses are higher by 1. rake is
    as biased as region-only post-stratification."""
    rng = np.random.default_rng(32)
    n, k = 3000, np.arange(3000)
    region, early = k % 2, (k // 2) % 2 == 0

    def prob(h: int) -> np.ndarray:
        return np.where(np.where(early, h < 4, 4 <= h < 8), 0.5, 0.05)

    losses = 1.0 * early + rng.random(n)
    q, level = _quantile(losses, 0.5), 0.5
    raked = Raked(region, _history(prob, n, 10, rng), rate_classes=2)
    made, post = _means([raked, PostStratified(region)], prob(2), losses, level,
                        10 * DAY_S + 2 * HOUR_S, rng)
    assert made.mean() - q > 0.3
    assert abs(made.mean() - post.mean()) < 0.1


def _propensity_population(rng: np.random.Generator, n: int = 3000
                           ) -> tuple[np.ndarray, np.ndarray, np.ndarray, float]:
    """Two regions; each device online at 04:00 with its own p_k ~ Beta(2, 4); losses
    2 (1 − p_k) + U(0, 1/2), so the likely-online have low losses. Returns (region, p,
    losses, the population's quantile at level 0.5)."""
    region = np.arange(n) % 2
    p = rng.beta(2.0, 4.0, n)
    losses = 2 * (1 - p) + 0.5 * rng.random(n)
    return region, p, losses, _quantile(losses, 0.5)


def test_ipw_shrunk_is_consistent_as_the_days_grow() -> None:
    """Rates stable from day to day, one round at 04:00 a day. After 5 days the shrunk
    rates undo part of the cohort's bias; after 100 days the estimate (with the
    default cap of 10 cohort medians) is within Monte-Carlo error."""
    rng = np.random.default_rng(41)
    region, p, losses, q = _propensity_population(rng)
    t_s = 4 * HOUR_S
    means = {}
    for days in (5, 100):
        record = _history(lambda h: p, p.size, days, rng, hours=[4])
        made, cohort = _means([ShrunkIPW(region, record), CohortExact()], p, losses, 0.5,
                              days * DAY_S + t_s, rng)
        means[days] = made
    bias = {days: made.mean() - q for days, made in means.items()}
    assert _unbiased(means[100], q)
    assert abs(bias[100]) < abs(bias[5]) < abs(cohort.mean() - q)
    assert q - cohort.mean() > 0.2


def test_ipw_shrunk_is_biased_where_todays_routine_is_not_the_earlier_days() -> None:
    """The same devices, but today the high-loss half is online at three times its
    earlier rate: the weights from earlier days miss it, whatever the days."""
    rng = np.random.default_rng(42)
    region, p, losses, q = _propensity_population(rng)
    record = _history(lambda h: p, p.size, 100, rng, hours=[4])
    today = np.minimum(np.where(losses > np.median(losses), 3 * p, p), 1.0)
    (made,) = _means([ShrunkIPW(region, record)], today, losses, 0.5,
                     100 * DAY_S + 4 * HOUR_S, rng)
    assert made.mean() - q > 0.1


def _shy_population(rng: np.random.Generator, n: int = 3000
                    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, float]:
    """Two regions; half the devices ('shy') have losses in (1, 2), the others in (0, 1);
    returns (region, shy, losses, the quantile at 0.3: inside the low losses)."""
    region = np.arange(n) % 2
    shy = (np.arange(n) // 2) % 2 == 1
    losses = np.where(shy, 1.0 + rng.random(n), rng.random(n))
    return region, shy, losses, _quantile(losses, 0.3)


def test_poststrat_shrunk_is_unbiased_where_a_phase_ties_the_hour_to_the_loss() -> None:
    """Shy devices are online 50 % of the time in UTC hours 0-11 and 10 % after, the
    others the reverse: equal daily rates, so poststrat_history stays biased at 03:00,
    while the rate at 03:00 separates them: poststrat_shrunk, by the rule or with two
    bins, is within Monte-Carlo error (0.03 at least: what is left of the bins'
    impurity). The rate at an hour has one round a day: 60 days make counts of
    Binomial(60, 0.5) and (60, 0.1) that rarely overlap (after 10 days they do, and
    the estimate keeps a bias of about 0.1 to 0.3)."""
    rng = np.random.default_rng(51)
    region, shy, losses, q = _shy_population(rng)

    def prob(h: int) -> np.ndarray:
        return np.where(shy == (h < 12), 0.5, 0.1)

    record = _history(prob, losses.size, 60, rng)
    rule = ShrunkStrata(region, record, bins=0, min_expected=2.0)
    t_s = 60 * DAY_S + 3 * HOUR_S
    assert len(np.unique(rule.propensity_strata(t_s, 60))) >= 4  # two bins a region, or more
    made = _means([rule, ShrunkStrata(region, record, bins=2),
                   HistoryStratified(region, record, bins=2)], prob(3), losses, 0.3, t_s, rng,
                  draws=400)
    assert _unbiased(made[0], q, 0.03) and _unbiased(made[1], q, 0.03)
    assert made[2].mean() - q > 0.3


def test_poststrat_shrunk_is_biased_where_the_hour_was_not_like_this_before() -> None:
    """Every device was online 30 % of the time at every hour on the earlier days; today
    at 03:00 the shy ones are online at 50 %, the others 10 %: the strata cannot see it."""
    rng = np.random.default_rng(52)
    region, shy, losses, q = _shy_population(rng)
    record = _history(lambda h: np.full(losses.size, 0.3), losses.size, 10, rng)
    (made,) = _means([ShrunkStrata(region, record, min_expected=2.0)],
                     np.where(shy, 0.5, 0.1), losses, 0.3, 10 * DAY_S + 3 * HOUR_S, rng)
    assert made.mean() - q > 0.3


def test_the_keys_are_checked() -> None:
    with pytest.raises(InputError, match=r"'estimator.rake.margins\[1\]' = 'phase' must be one "
                                         r"of \['region', 'hour', 'rate'\]"):
        from_dict({"estimator": {"name": "rake", "rake": {"margins": ["region", "phase"]}}})
    with pytest.raises(InputError, match=r"'estimator.rake.margins' = \('rate', 'rate'\)"):
        from_dict({"estimator": {"name": "rake", "rake": {"margins": ["rate", "rate"]}}})
    with pytest.raises(InputError, match=r"'estimator.poststrat_shrunk' is set but no "
                                         r"estimator that reads it \(poststrat_shrunk\)"):
        from_dict({"estimator": {"name": "rake", "poststrat_shrunk": {"bins": 3}}})
    with pytest.raises(InputError, match=r"'estimator.ipw_shrunk.trim' = 0.5 must be 0"):
        from_dict({"estimator": {"name": "ipw_shrunk", "ipw_shrunk": {"trim": 0.5}}})


SCENARIO = """
seed = 4
[data.synthetic]
num_clients = 160
[aggregator]
name = "deltafl"
theta = 0.5
[estimator]
name = "cohort_exact"
shadow = ["rake", "ipw_shrunk", "poststrat_shrunk", "poststrat"]
bias_every = 10
decomposition_draws = 3
checkin_share = 0.5
checkin_memory_days = 1
[estimator.rake]
rate_classes = 2
[estimator.poststrat_shrunk]
min_expected = 2.0
[server]
num_rounds = 60
clients_per_round = 16
round_interval_s = 1800.0
[eval]
every = 60
[population.availability]
mode = "habits"
horizon_s = 259200.0
[[population.regions]]
name = "a"
[[population.regions]]
name = "b"
utc_offset_h = 8.0
[population.availability.habits]
covariate_correlation = 0.8
"""


def test_a_run_writes_their_rows_to_the_bias_table(tmp_path: Path) -> None:
    """Shadows over 60 rounds half an hour apart: a row per round each, the bias on bias
    rounds; on the first UTC day (no earlier day) rake and poststrat_shrunk are
    poststrat and ipw_shrunk is cohort_exact; after it (two rounds at each hour) they
    differ."""
    scenario = tmp_path / "s.toml"
    scenario.write_text(SCENARIO)
    assert main([str(scenario), "--out", str(tmp_path / "run"), "--quiet"]) == 0
    bias = pl.read_parquet(tmp_path / "run" / "bias.parquet").sort("round")
    wide = bias.pivot(on="estimator", index=["round", "t_s"], values="estimate")
    assert len(wide) == 60 and wide.null_count().sum_horizontal().item() == 0
    first_day = wide.filter(pl.col("t_s") < DAY_S)
    for name, same in (("rake", "poststrat"), ("poststrat_shrunk", "poststrat"),
                       ("ipw_shrunk", "cohort_exact")):
        assert first_day[name].to_list() == first_day[same].to_list(), name
        later = wide.filter(pl.col("t_s") >= DAY_S)
        assert (later[name] != later[same]).any(), name
    rows = bias.filter(pl.col("oracle_quantile").is_not_null())
    assert rows["round"].unique().sort().to_list() == [0, 10, 20, 30, 40, 50]
    assert rows.filter(pl.col("estimator") == "rake")["bias"].is_finite().all()

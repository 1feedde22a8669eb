"""The server's estimators of the Δ-FL threshold from one cohort's losses (docs/design.md §7).

The target is Q_pop(w_t), the (1 − θ) α-weighted lower quantile of F_k(w_t)
over *all* training devices; a round's server only sees the cohort. Each
estimator turns the cohort's losses into η̂ and says what that cost on the
wire (:mod:`simfl.quantile.secagg`). The simulator knows every loss; an
estimator only uses what its protocol would reveal to the server:

- ``cohort_exact``: losses in the clear, their weighted quantile (Laguel et al.,
  arXiv:2112.09429, Algorithm 2).
- ``secure_bisection``: bisection on η keeping a bracket (low, high] with
  F(low) < p ≤ F(high), F the cohort's α-weighted CDF, so the lower quantile
  Q_p lies in it. Each step is one secure sum of (α_k 1[F_k ≤ mid], α_k,
  1[low < F_k ≤ mid], 1[low < F_k ≤ high]): the counts tell how many devices
  the bracket holds after the split.
  After ⌈log2((high − low) / tol)⌉ steps it goes on halving until the bracket
  holds one device (Q_p itself) or cannot be split in floating point (devices
  tied at Q_p). The server broadcasts low and devices keep themselves iff
  F_k > low: with no device in (low, Q_p), exactly the devices with F_k ≥ Q_p,
  the keep set of ``cohort_exact``. η̂ = the smallest double above low. Losses
  outside the range count as its ends: above ``high`` = 16 they are all kept;
  when Q_p is at the low end (θ = 1, or losses of exactly ``low`` = 0) the
  bracket ends empty at low, and the devices with F_k ≥ low keep themselves
  (every device, with the default low = 0 and losses that are never negative).
- ``secure_mm``: the quantile as the minimiser of the pinball loss
  Σ α_k ρ_p(F_k − η), ρ_p(u) = max(pu, (p − 1)u), by majorisation–minimisation
  (the long paper's Appendix B.1, eq. 17; Hunter and Lange, "Quantile
  regression via an MM algorithm", 2000): with β_k = α_k / max(|F_k − μ_t|, ε),

      μ_{t+1} = (Σ β_k F_k + (2p − 1) Σ α_k) / Σ β_k,

  each iteration one secure sum of (β_k F_k, β_k). Where the weighted CDF is
  flat near p the minimiser is an interval and μ can stop anywhere in it, so
  a device at Q_p may be dropped; simfl departs from the paper by ending MM
  with a bracketing step: widen (μ − δ, μ] or (μ, μ + δ] by doubling δ until
  F(low) < p ≤ F(high) (one count sum each), then finish as
  ``secure_bisection`` does, so the keep set is exact too.
- ``tracking``: η carried across rounds and moved geometrically by the
  α-weighted share of devices below it, one bit each through a secure sum
  (Andrew, Thakkar, McMahan, Ramaswamy, "Differentially Private Learning with
  Adaptive Clipping", NeurIPS 2021): η ← η exp(−γ (b̄ − p)).
- ``ipw``: the cohort quantile with weights α_k / π̂_k(h), π̂_k(h) the device's
  frequency of being online at UTC hour h in the rounds *before* this one (its
  check-ins, with a Beta prior), a Horvitz–Thompson correction of who is online
  now. Counting the current round would count every cohort member online at
  least once and bias π̂ up (halving the correction for a device online 20 % of
  the time after six rounds at that hour).
- ``ipw_days``: ``ipw`` with π̂ from the check-ins of earlier UTC days only
  (``CheckIns(earlier_days=True)``): within a session a device online now was
  online in the earlier rounds of the hour too, which biases ``ipw``'s π̂ up the
  same way, less. On the first day every π̂ is the prior's 1/2 (equal weights).
- ``poststrat_history``: ``poststrat`` on strata of region × the device's check-in
  rate over earlier days (:class:`HistoryStratified` derives it and says when it is
  unbiased); for availability that varies inside regions with the data.
- ``poststrat``: the cohort quantile with each device's weight scaled by
  N_s / m_s, N_s the training devices of its stratum (its region, which the
  server knows at registration) and m_s the cohort devices of that stratum, so
  each stratum carries its population share (post-stratification; a stratum
  absent from the cohort is lost, a bias the study reports).

Every secure sum can carry Gaussian noise (a differential-privacy knob) of
standard deviation ``noise_std`` in units of one average device's weight:
the weights passed in are α_k = n_k / mean n over the training devices.

An estimate that is a weighted quantile of the losses it saw carries those weights
(``Estimate.weights``: α_k for cohort_exact and, as they compute its quantile, for
secure_mm and secure_bisection; α_k / π̂_k for ipw; the post-stratified ones'), from
which :mod:`simfl.quantile.woodruff` makes its confidence interval; None (tracking) has
none.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import numpy as np

from simfl.quantile.kernels import LEVEL_SLACK, weighted_quantile
from simfl.quantile.secagg import Exchange, broadcast_threshold, secure_sum

HOURS_PER_DAY = 24


@dataclass(frozen=True)
class Cohort:
    """What the devices of one round hold: their losses under the incoming model."""

    losses: np.ndarray  # (K,) F_k(w_t)
    weights: np.ndarray  # (K,) α_k, an average device weighing 1
    client_idx: np.ndarray  # (K,) training-device indices
    t_s: float  # simulated time of the loss reports


State = Any  # a stateful estimator's memory across rounds: plain data (checkpoints hold it)


@dataclass(frozen=True)
class Estimate:
    threshold: float
    exchanges: tuple[Exchange, ...] = ()  # per participating device, in order
    secure_sums: int = 0
    state: State = None  # a stateful estimator's state for the next round
    # (K,) the weights of the losses seen when η̂ is their weighted quantile at the level
    # (its Woodruff interval, simfl.quantile.woodruff); None: no such interval
    weights: np.ndarray | None = None


class Estimator(Protocol):
    """An estimator without memory across rounds: η̂ from this round's cohort alone."""

    @property
    def name(self) -> str: ...
    @property
    def losses_in_clear(self) -> bool: ...

    def estimate(self, cohort: Cohort, level: float, rng: np.random.Generator) -> Estimate: ...


@runtime_checkable
class StatefulEstimator(Protocol):
    """An estimator with memory across rounds, which it returns instead of keeping (as an
    aggregation rule's ``combine`` does): ``init()`` is the first round's state, and
    ``estimate`` takes a round's state and returns the next in ``Estimate.state``. The
    panel holds the state, so estimating again from the same state (the bias
    decomposition's Monte-Carlo cohorts) never advances it."""

    @property
    def name(self) -> str: ...
    @property
    def losses_in_clear(self) -> bool: ...

    def init(self) -> State: ...

    def estimate(self, cohort: Cohort, level: float, rng: np.random.Generator,
                 state: State) -> Estimate: ...


def _noisy_sum(values: np.ndarray, noise_std: float, rng: np.random.Generator) -> np.ndarray:
    """Σ_k values[k] (K, m) -> (m,), plus N(0, noise_std²) per component when noise_std > 0."""
    total = values.sum(axis=0)
    return total + rng.normal(0.0, noise_std, total.shape) if noise_std > 0 else total


@dataclass(frozen=True)
class CohortExact:
    name: str = "cohort_exact"
    losses_in_clear: bool = True

    def estimate(self, cohort: Cohort, level: float, rng: np.random.Generator) -> Estimate:
        return Estimate(weighted_quantile(cohort.losses, cohort.weights, level),
                        weights=cohort.weights)


@dataclass(frozen=True)
class PopulationQuantile:
    """The oracle driver: Q_pop itself, the α-weighted (1 − θ) quantile of every
    training device's F_k(w_t) under the current model. The panel gives it the whole
    population as its cohort (``reads_population``), which costs an evaluation of
    every training device each round and which no server has: it is the ceiling a
    threshold estimator could reach, for the study (docs/dose_response.md). The
    round's cohort still reports its losses in the clear, as for ``cohort_exact``: the
    filter compares them with the threshold."""

    name: str = "population_quantile"
    losses_in_clear: bool = True
    reads_population: bool = True

    def estimate(self, cohort: Cohort, level: float, rng: np.random.Generator) -> Estimate:
        return Estimate(weighted_quantile(cohort.losses, cohort.weights, level),
                        weights=cohort.weights)


# Steps past the tolerance that a bracket may take to isolate the quantile (a double has
# 52 mantissa bits: more steps could not split it further).
_REFINE_STEPS = 64


def _reaches(below: float, total: float, level: float) -> bool:
    """Whether F(u) >= level, from the secure sums of α 1[x <= u] and of α. At a level
    within the slack of 0 (θ = 1) the lower quantile is the least loss, which u reaches
    once any device is at or below it."""
    return below >= (level - LEVEL_SLACK) * total if level > LEVEL_SLACK else below > 0


def _bisect(x: np.ndarray, alpha: np.ndarray, level: float, low: float, high: float,
            tol: float, noise_std: float, rng: np.random.Generator
            ) -> tuple[float, float, int]:
    """Halve the bracket (low, high], F(low) < level <= F(high), until it is at most tol
    wide and holds at most one device (or cannot be split); returns (low, the devices
    left in (low, high], secure sums). Each sum is of (α 1[x <= mid], α, 1[low < x <=
    mid], 1[low < x <= high]): the last two count the devices in the bracket after the
    split, whichever half is kept."""
    sums, inside = 0, math.inf
    min_steps = max(1, math.ceil(math.log2(max(high - low, tol) / tol))) if tol > 0 else 1
    for step in range(min_steps + _REFINE_STEPS):
        mid = 0.5 * (low + high)
        if mid <= low or mid >= high:  # no double in between: the devices inside are tied
            break
        in_low_half = (x > low) & (x <= mid)
        below, total, lower_half, inside = _noisy_sum(
            np.stack([alpha * (x <= mid), alpha, in_low_half.astype(float),
                      ((x > low) & (x <= high)).astype(float)], 1), noise_std, rng)
        sums += 1
        if _reaches(below, total, level):
            high, inside = mid, lower_half
        else:
            low, inside = mid, inside - lower_half
        if step + 1 >= min_steps and inside <= 1.5:  # one device left: Q_p alone
            break
    return low, inside, sums


def _keep_above(low: float) -> float:
    """The threshold t with F_k >= t exactly when F_k > low (for float64 losses)."""
    return float(np.nextafter(low, np.inf))


@dataclass(frozen=True)
class SecureMM:
    iterations: int = 30
    tol: float = 1e-4  # stop once an iteration moves μ by at most this
    eps: float = 1e-6  # floor of |F_k − μ| in β_k (Hunter and Lange's perturbation)
    noise_std: float = 0.0
    name: str = "secure_mm"
    losses_in_clear: bool = False

    def iterate(self, cohort: Cohort, level: float, rng: np.random.Generator
                ) -> tuple[float, int]:
        """The MM iterate μ (eq. 17) and the secure sums it took: the weighted mean first,
        then one sum per iteration until μ moves by at most ``tol``."""
        x, alpha = cohort.losses, cohort.weights
        total_x, total_alpha = _noisy_sum(np.stack([alpha * x, alpha], 1), self.noise_std, rng)
        mu = total_x / total_alpha
        sums = 1
        for _ in range(self.iterations):
            beta = alpha / np.maximum(np.abs(x - mu), self.eps)
            beta_x, beta_sum = _noisy_sum(np.stack([beta * x, beta], 1), self.noise_std, rng)
            new_mu = (beta_x + (2 * level - 1) * total_alpha) / beta_sum
            sums += 1
            moved = abs(new_mu - mu)
            mu = new_mu
            if moved <= self.tol:
                break
        return float(mu), sums

    def estimate(self, cohort: Cohort, level: float, rng: np.random.Generator) -> Estimate:
        x, alpha = cohort.losses, cohort.weights
        k = len(x)
        mu, sums = self.iterate(cohort, level, rng)
        low, high, bracket_sums = self._bracket(x, alpha, level, mu, rng)
        low, _, bisect_sums = _bisect(x, alpha, level, low, high, self.tol, self.noise_std,
                                      rng)
        mm_sums = sum((secure_sum(k, 2) for _ in range(sums)), ())
        count_sums = (sum((secure_sum(k, 2) for _ in range(bracket_sums)), ())
                      + sum((secure_sum(k, 4) for _ in range(bisect_sums)), ()))
        return Estimate(_keep_above(low), mm_sums + count_sums + (broadcast_threshold(),),
                        sums + bracket_sums + bisect_sums, weights=alpha)

    def _bracket(self, x: np.ndarray, alpha: np.ndarray, level: float, mu: float,
                 rng: np.random.Generator) -> tuple[float, float, int]:
        """(low, high] around μ with F(low) < level <= F(high), by doubling its width."""
        def reaches(u: float) -> bool:
            below, total = _noisy_sum(np.stack([alpha * (x <= u), alpha], 1),
                                      self.noise_std, rng)
            return _reaches(below, total, level)

        width, sums = max(self.tol, abs(mu) * 1e-12), 1
        at_mu = reaches(mu)
        for _ in range(2 * _REFINE_STEPS):
            edge = mu - width if at_mu else mu + width
            sums += 1
            if reaches(edge) != at_mu:
                return (edge, mu, sums) if at_mu else (mu, edge, sums)
            width *= 2.0
        raise RuntimeError("secure_mm: no bracket of the quantile found")  # finite losses


@dataclass(frozen=True)
class SecureBisection:
    low: float = 0.0
    high: float = 16.0  # cross-entropy of 62 classes starts near ln 62 ≈ 4.1
    tol: float = 1e-3
    noise_std: float = 0.0
    name: str = "secure_bisection"
    losses_in_clear: bool = False

    def estimate(self, cohort: Cohort, level: float, rng: np.random.Generator) -> Estimate:
        """Bisection from the configured range (losses outside it count as its ends), then
        the devices with F_k > low keep themselves; see the module docstring. A bracket
        that never left the range's low end and holds no device shows F(low) >= level:
        Q_p is at most low, and the devices with F_k >= low keep themselves."""
        x, alpha = cohort.losses, cohort.weights
        low, inside, sums = _bisect(x, alpha, level, self.low, self.high, self.tol,
                                    self.noise_std, rng)
        exchanges = sum((secure_sum(len(x), 4) for _ in range(sums)), ())
        at_most_low = low == self.low and inside < 0.5
        return Estimate(low if at_most_low else _keep_above(low),
                        exchanges + (broadcast_threshold(),), sums, weights=alpha)


@dataclass(frozen=True)
class Tracking:
    """η_t used this round, then η_{t+1} = η_t exp(−step (b̄_t − p)), b̄_t the α-weighted
    share of the cohort with F_k ≤ η_t. State: {"eta": η_t} (a StatefulEstimator)."""

    initial: float = 1.0
    step: float = 0.2
    noise_std: float = 0.0
    name: str = "tracking"
    losses_in_clear: bool = False

    def init(self) -> dict[str, float]:
        return {"eta": self.initial}

    def estimate(self, cohort: Cohort, level: float, rng: np.random.Generator,
                 state: dict[str, float]) -> Estimate:
        x, alpha = cohort.losses, cohort.weights
        used = state["eta"]
        below, total = _noisy_sum(np.stack([alpha * (x <= used), alpha], 1), self.noise_std, rng)
        share = min(max(below / total, 0.0), 1.0) if total > 0 else level
        return Estimate(used, (broadcast_threshold(), *secure_sum(len(x), 2)), 1,
                        {"eta": used * math.exp(-self.step * (share - level))})


@dataclass
class CheckIns:
    """The server's record of which devices it has seen online, per UTC hour of the day.

    π̂_k(h) = (c_kh + a) / (n_h + 2a): c_kh the rounds at hour h in which device k
    checked in, n_h the rounds observed at hour h, a the Beta(a, a) prior's
    pseudo-count. UTC hours, not local ones: a device's time zone is fixed, so
    per-device UTC-hour rates carry the same information.

    Which rounds count: every round before this one, or with ``earlier_days`` only
    the rounds of earlier UTC days. A device online now is likely to have been online
    in the earlier rounds of its current session (sessions last about an hour, rounds
    open every few minutes), so today's check-ins count it online more often than its
    rate, and more so, relatively, the lower its rate: the same bias as counting the
    current round, smaller. Earlier days are independent of today's session (up to a
    session that crosses midnight UTC); on the first day π̂ is the prior's 1/2 for every
    device, and the weights are equal.

    Realistic check-ins (``estimator.checkin_share``, ``checkin_memory_days``): the server
    sees the check-in of each online device with probability ``share``, independently
    (the panel's Presence draws who), so c_kh ~ Binomial(n_h, s π_k(h)) and the count is
    divided by s: π̂_k(h) = (c_kh / s + a) / (n_h + 2a), E[c_kh / s] = n_h π_k(h)
    (with a = 0 the division is a common factor, which a weighted quantile ignores; with
    a prior it keeps the prior's pull where it was). With ``memory_days`` = D > 0 the record
    holds the check-ins of the round's UTC day and the D days before it: a day's counts
    are dropped when the first round of the day D + 1 later is observed (``earlier_days``:
    the D whole days before today). ``forgotten`` counts the days dropped, so that a
    reader caching what it derives from the counts can tell they changed.
    """

    num_devices: int
    prior: float = 1.0
    earlier_days: bool = False
    share: float = 1.0  # the share of online devices whose check-in the server sees
    memory_days: int = 0  # UTC days kept before the current one (0: every day)
    seen: np.ndarray = field(init=False)  # (N, 24) check-ins of the rounds counted
    rounds: np.ndarray = field(init=False)  # (24,) the rounds counted
    pending: tuple[int, np.ndarray] | None = field(init=False)  # this round's (hour, online)
    held: tuple[tuple[int, np.ndarray], ...] = ()  # earlier_days: today's rounds, this one too
    held_day: int = -1  # earlier_days: the UTC day of ``held``
    pending_day: int = field(init=False, default=-1)  # the UTC day of ``pending``
    kept: dict[int, tuple[np.ndarray, np.ndarray]] = field(init=False)  # memory_days: by day
    forgotten: int = field(init=False, default=0)  # days dropped from the counts so far

    def __post_init__(self) -> None:
        self.seen = np.zeros((self.num_devices, HOURS_PER_DAY), dtype=np.int32)
        self.rounds = np.zeros(HOURS_PER_DAY, dtype=np.int64)
        self.pending = None
        self.kept = {}

    @staticmethod
    def hour(t_s: float) -> int:
        return int(t_s // 3600) % HOURS_PER_DAY

    def observe(self, t_s: float, online_idx: np.ndarray) -> None:
        """The check-ins of the round opening now: counted from the next round on, so a
        round's estimate uses only the rounds before it (with ``earlier_days``: from
        the first round of a later UTC day on)."""
        this_round = (self.hour(t_s), np.asarray(online_idx, dtype=np.int64))
        day = int(t_s // (HOURS_PER_DAY * 3600))
        if self.earlier_days:
            if day != self.held_day:
                for h, online in self.held:
                    self._count(h, online, self.held_day)
                self._forget(day)
                self.held, self.held_day = (), day
            self.held = (*self.held, this_round)
            return
        if self.pending is not None:
            self._count(*self.pending, self.pending_day)
        self._forget(day)
        self.pending, self.pending_day = this_round, day

    def state_dict(self) -> dict[str, Any]:
        """The counts and the rounds not yet counted, for checkpoints."""
        state: dict[str, Any] = {"seen": self.seen, "rounds": self.rounds,
                                 "pending": self.pending, "held": list(self.held),
                                 "held_day": self.held_day}
        if self.memory_days:  # each kept day's counts, and the day of the pending round
            state |= {"kept": [(day, *counts) for day, counts in self.kept.items()],
                      "pending_day": self.pending_day}
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.seen, self.rounds = state["seen"], state["rounds"]
        self.pending = None if state["pending"] is None else tuple(state["pending"])
        self.held, self.held_day = tuple(map(tuple, state["held"])), int(state["held_day"])
        if self.memory_days:
            self.kept = {int(day): (seen, rounds) for day, seen, rounds in state["kept"]}
            self.pending_day = int(state["pending_day"])

    def _count(self, h: int, online: np.ndarray, day: int) -> None:
        self.rounds[h] += 1
        self.seen[online, h] += 1
        if self.memory_days:
            seen, rounds = self.kept.setdefault(day, (np.zeros_like(self.seen),
                                                      np.zeros_like(self.rounds)))
            rounds[h] += 1
            seen[online, h] += 1

    def _forget(self, today: int) -> None:
        """Drop the counts of the days before ``today`` − memory_days."""
        for day in [d for d in self.kept if d < today - self.memory_days]:
            seen, rounds = self.kept.pop(day)
            self.seen -= seen
            self.rounds -= rounds
            self.forgotten += 1

    def online_prob(self, device_idx: np.ndarray, t_s: float) -> np.ndarray:
        h = self.hour(t_s)
        return ((self.seen[device_idx, h] / self.share + self.prior)
                / (self.rounds[h] + 2 * self.prior))


class OnlineRates(Protocol):
    def online_prob(self, device_idx: np.ndarray, t_s: float) -> np.ndarray: ...


@dataclass(frozen=True)
class PostStratified:
    """Cohort quantile with weights α_k N_s / m_s (see the module docstring)."""

    strata: np.ndarray  # (N,) stratum of every training device (its region)
    name: str = "poststrat"
    losses_in_clear: bool = True

    def estimate(self, cohort: Cohort, level: float, rng: np.random.Generator) -> Estimate:
        population = np.bincount(self.strata)
        stratum = self.strata[cohort.client_idx]
        in_cohort = np.bincount(stratum, minlength=population.size)
        scale = population[stratum] / in_cohort[stratum]
        weights = cohort.weights * scale
        return Estimate(weighted_quantile(cohort.losses, weights, level), weights=weights)


@dataclass(frozen=True)
class HistoryStratified:
    """Post-stratification on region × check-in history (``poststrat_history``).

    The server knows each device's region (at registration) and which devices checked
    in at every earlier round, so it can rank the devices of a region by their
    check-in rate over earlier UTC days, r_k = Σ_h c_kh / Σ_h n_h (the ``ipw_days``
    record, CheckIns(earlier_days=True)), and cut each region into ``bins`` strata at
    the quantiles of r (ties stay in one stratum). Write F for the population's
    α-weighted loss CDF; with strata s = (region g, bin b),

        F(x) = Σ_g (N_g / N) Σ_b (N_gb / N_g) F_gb(x),

    and the cohort members of stratum gb estimate F_gb. Each cohort member of stratum
    gb gets the weight α_k (N_gb / m_gb) (N_g / Σ_{b': m_gb' > 0} N_gb'): its stratum's
    population over its cohort count, with a region's strata absent from the cohort
    folded into its present ones, so the region keeps its population share as in
    ``poststrat`` (which this equals with one bin, or before any day has ended).

    Assumption: within a stratum, being online now is independent of the loss. It
    holds when the devices' online probabilities vary only across strata: when
    availability depends on the data through the region and through a propensity that
    the check-in rate identifies (the ``habits`` mode's propensity, tied to a
    covariate). It fails, and the estimate stays biased, where the history does not
    identify what the data correlates with: within-bin spread of the propensity
    (few days, few bins), a phase (chronotype) tied to the data (the daily rate does
    not see when in the day a device is online), the first day (no history), and a
    region absent from the cohort (its share is lost, as in ``poststrat``).
    """

    strata: np.ndarray  # (N,) the region of every training device
    checkins: CheckIns  # the earlier days' record
    bins: int = 4
    name: str = "poststrat_history"
    losses_in_clear: bool = True
    # of the last record seen: its arrays' ids and round counts, the strata, their sizes
    _last: list[Any] = field(default_factory=lambda: [None, None, None], compare=False,
                             repr=False)

    def history_strata(self) -> np.ndarray:
        """(N,) stratum of each device: region × bin of its earlier days' check-in rate
        (read-only; made again only when the record has counted more rounds: once a UTC
        day, not every round)."""
        return self._strata_and_sizes()[0]

    def _strata_and_sizes(self) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`history_strata` and (S,) the devices of each stratum, kept until the
        record counts another round."""
        record = self.checkins
        key = (id(record.seen), id(record.rounds), record.rounds.tobytes(), record.forgotten)
        if self._last[0] != key:
            strata = self._strata()
            strata.flags.writeable = False
            size = self.strata.max() * self.bins + self.bins
            self._last[:] = [key, strata, np.bincount(strata, minlength=size).astype(float)]
        return self._last[1], self._last[2]

    def _strata(self) -> np.ndarray:
        rounds = self.checkins.rounds.sum()
        if rounds == 0 or self.bins == 1:
            return self.strata * self.bins
        rate = self.checkins.seen.sum(axis=1) / rounds
        stratum = np.empty_like(self.strata)
        for region in np.unique(self.strata):
            members = self.strata == region
            cuts = np.quantile(rate[members], np.arange(1, self.bins) / self.bins)
            stratum[members] = region * self.bins + np.searchsorted(cuts, rate[members],
                                                                    side="left")
        return stratum

    def estimate(self, cohort: Cohort, level: float, rng: np.random.Generator) -> Estimate:
        stratum_of, population = self._strata_and_sizes()  # population: (S,) devices
        size = len(population)
        stratum = stratum_of[cohort.client_idx]
        in_cohort = np.bincount(stratum, minlength=size)
        present = population * (in_cohort > 0)
        region_total = population.reshape(-1, self.bins).sum(axis=1)
        region_present = present.reshape(-1, self.bins).sum(axis=1)
        region = stratum // self.bins
        scale = (population[stratum] / in_cohort[stratum]
                 * region_total[region] / region_present[region])
        weights = cohort.weights * scale
        return Estimate(weighted_quantile(cohort.losses, weights, level), weights=weights)


@dataclass(frozen=True)
class IPW:
    """Cohort quantile with inverse-probability weights α_k / π̂_k(t)."""

    rates: OnlineRates  # the server's CheckIns (or known probabilities, in tests)
    name: str = "ipw"
    losses_in_clear: bool = True

    def estimate(self, cohort: Cohort, level: float, rng: np.random.Generator) -> Estimate:
        pi = self.rates.online_prob(cohort.client_idx, cohort.t_s)
        weights = cohort.weights / pi
        return Estimate(weighted_quantile(cohort.losses, weights, level), weights=weights)

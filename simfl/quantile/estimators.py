"""The server's estimators of the Δ-FL threshold from one cohort's losses (docs/design.md §7).

The target is Q_pop(w_t), the (1 − θ) α-weighted lower quantile of F_k(w_t)
over *all* training devices; a round's server only sees the cohort. Each
estimator turns the cohort's losses into η̂ and says what that cost on the
wire (:mod:`simfl.quantile.secagg`). The simulator knows every loss; an
estimator only uses what its protocol would reveal to the server:

- ``cohort_exact``: losses in the clear, their weighted quantile (Laguel et al.,
  arXiv:2112.09429, Algorithm 2).
- ``secure_mm``: the quantile as the minimiser of the pinball loss
  Σ α_k ρ_p(F_k − η), ρ_p(u) = max(pu, (p − 1)u), by majorisation–minimisation
  (the long paper's Appendix B.1; Hunter and Lange, "Quantile regression via
  an MM algorithm", 2000): with β_k = α_k / max(|F_k − μ_t|, ε),

      μ_{t+1} = (Σ β_k F_k + (2p − 1) Σ α_k) / Σ β_k,

  each iteration one secure sum of (β_k F_k, β_k); then η = μ is broadcast
  and devices filter themselves (the long paper's Algorithm 3).
- ``secure_bisection``: bisection on η; each step a secure sum of
  (α_k 1[F_k ≤ η], α_k); η̂ = the upper end of the final bracket.
- ``tracking``: η carried across rounds and moved geometrically by the
  α-weighted share of devices below it, one bit each through a secure sum
  (Andrew, Thakkar, McMahan, Ramaswamy, "Differentially Private Learning with
  Adaptive Clipping", NeurIPS 2021): η ← η exp(−γ (b̄ − p)).
- ``ipw``: the cohort quantile with weights α_k / π̂_k(h), π̂_k(h) the device's
  observed frequency of being online at UTC hour h (its check-ins, with a
  Beta prior), a Horvitz–Thompson correction of who is online now.

Every secure sum can carry Gaussian noise (a differential-privacy knob) of
standard deviation ``noise_std`` in units of one average device's weight:
the weights passed in are α_k = n_k / mean n over the training devices.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from simfl.quantile.kernels import weighted_quantile
from simfl.quantile.secagg import Exchange, broadcast_threshold, secure_sum

HOURS_PER_DAY = 24


@dataclass(frozen=True)
class Cohort:
    """What the devices of one round hold: their losses under the incoming model."""

    losses: np.ndarray  # (K,) F_k(w_t)
    weights: np.ndarray  # (K,) α_k, an average device weighing 1
    client_idx: np.ndarray  # (K,) training-device indices
    t_s: float  # simulated time of the loss reports


@dataclass(frozen=True)
class Estimate:
    threshold: float
    exchanges: tuple[Exchange, ...] = ()  # per participating device, in order
    secure_sums: int = 0


class Estimator(Protocol):
    @property
    def name(self) -> str: ...
    @property
    def losses_in_clear(self) -> bool: ...

    def estimate(self, cohort: Cohort, level: float, rng: np.random.Generator) -> Estimate: ...


def _noisy_sum(values: np.ndarray, noise_std: float, rng: np.random.Generator) -> np.ndarray:
    """Σ_k values[k] (K, m) -> (m,), plus N(0, noise_std²) per component when noise_std > 0."""
    total = values.sum(axis=0)
    return total + rng.normal(0.0, noise_std, total.shape) if noise_std > 0 else total


@dataclass(frozen=True)
class CohortExact:
    name: str = "cohort_exact"
    losses_in_clear: bool = True

    def estimate(self, cohort: Cohort, level: float, rng: np.random.Generator) -> Estimate:
        return Estimate(weighted_quantile(cohort.losses, cohort.weights, level))


@dataclass(frozen=True)
class SecureMM:
    iterations: int = 30
    tol: float = 1e-4  # stop once an iteration moves μ by at most this
    eps: float = 1e-6  # floor of |F_k − μ| in β_k (Hunter and Lange's perturbation)
    noise_std: float = 0.0
    name: str = "secure_mm"
    losses_in_clear: bool = False

    def estimate(self, cohort: Cohort, level: float, rng: np.random.Generator) -> Estimate:
        x, alpha = cohort.losses, cohort.weights
        k = len(x)
        # First sum: (α_k F_k, α_k) gives the weighted mean as the starting point.
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
        exchanges = sum((secure_sum(k, 2) for _ in range(sums)), ()) + (broadcast_threshold(),)
        return Estimate(float(mu), exchanges, sums)


@dataclass(frozen=True)
class SecureBisection:
    low: float = 0.0
    high: float = 16.0  # cross-entropy of 62 classes starts near ln 62 ≈ 4.1
    tol: float = 1e-3
    noise_std: float = 0.0
    name: str = "secure_bisection"
    losses_in_clear: bool = False

    @property
    def steps(self) -> int:
        return max(1, math.ceil(math.log2((self.high - self.low) / self.tol)))

    def estimate(self, cohort: Cohort, level: float, rng: np.random.Generator) -> Estimate:
        """Keeps F(low) < level ≤ F(high) for the cohort's weighted CDF F, so the lower
        quantile lies in (low, high]; returns high (clamped to the initial range)."""
        x, alpha = cohort.losses, cohort.weights
        low, high = self.low, self.high
        for _ in range(self.steps):
            mid = 0.5 * (low + high)
            below, total = _noisy_sum(np.stack([alpha * (x <= mid), alpha], 1),
                                      self.noise_std, rng)
            if below >= level * total:
                high = mid
            else:
                low = mid
        exchanges = sum((secure_sum(len(x), 2) for _ in range(self.steps)), ())
        return Estimate(high, exchanges + (broadcast_threshold(),), self.steps)


@dataclass
class Tracking:
    """η_t used this round, then η_{t+1} = η_t exp(−step (b̄_t − p)), b̄_t the α-weighted
    share of the cohort with F_k ≤ η_t. State: η."""

    initial: float = 1.0
    step: float = 0.2
    noise_std: float = 0.0
    name: str = "tracking"
    losses_in_clear: bool = False
    eta: float = field(init=False)

    def __post_init__(self) -> None:
        self.eta = self.initial

    def estimate(self, cohort: Cohort, level: float, rng: np.random.Generator) -> Estimate:
        x, alpha = cohort.losses, cohort.weights
        used = self.eta
        below, total = _noisy_sum(np.stack([alpha * (x <= used), alpha], 1), self.noise_std, rng)
        share = min(max(below / total, 0.0), 1.0) if total > 0 else level
        self.eta = used * math.exp(-self.step * (share - level))
        return Estimate(used, (broadcast_threshold(), *secure_sum(len(x), 2)), 1)


@dataclass
class CheckIns:
    """The server's record of which devices it has seen online, per UTC hour of the day.

    π̂_k(h) = (c_kh + a) / (n_h + 2a): c_kh the rounds at hour h in which device k
    checked in, n_h the rounds observed at hour h, a the Beta(a, a) prior's
    pseudo-count. UTC hours, not local ones: a device's time zone is fixed, so
    per-device UTC-hour rates carry the same information.
    """

    num_devices: int
    prior: float = 1.0
    seen: np.ndarray = field(init=False)  # (N, 24) check-ins
    rounds: np.ndarray = field(init=False)  # (24,) observation rounds

    def __post_init__(self) -> None:
        self.seen = np.zeros((self.num_devices, HOURS_PER_DAY), dtype=np.int32)
        self.rounds = np.zeros(HOURS_PER_DAY, dtype=np.int64)

    @staticmethod
    def hour(t_s: float) -> int:
        return int(t_s // 3600) % HOURS_PER_DAY

    def observe(self, t_s: float, online_idx: np.ndarray) -> None:
        h = self.hour(t_s)
        self.rounds[h] += 1
        self.seen[online_idx, h] += 1

    def online_prob(self, device_idx: np.ndarray, t_s: float) -> np.ndarray:
        h = self.hour(t_s)
        return (self.seen[device_idx, h] + self.prior) / (self.rounds[h] + 2 * self.prior)


class OnlineRates(Protocol):
    def online_prob(self, device_idx: np.ndarray, t_s: float) -> np.ndarray: ...


@dataclass(frozen=True)
class IPW:
    """Cohort quantile with inverse-probability weights α_k / π̂_k(t)."""

    rates: OnlineRates  # the server's CheckIns (or known probabilities, in tests)
    name: str = "ipw"
    losses_in_clear: bool = True

    def estimate(self, cohort: Cohort, level: float, rng: np.random.Generator) -> Estimate:
        pi = self.rates.online_prob(cohort.client_idx, cohort.t_s)
        return Estimate(weighted_quantile(cohort.losses, cohort.weights / pi, level))

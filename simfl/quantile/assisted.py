"""``model_assisted``: the Δ-FL threshold from the cohort and every device's last loss
report, by Chambers and Dunstan's model-based distribution function (docs/design.md §7).

The target is the population's α-weighted CDF at the current model,
F(t) = (1/N) Σ_{k∈U} α_k 1[y_k ≤ t], y_k = F_k(w_t), Σ_U α_k = N (α_k = n_k / mean n),
and Q_pop its lower quantile at p = 1 − θ. Every cohort member reports its loss in the
clear (``cohort_exact``'s protocol) with its α_k, so the server legitimately holds, for
every device that has ever been in a cohort, its last report x_k and that report's age
g_k in rounds (this estimator's calls: server updates in async mode). Split the devices
into the cohort s, the devices outside it with a report at most ``max_age`` rounds old R,
and the rest O (never reported, or only longer ago: older reports count as none). A
working model is fitted by least squares on the m cohort members with such a report,

    y_j = a + b x_j + c g_j + e_j,     e_j i.i.d.,

(the age term only where the members' ages differ, the x term only where their reports
do; fewer than ``MIN_FIT`` = 5 such members: no fit), with residuals e_j = y_j − ŷ_j.
Chambers and Dunstan ("Estimating distribution functions from survey data", Biometrika
73, 1986) predict each unobserved indicator by the residuals' empirical distribution
around the device's prediction ŷ_k = â + b̂ x_k + ĉ g_k:

    F̂(t) = (1/N) [ Σ_{k∈s} α_k 1[y_k ≤ t] + Σ_{k∈R} α_k (1/m) Σ_j 1[ŷ_k + e_j ≤ t]
                  + W_O F̂_s(t) ],

W_O = N − Σ_s α_k − Σ_R α_k the α-weight of O (which the server knows without knowing
its devices' n_k) and F̂_s the cohort's own α-weighted CDF (``cohort_exact``'s, the only
distribution the server has for devices it has not seen). η̂ is the lower p-quantile of
F̂, a weighted quantile over the cohort's losses and the |R| m values ŷ_k + e_j. Their
sort is the cost, |R| ≤ cohort size × max_age: 0.06 s a call for 3,400 devices predicted
from 100 residuals (one core of a busy 2-core machine), so a bias round's 2 ×
``decomposition_draws`` calls take seconds there. With no fit, or R empty, F̂ = F̂_s and
η̂ is ``cohort_exact``'s: always in the first round.

When it is right. Given the model, E[1[y_k ≤ t] | x_k, g_k] = G(t − a − b x_k − c g_k),
G the errors' CDF, which the residuals estimate; so F̂ is model-consistent when (i) the
working model holds for the devices outside the cohort as for those in it, i.e. being
in the cohort now is ignorable given (x_k, g_k), and (ii) O is like the cohort (or
small). It needs no inclusion probability: however unequally availability and
selection draw the cohort, selection through (x, g) (devices whose losses were high
are online more, or less) does not bias it, which is the bias ``cohort_exact`` has. It
is not design-consistent: where the relation between last report and current loss
differs between the devices in the cohort and those outside it, the cohort's fit
carries the cohort's relation to the others, and F̂ is biased whatever the sample
size (tests/quantile/test_assisted.py builds both cases).

Why not doubly robust. Rao, Kovar and Mantel ("On estimating distribution functions
and quantiles from survey data using auxiliary information", Biometrika 77, 1990) write
the difference form

    F̂_RKM(t) = (1/N) [ Σ_{k∈U} α_k Ĝ_k(t) + Σ_{k∈s} d_k α_k (1[y_k ≤ t] − Ĝ_k(t)) ],

Ĝ_k(t) the model's predicted probability that y_k ≤ t, d_k = 1/π_k the design weights.
It is doubly robust (the augmented inverse-probability-weighted estimator of Robins,
Rotnitzky and Zhao, JASA 1994): with the right π_k the correction sum is unbiased for
Σ_U α_k (1[y_k ≤ t] − Ĝ_k(t)) whatever Ĝ (design-consistent with any working model),
and with the right model each correction term has mean zero whatever the d_k (model-
consistent with any weights). simfl's server knows no π_k, only ipw's estimate π̂_k
from the check-ins, itself biased within sessions (simfl.quantile.estimators.CheckIns);
Chambers–Dunstan needs none, and is the choice here: robust to the design, not to the
model.

Staleness. A report of age g was the loss under the model of g rounds ago. Early in
training losses fall quickly, so old reports overstate the current loss. A drift
common to all devices, or linear in age, is absorbed by the fit (â, ĉ), which compares
the cohort members' current losses with their own old reports; a per-device drift is
not (the devices whose data the model has just learned fell more), and it is worse where
it differs between the devices in the cohort and the others: the online devices are
the ones the run trains on. The age term is linear and extrapolated to the ages of R,
which may exceed the fitted members'. ``max_age`` trades the two: a small one keeps
only fresh reports, and puts the weight of the others on F̂_s, with its bias.

State (a StatefulEstimator, plain data for checkpoints): ``loss`` (N,) each device's
last finite report (NaN: none), ``alpha`` (N,) its α_k, ``round`` (N,) the call it was
reported at (−1: never), ``now`` the calls so far. ``estimate`` copies before it
records the cohort, so the bias decomposition's Monte-Carlo cohorts, run from the
round's state, never advance it. No Woodruff interval (``Estimate.weights`` None): F̂ is
not a weighted CDF of the cohort alone, and its variance is not the with-replacement
one of :mod:`simfl.quantile.woodruff`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from simfl.quantile.estimators import Cohort, Estimate
from simfl.quantile.kernels import LEVEL_SLACK, weighted_quantile
from simfl.quantile.panel import EstimatorContext

MIN_FIT = 5  # fewer cohort members with a usable earlier report: no fit (above 3 terms)


@dataclass(frozen=True)
class ModelAssisted:
    """The Chambers–Dunstan quantile of the module docstring."""

    num_devices: int
    max_age: int = 100  # rounds: older reports count as none
    name: str = "model_assisted"
    losses_in_clear: bool = True

    def init(self) -> dict[str, Any]:
        """No device has reported."""
        n = self.num_devices
        return {"loss": np.full(n, np.nan), "alpha": np.zeros(n),
                "round": np.full(n, -1, dtype=np.int64), "now": 0}

    def estimate(self, cohort: Cohort, level: float, rng: np.random.Generator,
                 state: dict[str, Any]) -> Estimate:
        """η̂ from the cohort and the reports in ``state``; the next state records the
        cohort's finite losses as reported now (``state`` itself is left as it is)."""
        now = int(state["now"])
        age = now - state["round"]
        usable = (state["round"] >= 0) & (age <= self.max_age)
        threshold = chambers_dunstan(cohort, level, state["loss"], age, state["alpha"],
                                     usable, self.num_devices)
        loss, alpha, when = state["loss"].copy(), state["alpha"].copy(), state["round"].copy()
        finite = np.isfinite(cohort.losses)
        idx = cohort.client_idx[finite]
        loss[idx], alpha[idx], when[idx] = cohort.losses[finite], cohort.weights[finite], now
        return Estimate(threshold, state={"loss": loss, "alpha": alpha, "round": when,
                                          "now": now + 1})


def fit_working_model(x: np.ndarray, age: np.ndarray, y: np.ndarray
                      ) -> tuple[np.ndarray, np.ndarray, bool, bool] | None:
    """Least squares of y on (1, x, age) over the fit set: (coefficients, residuals,
    whether x and whether age are terms), a term dropped where its column is constant;
    None with fewer than ``MIN_FIT`` members."""
    if len(y) < MIN_FIT:
        return None
    with_x, with_age = bool(np.ptp(x) > 0), bool(np.ptp(age) > 0)
    design = _design(x, age, with_x, with_age)
    coef, *_ = np.linalg.lstsq(design, y, rcond=None)
    return coef, y - design @ coef, with_x, with_age


def _design(x: np.ndarray, age: np.ndarray, with_x: bool, with_age: bool) -> np.ndarray:
    columns = [np.ones(len(x))] + [x] * with_x + [age.astype(np.float64)] * with_age
    return np.stack(columns, axis=1)


def chambers_dunstan(cohort: Cohort, level: float, last: np.ndarray, age: np.ndarray,
                     alpha: np.ndarray, usable: np.ndarray, num_devices: int) -> float:
    """The lower ``level``-quantile of F̂ (module docstring) from the cohort and, per
    training device, its last report ``last``, that report's ``age``, its α_k and
    whether the report is ``usable`` (at most max_age rounds old)."""
    idx, y, weights = cohort.client_idx, cohort.losses, cohort.weights
    members = usable[idx] & np.isfinite(y)
    fitted = fit_working_model(last[idx][members], age[idx][members], y[members])
    outside = usable.copy()
    outside[idx] = False
    others = np.flatnonzero(outside)
    if fitted is None or others.size == 0:
        return weighted_quantile(y, weights, level)
    coef, residuals, with_x, with_age = fitted
    predicted = _design(last[others], age[others], with_x, with_age) @ coef
    m = len(residuals)
    unseen = max(num_devices - weights.sum() - alpha[others].sum(), 0.0)  # W_O
    values = np.concatenate([y, (predicted[:, None] + residuals[None, :]).ravel()])
    mass = np.concatenate([weights * (1.0 + unseen / weights.sum()),
                           np.repeat(alpha[others] / m, m)])
    return _lower_quantile(values, mass, level)


def _lower_quantile(values: np.ndarray, mass: np.ndarray, level: float) -> float:
    """``weighted_quantile`` (simfl.quantile.kernels) with numpy's default sort, which
    sorts the |R| m values several times faster than its stable one; the order of tied
    values cannot change the value returned."""
    order = np.argsort(values)
    cumulative = np.cumsum(mass[order] / mass.sum())
    idx = int(np.searchsorted(cumulative, level - LEVEL_SLACK, side="left"))
    return float(values[order][min(idx, len(values) - 1)])


def model_assisted(ctx: EstimatorContext) -> ModelAssisted:
    """``estimator.model_assisted``: the largest report age used (rounds)."""
    return ModelAssisted(ctx.num_devices, ctx.cfg.model_assisted.max_age)

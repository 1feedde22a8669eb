"""Linear models, their losses, and the Wasserstein worst-case risk of one client.

A linear model is ``theta = (w, b)`` with ``w`` in R^d and bias ``b``; ``design(x)`` appends
the constant feature, so scores are ``design(x) @ theta`` (DRFL's model is <w, x> with no
intercept: the bias is simfl's addition, for every method). The transport cost on samples
xi = (x, y) is ``||x - x'||_1 + kappa·1[y != y']`` for classification (label flips cost
kappa) and ``||x - x'||_1 + kappa·|y - y'|`` for regression; the bias is not perturbed.

For a loss with Lipschitz constant L, the worst case over the 1-Wasserstein ball of radius
rho around the empirical distribution of (x_i, y_i), i = 1..N, is (Shafieezadeh-Abadeh,
Kuhn, Mohajerin Esfahani 2019, "Regularization via Mass Transportation", JMLR 20:
Lipschitz losses, classification with label flips and regression; DRFL's Corollaries B.1
for Huber regression (Xi = R^{n+1}, its cost without kappa, i.e. kappa = 1), B.4 with no
support constraint for the hinge loss and B.6 for the logistic loss)

    classification:  min_{lam >= L||w||_inf}  lam·rho + mean_i max(phi(m_i), phi(-m_i) - lam·kappa)
    regression:      min_{lam >= L max(||w||_inf, 1/kappa)}  lam·rho + mean_i ell(r_i)

with margins m_i = y_i·score_i and residuals r_i = score_i - y_i. That is the case of
features unbounded (support R^d). DRFL's SVM experiments bound them (Propositions 6.3 /
6.4: x in [-1, 1]^d or [0, 1]^d); then the adversary can move a feature only to the box's
edge, lam needs no lower bound, and for the hinge loss the per-sample term is
(``box_worst_case_risk``)

    keep_i(lam) = max(0, 1 - m_i + sum_j max(0, |w_j| - lam)·dk_ij)
    flip_i(lam) = max(0, 1 + m_i + sum_j max(0, |w_j| - lam)·df_ij) - lam·kappa

with dk_ij (df_ij) the distance from x_ij to the box's edge in the direction that raises
the hinge at the kept (flipped) label.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import cvxpy as cp
import numpy as np

LOSSES = ("hinge", "logistic", "huber")


@dataclass(frozen=True)
class Loss:
    """A convex loss of a linear model: ``name`` in LOSSES; ``delta`` is Huber's threshold."""

    name: str
    delta: float = 1.0

    def __post_init__(self) -> None:
        if self.name not in LOSSES:
            raise ValueError(f"loss must be one of {LOSSES}, not {self.name!r}")
        if self.delta <= 0:
            raise ValueError(f"huber delta must be > 0, not {self.delta}")

    @property
    def is_classification(self) -> bool:
        return self.name != "huber"

    @property
    def lipschitz(self) -> float:
        return self.delta if self.name == "huber" else 1.0

    def value(self, u: np.ndarray) -> np.ndarray:
        """phi(margin) for classification, ell(residual) for regression."""
        if self.name == "hinge":
            return np.maximum(0.0, 1.0 - u)
        if self.name == "logistic":
            return np.logaddexp(0.0, -u)
        a = np.abs(u)
        return np.where(a <= self.delta, 0.5 * u**2, self.delta * (a - 0.5 * self.delta))

    def derivative(self, u: np.ndarray) -> np.ndarray:
        """A (sub)gradient of value() at u, elementwise."""
        if self.name == "hinge":
            return -(u < 1.0).astype(float)
        if self.name == "logistic":
            return -0.5 * (1.0 - np.tanh(0.5 * u))  # -1 / (1 + e^u), overflow-free
        return np.clip(u, -self.delta, self.delta)

    def expr(self, u: cp.Expression) -> cp.Expression:
        """The same loss as a cvxpy expression (elementwise, convex)."""
        if self.name == "hinge":
            return cp.pos(1.0 - u)
        if self.name == "logistic":
            return cp.logistic(-u)
        # cvxpy's huber(v) is v^2 for |v| <= 1, else 2|v| - 1
        return 0.5 * self.delta**2 * cp.huber(u / self.delta)


def design(x: np.ndarray) -> np.ndarray:
    """(N, d) features -> (N, d + 1) with a trailing constant feature for the bias."""
    return np.hstack([x, np.ones((x.shape[0], 1))])


def score_terms(loss: Loss, x: np.ndarray, y: np.ndarray, theta: np.ndarray
                ) -> tuple[np.ndarray, np.ndarray | None]:
    """Per-sample loss at the data and, for classification, at flipped labels: (a, b)."""
    score = design(x) @ theta
    if loss.is_classification:
        return loss.value(y * score), loss.value(-y * score)
    return loss.value(score - y), None


def min_multiplier(loss: Loss, theta: np.ndarray, kappa: float) -> float:
    """The least lam with a finite worst case: L·||w||_inf, and L/kappa for regression."""
    bound = float(np.max(np.abs(theta[:-1]), initial=0.0))
    if not loss.is_classification and math.isfinite(kappa):
        bound = max(bound, 1.0 / kappa)
    return loss.lipschitz * bound


def worst_case_risk(loss: Loss, x: np.ndarray, y: np.ndarray, theta: np.ndarray,
                    rho: float, kappa: float) -> float:
    """sup of E_Q[loss] over the Wasserstein ball of radius rho, exactly.

    For fixed theta the dual objective is piecewise linear in lam with breakpoints
    (b_i - a_i)/kappa, so its minimum over lam >= lam_min is at lam_min or a breakpoint.
    """
    a, b = score_terms(loss, x, y, theta)
    lam_min = min_multiplier(loss, theta, kappa)
    if b is None or not math.isfinite(kappa):
        return lam_min * rho + float(a.mean())
    breaks = (b - a) / kappa
    lams = np.concatenate([[lam_min], breaks[breaks > lam_min]])  # (K,)
    values = lams * rho + np.maximum(a[None, :], b[None, :] - kappa * lams[:, None]).mean(1)
    return float(values.min())


BOXES = {"sym_box": (-1.0, 1.0), "unit_box": (0.0, 1.0)}  # DRFL Props 6.3 and 6.4


def _box_geometry(x: np.ndarray, y: np.ndarray, w: np.ndarray, support: str
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The samples projected on the box p (N, d), their ℓ1 distances to it (N,), and the
    room (N, d) to move each feature of p, inside the box, in the direction that raises the
    hinge at the kept label, and at the flipped one."""
    lo, hi = BOXES[support]
    proj = np.clip(x, lo, hi)
    toward = np.sign(y[:, None] * w[None, :])  # +1: the kept label's hinge rises as x_j falls
    keep = np.where(toward > 0, proj - lo, hi - proj) * (toward != 0)
    flip = np.where(toward > 0, hi - proj, proj - lo) * (toward != 0)
    return proj, np.abs(x - proj).sum(axis=1), keep, flip


def box_sample_terms(x: np.ndarray, y: np.ndarray, theta: np.ndarray, lam: np.ndarray,
                     kappa: float, support: str) -> np.ndarray:
    """(K, N): for each multiplier lam_k and sample i, Propositions 6.3 / 6.4's alpha_i,
    max(0, keep, flip). For x_i in the box it is the sup over the box and both labels of
    hinge(y'·score(x')) − lam_k (||x' − x_i||_1 + kappa·1[y' != y_i]); for x_i outside,
    the adversary first moves it to its projection p_i on the box (cost lam·d_i), and the
    floor alpha >= 0 that the propositions print stays (the exact sup would be −lam·d_i
    there: it makes the problem unbounded when rho is below the mean d_i)."""
    w = theta[:-1]
    proj, outside, dist_keep, dist_flip = _box_geometry(x, y, w, support)
    margin = y * (design(proj) @ theta)
    gain = np.maximum(np.abs(w)[None, :] - lam[:, None], 0.0)  # (K, d)
    moved = lam[:, None] * outside[None, :]  # (K, N)
    terms = np.maximum(0.0, 1 - margin[None, :] + gain @ dist_keep.T - moved)
    if math.isfinite(kappa):
        flip = 1 + margin[None, :] + gain @ dist_flip.T - kappa * lam[:, None] - moved
        terms = np.maximum(terms, flip)
    return terms


def box_worst_case_risk(x: np.ndarray, y: np.ndarray, theta: np.ndarray, rho: float,
                        kappa: float, support: str) -> float:
    """Propositions 6.3 / 6.4's R_s at theta, exactly: min over lam >= 0 of lam·rho + mean_i
    box_sample_terms, a convex piecewise-linear function of lam, evaluated at every kink
    (the |w_j|, and in each interval between them the zeros and crossings of the pieces).
    For samples in the box it is the hinge loss's worst case over the Wasserstein ball with
    features kept in the box."""
    w = theta[:-1]
    proj, outside, dist_keep, dist_flip = _box_geometry(x, y, w, support)
    margin = y * (design(proj) @ theta)
    abs_w = np.abs(w)
    flip_cost = kappa if math.isfinite(kappa) else 0.0
    edges = np.unique(np.concatenate([[0.0], abs_w]))
    candidates = [edges, edges[-1:] + 1.0]
    for left, right in zip(edges, [*edges[1:], np.inf], strict=True):
        mid = left + 1.0 if math.isinf(right) else (left + right) / 2
        active = abs_w > mid  # the features whose gain is positive in this interval
        # keep = ck - sk·lam, flip = cf - sf·lam on the interval; alpha = max(0, keep, flip)
        ck = 1 - margin + dist_keep[:, active] @ abs_w[active]
        sk = dist_keep[:, active].sum(axis=1) + outside
        cf = 1 + margin + dist_flip[:, active] @ abs_w[active]
        sf = dist_flip[:, active].sum(axis=1) + outside + flip_cost
        with np.errstate(divide="ignore", invalid="ignore"):
            found = np.concatenate([ck / sk, cf / sf, (cf - ck) / (sf - sk)])
        candidates.append(found[np.isfinite(found) & (found >= left) & (found <= right)])
    lams = np.unique(np.concatenate(candidates))
    lams = lams[lams >= 0]
    return float((lams * rho + box_sample_terms(x, y, theta, lams, kappa, support).mean(1)).min())


def mean_loss(loss: Loss, x: np.ndarray, y: np.ndarray, theta: np.ndarray) -> float:
    """Empirical risk (no robustness) of theta on (x, y)."""
    return float(score_terms(loss, x, y, theta)[0].mean())


def loss_gradient(loss: Loss, x: np.ndarray, y: np.ndarray, theta: np.ndarray) -> np.ndarray:
    """(D,) gradient of mean_loss in theta."""
    z = design(x)
    score = z @ theta
    if loss.is_classification:
        return z.T @ (loss.derivative(y * score) * y) / y.size
    return z.T @ loss.derivative(score - y) / y.size


def accuracy(x: np.ndarray, y: np.ndarray, theta: np.ndarray) -> float:
    """Share of samples with sign(score) == y (a zero score counts as wrong)."""
    return float(np.mean(y * (design(x) @ theta) > 0))

"""A controlled error in the Δ-FL threshold: the dose of a dose–response (docs/dose_response.md).

``shifted`` wraps another estimator (``estimator.shifted.base``) and moves what it
returns by a known amount, in either or both of two units:

- ``level_shift`` δ: the base estimates the quantile at level (1 − θ) + δ, clipped to
  [0, 1], instead of 1 − θ (a positive δ keeps fewer devices: about θ − δ of the
  cohort's α-weight instead of θ);
- ``offset_nats`` c: the threshold the filter applies is the base's η̂ + c (a positive
  c keeps fewer devices).

The filter then keeps F_k(w_t) ≥ η̂_base(1 − θ + δ) + c. Its row in ``bias.parquet``
carries that threshold as ``estimate`` and the dose in ``offset_nats`` and
``level_shift``, so its bias against Q_pop is the base's plus the dose. No server
would run it: it exists to ask how large a threshold error must be before the tail
error moves (the measured bias of any estimator then reads off the curve).
The base sends and receives what it would alone; the dose costs nothing on the wire.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from simfl.errors import InputError
from simfl.quantile.estimators import Cohort, Estimate, Estimator, StatefulEstimator
from simfl.quantile.panel import EstimatorContext, _estimator


@dataclass(frozen=True)
class Shifted:
    base: Estimator
    offset_nats: float = 0.0
    level_shift: float = 0.0
    name: str = "shifted"

    @property
    def losses_in_clear(self) -> bool:
        return self.base.losses_in_clear

    def level(self, level: float) -> float:
        """The level the base estimates at: ``level`` + δ, within [0, 1]."""
        return min(max(level + self.level_shift, 0.0), 1.0)

    def estimate(self, cohort: Cohort, level: float, rng: np.random.Generator) -> Estimate:
        made = self.base.estimate(cohort, self.level(level), rng)
        return dataclasses.replace(made, threshold=made.threshold + self.offset_nats)


def shifted(ctx: EstimatorContext) -> Shifted:
    """``estimator.shifted.base`` moved by ``offset_nats`` and ``level_shift``; the base
    must keep no state across rounds (its η̂ at a shifted level would be another
    estimator's state)."""
    cfg = ctx.cfg.shifted
    base = _estimator(cfg.base, ctx)
    if isinstance(base, StatefulEstimator):
        raise InputError(f"'estimator.shifted.base' = {cfg.base!r} keeps state across "
                         f"rounds; shifted wraps an estimator without memory "
                         f"(cohort_exact, secure_mm, secure_bisection, ipw, ...)")
    return Shifted(base, cfg.offset_nats, cfg.level_shift)


def dose(estimator: object) -> tuple[float, float]:
    """(offset_nats, level_shift) of an estimator: its dose, (0, 0) for any but shifted."""
    if isinstance(estimator, Shifted):
        return estimator.offset_nats, estimator.level_shift
    return 0.0, 0.0

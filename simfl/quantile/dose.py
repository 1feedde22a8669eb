"""A controlled error in the Δ-FL threshold: the dose of a dose–response (docs/dose_response.md).

``shifted`` wraps another estimator (``estimator.shifted.base``) and moves what it
returns by a known amount, in either or both of two units:

- ``level_shift`` δ: the base estimates the quantile at level (1 − θ) + δ, clipped to
  [0, 1], instead of 1 − θ (a positive δ keeps fewer devices: about θ − δ of the
  cohort's α-weight instead of θ);
- ``offset_nats`` c: the threshold the filter applies is the base's η̂ + c (a positive
  c keeps fewer devices).

The filter then keeps F_k(w_t) ≥ η̂_base(1 − θ + δ) + c, from round ``from_round`` on
(before it, the base's η̂ alone). A dose from round 0 can stop learning altogether: at
the initial model every device's loss is about the same (FEMNIST's linear model: all
within 0.1 nats of log 62 in a cohort of 20), so any positive offset of 0.1 nats or more
filters out the whole cohort, the model never moves, and no later round keeps anyone.
The counter of rounds is the estimator's state (the panel holds it, as ``tracking``'s).
Its row in ``bias.parquet``
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
from simfl.quantile.panel import EstimatorContext, make_estimator
from simfl.scenario import EstimatorConfig


@dataclass(frozen=True)
class Shifted:
    base: Estimator
    offset_nats: float = 0.0
    level_shift: float = 0.0
    from_round: int = 0
    name: str = "shifted"

    @property
    def losses_in_clear(self) -> bool:
        return self.base.losses_in_clear

    def init(self) -> int:
        """The state: rounds estimated so far."""
        return 0

    def dose(self, round_idx: int) -> tuple[float, float]:
        """(offset, level shift) applied at round ``round_idx``."""
        if round_idx < self.from_round:
            return 0.0, 0.0
        return self.offset_nats, self.level_shift

    def estimate(self, cohort: Cohort, level: float, rng: np.random.Generator,
                 state: int) -> Estimate:
        offset, shift = self.dose(state)
        made = self.base.estimate(cohort, min(max(level + shift, 0.0), 1.0), rng)
        # no Woodruff interval: the dose moves η̂ off the quantile the base's weights define
        return dataclasses.replace(made, threshold=made.threshold + offset, state=state + 1,
                                   weights=None)


def shifted(ctx: EstimatorContext) -> Shifted:
    """``estimator.shifted.base`` moved by ``offset_nats`` and ``level_shift``; the base
    must keep no state across rounds (its η̂ at a shifted level would be another
    estimator's state)."""
    cfg = ctx.cfg.shifted
    base = make_estimator(cfg.base, ctx, "estimator.shifted.base")
    if isinstance(base, StatefulEstimator):
        raise InputError(f"'estimator.shifted.base' = {cfg.base!r} keeps state across "
                         f"rounds; shifted wraps an estimator without memory "
                         f"(cohort_exact, secure_mm, secure_bisection, ipw, ...)")
    return Shifted(base, cfg.offset_nats, cfg.level_shift, cfg.from_round)


def base(cfg: EstimatorConfig) -> str:
    """The estimator ``shifted`` wraps (its registry row's ``base`` hook: the scenario
    checks count that estimator's keys and needs as the scenario's)."""
    return cfg.shifted.base


def dose(estimator: object, round_idx: int) -> tuple[float, float]:
    """(offset_nats, level_shift) an estimator applies at ``round_idx``: (0, 0) for any
    but shifted."""
    if isinstance(estimator, Shifted):
        return estimator.dose(round_idx)
    return 0.0, 0.0

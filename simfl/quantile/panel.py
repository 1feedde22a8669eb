"""The configured estimators of a run: one drives the filter, the others shadow it.

Shadow estimators see exactly the cohort losses the driving one sees, every
round, so their biases are compared on identical draws (docs/design.md §7); only
the driving estimator's protocol is charged on the wire.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from simfl.quantile.estimators import (
    IPW,
    CheckIns,
    Cohort,
    CohortExact,
    Estimate,
    Estimator,
    PostStratified,
    SecureBisection,
    SecureMM,
    Tracking,
)
from simfl.quantile.kernels import weighted_quantile
from simfl.rng import Streams
from simfl.scenario import EstimatorConfig


def _factories(cfg: EstimatorConfig, checkins: CheckIns,
               strata: np.ndarray) -> dict[str, Callable[[], Estimator]]:
    mm, bis, tr = cfg.secure_mm, cfg.secure_bisection, cfg.tracking
    return {
        "cohort_exact": CohortExact,
        "secure_mm": lambda: SecureMM(mm.iterations, mm.tol, noise_std=cfg.noise_std),
        "secure_bisection": lambda: SecureBisection(bis.low, bis.high, bis.tol,
                                                    noise_std=cfg.noise_std),
        "tracking": lambda: Tracking(tr.initial, tr.step, noise_std=cfg.noise_std),
        "ipw": lambda: IPW(checkins),
        "poststrat": lambda: PostStratified(strata),
    }


class EstimatorPanel:
    """Runs every configured estimator on each cohort; holds their state over rounds."""

    def __init__(self, cfg: EstimatorConfig, theta: float, num_devices: int,
                 streams: Streams, strata: np.ndarray | None = None) -> None:
        """``strata``: (N,) the stratum (region) of every training device, for
        ``poststrat`` (default: one stratum, the cohort quantile)."""
        self.theta, self.level, self.streams = theta, 1.0 - theta, streams
        self.checkins = CheckIns(num_devices, cfg.ipw.prior)
        if strata is None:
            strata = np.zeros(num_devices, dtype=np.int64)
        factories = _factories(cfg, self.checkins, np.asarray(strata, dtype=np.int64))
        names = dict.fromkeys((cfg.name, *cfg.shadow))  # the driver first, no repeats
        self.estimators: list[Estimator] = [factories[name]() for name in names]
        self.wants_checkins = any(isinstance(e, IPW) for e in self.estimators)

    @property
    def driver(self) -> Estimator:
        return self.estimators[0]

    def estimate(self, cohort: Cohort, round_idx: int) -> dict[str, Estimate]:
        """Every estimator's η̂ on this cohort, the driving one first."""
        return {e.name: e.estimate(cohort, self.level,
                                   self.streams.numpy(f"quantile_noise/{e.name}", round_idx))
                for e in self.estimators}

    def observe_online(self, t_s: float, online_idx: np.ndarray) -> None:
        if self.wants_checkins:
            self.checkins.observe(t_s, online_idx)

    def bias_columns(self, round_idx: int, cohort: Cohort, estimates: dict[str, Estimate],
                     population: tuple[np.ndarray, np.ndarray] | None
                     ) -> dict[str, object]:
        """``bias.parquet`` columns for one round, one row per estimator. ``population``
        = (F_k(w_t), α_k) over every training device on bias rounds, else None."""
        names = list(estimates)
        eta = np.array([estimates[n].threshold for n in names])
        oracle = conformity = np.full(len(names), np.nan)
        if population is not None:
            losses, weights = population
            oracle = np.full(len(names), weighted_quantile(losses, weights, self.level))
            # (E,) α-weight of the population at or above each estimate
            conformity = (losses[None, :] >= eta[:, None]) @ weights / weights.sum()
        protocol_bytes = [sum(x.up_bytes + x.down_bytes for x in estimates[n].exchanges)
                          for n in names]
        return dict(round=round_idx, t_s=cohort.t_s, estimator=names,
                    driver=np.arange(len(names)) == 0, theta=self.theta, estimate=eta,
                    cohort_size=len(cohort.losses),
                    secure_sums=np.array([estimates[n].secure_sums for n in names]),
                    protocol_bytes=np.array(protocol_bytes, dtype=np.int64),
                    oracle_quantile=oracle, bias=eta - oracle, realized_conformity=conformity)

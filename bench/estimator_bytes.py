"""Bytes each threshold estimator puts on the wire, per reporting device and round
(docs/estimators.md's table): every built-in estimator run on one cohort of 26
reporters (K = 20 with 30 % over-selection) through the panel that charges runs.

    python bench/estimator_bytes.py [--cohort 26]
"""

from __future__ import annotations

import argparse

import numpy as np

from simfl.plugins import ESTIMATORS
from simfl.quantile.estimators import Cohort
from simfl.quantile.panel import EstimatorPanel
from simfl.rng import Streams
from simfl.scenario import EstimatorConfig

POPULATION = 200


class _Rates:
    """A known online rate of 0.3 for every device (ipw_known's oracle)."""

    def online_prob(self, device_idx: np.ndarray, t_s: float) -> np.ndarray:
        return np.full(len(device_idx), 0.3)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cohort", type=int, default=26, help="reporting devices")
    args = parser.parse_args()
    names = [p.name for p in ESTIMATORS.builtins() if p.name != "shifted"]
    rng = np.random.default_rng(0)
    cfg = EstimatorConfig(name=names[0], shadow=tuple(names[1:]))
    panel = EstimatorPanel(cfg, 0.5, POPULATION, Streams(0),
                           strata=rng.integers(0, 3, POPULATION), known_rates=_Rates())
    idx = rng.choice(POPULATION, args.cohort, replace=False)
    cohort = Cohort(rng.gamma(3, 0.5, args.cohort), np.ones(args.cohort), idx, 3600.0)
    everyone = Cohort(rng.gamma(3, 0.5, POPULATION), np.ones(POPULATION),
                      np.arange(POPULATION), 3600.0)
    print("estimator            up B   down B  secure sums")
    for name, made in panel.estimate(cohort, 0, everyone).items():
        messages = panel.messages(name, made)
        print(f"{name:20s} {sum(m.up_bytes for m in messages):6d} "
              f"{sum(m.down_bytes for m in messages):8d} {made.secure_sums:12d}")


if __name__ == "__main__":
    main()

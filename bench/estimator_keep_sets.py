"""How often a secure estimator's keep set differs from cohort_exact's, and what it costs.

Random weighted cohorts (gamma(2, 1) losses, integer sample-count weights 20-399, level
0.2 / 0.5 / 0.9), noise off. ``--module FILE`` loads the estimators from another copy of
simfl/quantile/estimators.py, e.g. the version before the exact protocols:

    git show 3d7e63b:simfl/quantile/estimators.py > /tmp/old_estimators.py
    python bench/estimator_keep_sets.py --module /tmp/old_estimators.py
    python bench/estimator_keep_sets.py
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
from types import ModuleType

import numpy as np

from simfl.quantile import estimators


def load(path: str | None) -> ModuleType:
    if path is None:
        return estimators
    spec = importlib.util.spec_from_file_location("estimators_under_test", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--module", help="an estimators.py to load instead of simfl's")
    parser.add_argument("--cohorts", type=int, default=2000)
    args = parser.parse_args()
    module = load(args.module)
    rng, unused = np.random.default_rng(0), np.random.default_rng(1)
    for k in (13, 100):
        results: dict[str, list[tuple[bool, int]]] = {}
        for _ in range(args.cohorts):
            losses = rng.gamma(2.0, 1.0, k)
            weights = rng.integers(20, 400, k).astype(float)
            cohort = module.Cohort(losses, weights / weights.mean(), np.arange(k), 0.0)
            level = float(rng.choice([0.2, 0.5, 0.9]))
            exact = losses >= module.CohortExact().estimate(cohort, level, unused).threshold
            for est in (module.SecureBisection(), module.SecureMM()):
                out = est.estimate(cohort, level, unused)
                differs = bool((exact != (losses >= out.threshold)).any())
                results.setdefault(est.name, []).append((differs, out.secure_sums))
        for name, rows in results.items():
            num_differ = sum(d for d, _ in rows)
            sums = [s for _, s in rows]
            print(f"K = {k:3d}  {name:16s} keep set differs in {num_differ}/{len(rows)} "
                  f"({100 * num_differ / len(rows):.1f} %) cohorts; secure sums median "
                  f"{np.median(sums):.0f}, max {max(sums)}")


if __name__ == "__main__":
    main()

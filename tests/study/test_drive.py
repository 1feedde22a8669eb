"""The drive's registered comparisons: paired p90 differences, Holm over the secondary
two, and the three verdicts, on a hand-made table of runs."""

from __future__ import annotations

import polars as pl
import pytest

from simfl.study.drive import report, verdict
from simfl.study.intervals import holm, paired


def test_verdicts() -> None:
    assert verdict(0.1, 0.9) == "different"
    assert verdict(-0.9, -0.1) == "different"
    assert verdict(-0.4, 0.3) == "equivalent within ±0.5"
    assert verdict(-0.6, 0.3) == "not detected"


def test_the_report_pairs_by_seed_and_adjusts_the_secondary_comparisons() -> None:
    p90 = {"C": [0.50, 0.52, 0.49, 0.51], "O": [0.49, 0.50, 0.48, 0.50],
           "B": [0.50, 0.51, 0.50, 0.50], "F": [0.52, 0.53, 0.51, 0.53]}
    rows = [{"arm": arm, "seed": s, "test_p90": v, "test_mean": v - 0.1, "bias": -0.1,
             "kept_share": 0.6, "mbytes": 1.0, "run": f"{arm}{s}"}
            for arm, values in p90.items() for s, v in enumerate(values)]
    lines = report(pl.DataFrame(rows))
    primary = paired((pl.Series(p90["C"]) - pl.Series(p90["O"])).to_numpy() * 100)
    assert primary.estimate == pytest.approx(1.25)
    assert lines[1].startswith("C - O (primary)          4  +1.25 [")
    assert lines[1].endswith(verdict(primary.low, primary.high))
    b_c = paired((pl.Series(p90["B"]) - pl.Series(p90["C"])).to_numpy() * 100)
    f_o = paired((pl.Series(p90["F"]) - pl.Series(p90["O"])).to_numpy() * 100)
    adjusted = holm([b_c.p, f_o.p])
    assert f"p {adjusted[0]:.3f}" in lines[2] and f"p {adjusted[1]:.3f}" in lines[3]
    assert lines[6].startswith("C        4  50.50 ± 1.29")

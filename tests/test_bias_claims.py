"""simfl.study.bias_claims and simfl.study.bias_table's verdicts and filters, on small
hand-made inputs whose answers are worked out by hand (t(0.975, 2) = 4.302653,
t(0.975, 4) = 2.776445)."""

from __future__ import annotations

import contextlib
import io
from pathlib import Path
from types import ModuleType
from unittest import mock

import numpy as np
import polars as pl
import pytest

from simfl.errors import InputError
from simfl.study import bias_claims, bias_table
from tests.test_bias_table import write_paired_table

T2, T4 = 4.302653, 2.776445


def run(tool: ModuleType, *args: str) -> str:
    """What ``python -m simfl.study.<tool> ARGS`` prints (it must succeed)."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert tool.main(list(args)) == 0
    return out.getvalue()


@pytest.mark.parametrize(("values", "margin", "want"), [
    # mean 0.02, half 4.302653 · 0.01 / √3 = 0.02484: [-0.0048, +0.0448]
    ((0.01, 0.02, 0.03), 0.05, "equivalent within ±0.05"),
    ((0.01, 0.02, 0.03), 0.01, "not detected"),
    ((1.0, 1.1, 0.9), 0.01, "different"),
    # mean 0.005, half 4.302653 · 0.001 / √3 = 0.00248: [+0.0025, +0.0075]
    ((0.004, 0.005, 0.006), 0.01, "different and equivalent within ±0.01"),
    ((0.5,), 0.01, ""),  # one value: no interval, no verdict
])
def test_the_verdict_of_an_interval(values: tuple[float, ...], margin: float, want: str) -> None:
    assert bias_table.verdict(np.array(values), margin) == want


def test_only_keeps_one_cell_and_margin_prints_the_verdict(tmp_path: Path) -> None:
    """write_paired_table's cell x: A − B per run 0.01, 0.02, 0.03 (test_bias_table.py)."""
    write_paired_table(tmp_path)
    out = run(bias_table, str(tmp_path), "--paired", "A,B", "--only", "variant=x",
              "--digits", "4", "--margin", "0.05")
    assert out.splitlines() == ["| seeds | A − B |", "|---|---|",
                                "| 3 | +0.0200 ± 0.0248 (equivalent within ±0.05) |"]


def test_only_refuses_a_value_no_cell_has(tmp_path: Path) -> None:
    write_paired_table(tmp_path)
    with contextlib.redirect_stderr(io.StringIO()) as err:
        assert bias_table.main([str(tmp_path), "--only", "variant=z"]) == 2
    assert "no cell" in err.getvalue() and "variant=z" in err.getvalue()


def test_a_printed_interval_reads_as_a_t_test_with_four_degrees_of_freedom() -> None:
    one = bias_claims.Interval.parse(f"+1.0 ± {T4}")  # se 1, t 1: two-sided p 0.373901
    assert one.mean == 1.0 and one.p == pytest.approx(0.373901, abs=1e-6)
    assert bias_claims.Interval.parse("−2.0 ± 0.5").mean == -2.0  # the typeset minus
    assert one.widened(1) == pytest.approx(T4)
    # m = 20: t(1 - 0.025 / 20, 4) = t(0.99875, 4) = 6.758253
    assert one.widened(20) == pytest.approx(6.758253, abs=1e-5)
    assert bias_claims.Interval(0.0, 0.0).p == 1.0


def test_the_family_is_every_distinct_signed_interval(tmp_path: Path) -> None:
    page = tmp_path / "habits.md"
    page.write_text("a +0.5 ± 0.1 and −0.5 ± 0.1 (typeset) and -0.5 ± 0.1 again; a level "
                    "1.5 ± 0.1 and a margin ±0.01 are not in it; +0.0100 ± 0.1000 is.\n")
    family = bias_claims.family([page])
    assert sorted(family) == ["+0.0100 ± 0.1000", "+0.5 ± 0.1", "-0.5 ± 0.1"]


def test_multiplicity_adjusts_a_claim_over_the_family(tmp_path: Path) -> None:
    """Family: +0.5 ± 0.1 (t = 0.5 / (0.1 / 2.776445) = 13.882, p = 1.5611e-4) and
    +0.01 ± 0.1 (t = 0.2776, p = 0.795). Bonferroni 2p = 3.12e-4; Holm, the smaller
    first: the same; its interval widened to t(0.99375, 4) = 3.495406: 0.1 · 3.495406 /
    2.776445 = ± 0.1259."""
    page = tmp_path / "habits.md"
    page.write_text("+0.5 ± 0.1 and +0.01 ± 0.1\n")
    claims = (("the claim", "habits.md", "+0.5 ± 0.1"), ("elsewhere", "other.md", "+9.9 ± 0.1"))
    with mock.patch.object(bias_claims, "CLAIMS", claims):
        lines = bias_claims.multiplicity([page])
    assert lines[0] == "2 distinct signed intervals on habits.md"
    assert lines[4:] == ["| the claim | +0.5 ± 0.1 | different | 1.6e-04 | 0.00031 | 0.00031 | "
                         "+0.5000 ± 0.1259 | different |"]


def study_table(folder: Path) -> None:
    """Two cohort sizes of three seeds, estimators cohort_exact, A, B on rounds 0-4 (0 is
    burn-in): per run A − B of the availability term is K 20: 0.01, 0.02, 0.03 and
    K 100: 0.00, 0.02, 0.01 (seed 0, 1, 2)."""
    rows = []
    for k, diffs in ((20, (0.01, 0.02, 0.03)), (100, (0.0, 0.02, 0.01))):
        for seed, diff in enumerate(diffs):
            for rnd in range(5):
                for estimator, term in (("cohort_exact", 0.3), ("A", 0.1 + diff), ("B", 0.1)):
                    rows.append(dict(
                        round=rnd, estimator=estimator, theta=0.5, oracle_quantile=1.0,
                        realized_conformity=0.5, sampling_bias=0.0,
                        availability_bias=9.0 if rnd == 0 else term, selection_bias=0.0,
                        bias=term, variant="v", clients_per_round=k, seed=seed,
                        run_id=f"k={k},seed={seed}"))
    pl.DataFrame(rows).write_parquet(folder / "bias.parquet")


def test_the_contrast_of_two_cohort_sizes(tmp_path: Path) -> None:
    """K 20: mean 0.02, sd 0.01, half 4.302653 · 0.01 / √3 = 0.02484. K 100: mean 0.01,
    sd 0.01, the same half. Welch: difference 0.01, se √(2 · 0.0001 / 3) = 0.0081650,
    df 4 (equal variances and sizes), half 2.776445 · 0.0081650 = 0.02267, t 1.2247,
    p 0.2879. By seed: 0.01, 0.0, 0.02: mean 0.01, sd 0.01, half 0.02484, t √3, p (2 df)
    0.2254."""
    study_table(tmp_path)
    out = run(bias_claims, "contrast", str(tmp_path), "--variant", "v", "--pair", "A,B")
    assert out.splitlines()[4:] == [
        "| K = 20 | 3 | +0.0200 ± 0.0248 | |",
        "| K = 100 | 3 | +0.0100 ± 0.0248 | |",
        "| K = 20 − K = 100, Welch | 3 + 3 | | +0.0100 [-0.0127, +0.0327], p = 0.29 |",
        "| K = 20 − K = 100, paired by seed | 3 | | +0.0100 [-0.0148, +0.0348], p = 0.23 |"]


def test_chosen_seeds_of_a_printed_per_seed_table() -> None:
    """The last table's seeds 1 and 2 in column x: 0.2 and 0.4, mean 0.3, sd 0.141421,
    half t(0.975, 1) 12.706205 · 0.141421 / √2 = 1.2706."""
    text = ("| seed | x | y |\n|---|---|---|\n| 0 | +9 | +9 |\n\n"
            "| seed | x | y |\n|---|---|---|\n| 0 | +9.0 | 0 |\n| 1 | +0.2 | 0 |\n"
            "| 2 | +0.4 | 0 |\n| mean ± 95 % | +3.2 ± 9 | 0 |\n")
    lines = bias_claims.seed_rows(text, -1, [1, 2], ["x"])
    assert lines == ["| seeds | x |", "|---|---|", "| 1, 2 | +0.3000 ± 1.2706 (not detected) |"]
    with pytest.raises(InputError, match="seed 7"):
        bias_claims.seed_rows(text, -1, [7], ["x"])

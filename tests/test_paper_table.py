"""simfl.study.paper_table (and its tables, simfl.study.paper_cells and paper_paired) on
the paper runs kept in docs/runs: its cells equal the kept manifests' figures, recomputed
here by hand, under the rules' names."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from simfl.study import paper_cells, paper_paired, paper_table

ROOT = Path(__file__).parents[1]
KEPT = ROOT / "docs" / "runs" / "paper_linear"
COMMAND = [sys.executable, "-m", "simfl.study.paper_table"]


def kept(variant: str, sweep: Path = KEPT) -> dict[int, dict[str, float]]:
    """seed -> the final test figures (in %) of the kept runs of ``variant``."""
    out = {}
    for manifest in sorted(sweep.glob(f"variant={variant},seed=*/manifest.json")):
        test = json.loads(manifest.read_text())["summary"]["test"]
        seed = int(manifest.parent.name.rsplit("=", 1)[1])
        out[seed] = {"p90": 100 * test["p90"], "mean": 100 * test["mean"]}
    return out


@pytest.mark.skipif(len(kept("fedavg")) < 2 or not kept("deltafl_0_5"),
                    reason="needs kept paper runs in docs/runs")
@pytest.mark.slow
def test_paper_table_cells_equal_the_kept_manifests() -> None:
    out = subprocess.run(
        [*COMMAND,
         "scenarios/paper/linear.sweep.toml", "--versus", "fedavg", "--results", "docs/runs"],
        cwd=ROOT, check=True, capture_output=True, text=True).stdout
    fedavg, deltafl = kept("fedavg"), kept("deltafl_0_5")
    p90 = np.array([run["p90"] for run in fedavg.values()])
    cell = f"{p90.mean():.2f} ± {p90.std(ddof=1):.2f}"
    assert f"| FedAvg | {len(p90)} | {cell} | 49.66 ± 0.67 |" in out  # the paper's cell beside
    seeds = sorted(set(fedavg) & set(deltafl))
    diff = np.mean([deltafl[s]["p90"] - fedavg[s]["p90"] for s in seeds])
    assert f"| Δ-FL θ = 0.5 | {', '.join(map(str, seeds))} | {diff:+.2f} [" in out


BATCH32 = ROOT / "docs" / "runs" / "paper_linear_batch32"


@pytest.mark.skipif(len(kept("fedavg")) < 2 or len(kept("fedavg", BATCH32)) < 2,
                    reason="needs kept paper runs in docs/runs")
@pytest.mark.slow
def test_a_second_sweeps_variant_of_the_same_name_is_kept_apart() -> None:
    out = subprocess.run(
        [*COMMAND,
         "scenarios/paper/linear.sweep.toml", "--also", "scenarios/paper/linear_batch32.sweep.toml",
         "--versus", "paper_linear_batch32/fedavg", "--results", "docs/runs"],
        cwd=ROOT, check=True, capture_output=True, text=True).stdout
    b10, b32 = kept("fedavg"), kept("fedavg", BATCH32)
    for label, runs in (("FedAvg", b10), ("FedAvg, batch 32", b32)):
        p90 = np.array([run["p90"] for run in runs.values()])
        assert f"| {label} | {len(p90)} | {p90.mean():.2f} ± {p90.std(ddof=1):.2f} |" in out
    seeds = sorted(set(b10) & set(b32))  # each seed paired once, not once per pair of runs
    diff = np.mean([b10[s]["p90"] - b32[s]["p90"] for s in seeds])
    assert f"| FedAvg | {', '.join(map(str, seeds))} | {diff:+.2f} [" in out


def test_rule_labels_name_what_differs_from_the_papers_protocol() -> None:
    def scenario(**model: object) -> dict:
        return {"aggregator": {"name": "deltafl", "theta": 0.5}, "data": {},
                "model": {"name": "linear", **model}, "train": {"batch_size": 10}}

    label = paper_cells.rule_label
    assert label(scenario()) == "Δ-FL θ = 0.5"  # a manifest from before model.bias/init
    assert label(scenario(bias=True, init="pytorch")) == "Δ-FL θ = 0.5"
    assert label(scenario(bias=False, init="zeros")) == "Δ-FL θ = 0.5, no bias, from W = 0"
    assert label(scenario(bias=False)) == "Δ-FL θ = 0.5, no bias"
    batch32 = {**scenario(init="zeros"), "train": {"batch_size": 32}}
    assert label(batch32) == "Δ-FL θ = 0.5, from W = 0, batch 32"


def test_rows_sharing_a_label_are_told_apart_by_the_settings_that_differ() -> None:
    old = {"seed": 0, "model": {"l2": 1e-4}, "train": {"lr": 1.0}}  # before model.bias
    new = {"seed": 1, "model": {"l2": 1e-6, "bias": True}, "train": {"lr": 1.0}}
    other = {"seed": 0, "model": {"l2": 1e-5}, "train": {"lr": 1.0}}
    labels = {"deltafl_0_5": "Δ-FL θ = 0.5", "b/deltafl_0_5": "Δ-FL θ = 0.5", "fedavg": "FedAvg"}
    got = paper_table.distinguish(labels, {"deltafl_0_5": old, "b/deltafl_0_5": new,
                                           "fedavg": other})
    assert got == {"deltafl_0_5": "Δ-FL θ = 0.5, model.l2 = 0.0001",
                   "b/deltafl_0_5": "Δ-FL θ = 0.5, model.l2 = 1e-06", "fedavg": "FedAvg"}
    # a key the older manifest lacks counts where a run set it away from its default
    sourced = {**new, "data": {"sources": ["zshuai8/FedGMM_ICML2023@5a626c8"]}}
    got = paper_table.distinguish(labels, {"deltafl_0_5": old, "b/deltafl_0_5": sourced,
                                           "fedavg": other})
    assert got["deltafl_0_5"] == "Δ-FL θ = 0.5, data.sources = (), model.l2 = 0.0001"
    assert got["b/deltafl_0_5"] == ("Δ-FL θ = 0.5, data.sources = ['zshuai8/FedGMM_ICML2023"
                                    "@5a626c8'], model.l2 = 1e-06")


def test_wall_time_is_told_per_device_when_runs_ran_on_several() -> None:
    part = pl.DataFrame({"device": ["cpu", "H100", "cpu"], "wall_s": [600.0, 60.0, 1200.0]})
    wall_cell = paper_cells.wall_cell
    assert wall_cell(part, by_device=True) == "15.0 min (cpu); 1.0 min (H100)"
    assert wall_cell(part.filter(pl.col("device") == "cpu"), by_device=False) == "15.0 min"


def test_by_size_splits_the_devices_at_n_samples_per_seed() -> None:
    errors = pl.DataFrame({
        "variant": ["fedavg"] * 5 + ["dfl"] * 2,
        "seed": [0, 0, 0, 1, 1, 0, 0],
        "num_samples": [100, 120, 300, 110, 400, 100, 120],
        "error": [0.10, 0.20, 0.05, 0.30, 0.07, 0.12, 0.14]})
    labels = {"fedavg": "FedAvg", "dfl": "Δ-FL"}
    out = "\n".join(paper_paired.by_size(errors, 250, ["fedavg", "dfl"], labels))
    # FedAvg: seed 0's small devices average 15 %, seed 1's 30 % -> 22.50 ± 10.61;
    # the large ones 5 % and 7 % -> 6.00 ± 1.41; 1-2 small devices a seed, 1 large.
    assert "| FedAvg | 2 | 1–2 | 22.50 ± 10.61 | 1 | 6.00 ± 1.41 |" in out
    assert "| Δ-FL | 1 | 2 | 13.00 | 0 | — |" in out  # no device of 250 samples or more


def test_window_averages_each_runs_last_evaluations() -> None:
    # rounds 0, 10, 20, 30; a window of 20 rounds keeps rounds 20 and 30 of each run
    runs = pl.DataFrame({
        "variant": ["ref"] * 8 + ["dfl"] * 4, "seed": [0] * 4 + [1] * 4 + [0] * 4,
        "round": [0, 10, 20, 30] * 3,
        "p90": [0.9, 0.9, 0.30, 0.20, 0.9, 0.9, 0.40, 0.40, 0.9, 0.9, 0.20, 0.10],
        "mean": [0.5, 0.5, 0.10, 0.20, 0.5, 0.5, 0.20, 0.20, 0.5, 0.5, 0.10, 0.10]})
    labels = {"ref": "FedAvg", "dfl": "Δ-FL"}
    out = "\n".join(paper_paired.window(runs, 20, ["ref", "dfl"], labels, "ref"))
    # ref: finals 20 and 40 -> 30.00 ± 14.14; averages 25 and 40 -> 32.50 ± 10.61; the
    # within-run sd of (30, 20) is 7.07, of (40, 40) 0; means 15 and 20 -> 17.50 ± 3.54
    assert "| FedAvg | 0, 1 | 2 | 30.00 ± 14.14 | 32.50 ± 10.61 | 0.00–7.07 | 17.50 ± 3.54 |" in out
    assert "| Δ-FL | 0 | 2 | 10.00 | 15.00 | 7.07 | 10.00 |" in out
    assert "| Δ-FL | 0 | -10.00 | — | -5.00 | — |" in out  # paired on seed 0 only


def test_by_size_over_window_counts_the_evaluations_where_small_devices_fare_worse() -> None:
    # one run, two evaluations: small devices 20 % then 10 %, the large one 15 % then 25 %
    errors = pl.DataFrame({"variant": ["dfl"] * 6, "seed": [3] * 6,
                           "round": [10, 10, 10, 20, 20, 20],
                           "num_samples": [100, 120, 300, 100, 120, 300],
                           "error": [0.1, 0.3, 0.15, 0.05, 0.15, 0.25]})
    lines = paper_paired.by_size_over_window(errors, 250, 20, ["dfl"], {"dfl": "Δ-FL"})
    assert "| Δ-FL | 3 | 2 | 15.00 ± 7.07 | 20.00 ± 7.07 | 1 |" in lines


def test_evaluations_are_none_where_only_the_final_round_is_kept(tmp_path: Path) -> None:
    rows = pl.DataFrame({"round": [10, 10, 20, 20], "t_s": [1.0, 1.0, 2.0, 2.0],
                         "split": ["test", "train", "test", "test"],
                         "error": [0.5, 0.1, 0.2, 0.4]})
    test = paper_paired.evaluations(tmp_path, rows)
    assert test is not None
    assert test["round"].to_list() == [10, 20]
    assert test["mean"].to_list() == [0.5, pytest.approx(0.3)]
    assert paper_paired.evaluations(tmp_path, rows.filter(pl.col("round") == 20)) is None


def cells(row: str) -> list[str]:
    return [cell.strip() for cell in row.strip().strip("|").split("|")]


def page_lines(*names: str) -> list[str]:
    """The lines of the reproduction pages named: "answer" for docs/reproduction.md, else
    the evidence page docs/reproduction/<name>.md."""
    pages = [ROOT / "docs" / ("reproduction.md" if name == "answer" else f"reproduction/{name}.md")
             for name in names]
    return [line for page in pages for line in page.read_text().splitlines()]


@pytest.mark.parametrize(("results", "name"), [("docs/runs", "convnet"),
                                             ("docs/runs/h100", "convnet_gpu")])
@pytest.mark.slow
def test_the_convnet_tables_in_reproduction_md_are_the_kept_runs(results: str, name: str) -> None:
    """Every row simfl.study.paper_table makes from the kept ConvNet runs (the CPU's and
    the GPU's) stands on its page of docs/reproduction/ with the same figures, rule to the
    mean's p (the page writes out the seeds and, where runs differ, the wall
    times), and so does every row of its per-seed table (``--per-seed``)."""
    out = subprocess.run(
        [*COMMAND,
         "scenarios/paper/convnet.sweep.toml", "--results", results, "--per-seed"],
        cwd=ROOT, check=True, capture_output=True, text=True).stdout
    main, per_seed = out.split("final test error in %")
    rows = [cells(line) for line in main.splitlines()
            if line.startswith("| ") and not line.startswith("| rule ")]
    assert rows, out
    page = [cells(line) for line in page_lines(name) if line.startswith("| ")]
    for row in rows:
        matches = [line for line in page if line[0] == row[0] and line[2:12] == row[2:12]]
        assert matches, f"not in docs/reproduction/{name}.md: {row}"
        assert any(line[1].startswith(row[1]) for line in matches), (row, matches)
    header, *runs = [cells(line) for line in per_seed.splitlines()
                     if line.startswith("| ") and not line.startswith("|---")]
    assert header in page, f"not in docs/reproduction/{name}.md: {header}"
    for row in runs:  # each seed's figures, in a table with the same seeds
        assert row in page, f"not in docs/reproduction/{name}.md: {row}"


def test_per_seed_puts_each_run_under_its_seed() -> None:
    table = pl.DataFrame({"variant": ["ref", "ref", "dfl"], "seed": [2, 0, 2],
                          "label": ["FedAvg", "FedAvg", "Δ-FL"],
                          "p90": [0.25, 0.2612, 0.3], "mean": [0.15, 0.1555, 0.2]})
    out = "\n".join(paper_cells.per_seed(table, ["ref", "dfl"]))
    assert "| rule | seed 0 | seed 2 |" in out
    assert "| FedAvg | 26.12 / 15.55 | 25.00 / 15.00 |" in out
    assert "| Δ-FL | — | 30.00 / 20.00 |" in out  # no run of seed 0


def test_seeds_needed_match_the_textbook_sample_sizes() -> None:
    # Paired t-test, two-sided 0.05, power 0.8: effect size 1 needs 10 pairs and 0.5
    # needs 34 (Cohen's tables; G*Power gives the same), whatever the sign of the gap.
    assert paper_paired.seeds_needed(1.0, 1.0) == "10"
    assert paper_paired.seeds_needed(2.0, -1.0) == "34"
    assert paper_paired.seeds_needed(0.0, 1.0) == "2"
    assert paper_paired.seeds_needed(10.0, 0.1) == "> 1000"
    # far out, scipy's noncentral t lower tail is nan: power ~1 at n = 3 (0.72 at n = 2,
    # by integration over the sample sd and by Monte Carlo); it gave 5 (ConvNet, FedAvg-Sub
    # minus FedAvg, whose three differences have sd 0.484)
    sd = float(np.std([-0.9556, -1.7432, -0.8606], ddof=1))  # 0.48448 (nan at n = 3, 4)
    assert paper_paired.seeds_needed(sd, 4.77) == "3"


def test_versus_plans_the_seeds_from_the_paired_spread() -> None:
    # differences -2 and +2 points: sd 2.83, a gap of 2.83 points is effect size 1
    table = pl.DataFrame({"variant": ["ref", "ref", "dfl", "dfl"], "seed": [0, 1, 0, 1],
                          "label": ["FedAvg", "FedAvg", "Δ-FL", "Δ-FL"],
                          "p90": [0.30, 0.30, 0.28, 0.32], "mean": [0.1] * 4})
    out = "\n".join(paper_paired.versus(table, "ref", ["ref", "dfl"], gap=200 ** 0.5 / 5))
    assert "seeds to find 2.82843 points |" in out
    assert out.rstrip().endswith("| 10 |")


def kept_tuning(name: str) -> dict[str, dict[float, tuple[float, bool]]]:
    """variant -> grid value -> (criterion, chosen), from the tuning.md ``tune`` wrote
    beside the kept runs of tuning ``name`` (one grid key, one seed)."""
    out: dict[str, dict[float, tuple[float, bool]]] = {}
    variant = ""
    for line in (ROOT / "docs" / "runs" / name / "tuning.md").read_text().splitlines():
        if line.startswith("## "):
            variant = line[3:]
        elif line.startswith("| ") and not line.startswith(("| l2 ", "| lr ")):
            value, criterion, _, mark = cells(line)
            out.setdefault(variant, {})[float(value)] = (float(criterion), mark == "chosen")
    return out


@pytest.mark.parametrize(("name", "page_name"), [("paper_tune_linear_l2", "tuning"),
                                                  ("paper_tune_linear_l2_batch32", "batch32")])
def test_the_l2_tuning_tables_in_reproduction_md_are_the_kept_runs(name: str,
                                                                    page_name: str) -> None:
    """Each row of the page's ℓ2 tables (held-out p90 in %, the choice in bold) is
    what ``tune`` wrote from the runs kept in docs/runs/<name>."""
    tuning = kept_tuning(name)
    page = [cells(line) for line in page_lines(page_name) if line.strip().startswith("| ")]
    for l2 in (1e-3, 1e-4, 1e-5, 1e-6, 1e-7, 1e-8):
        row = [f"{l2:.0e}"]
        for variant in ("fedavg", "deltafl_0_8", "deltafl_0_5", "deltafl_0_1"):
            criterion, chosen = tuning[variant][l2]
            row.append(f"**{100 * criterion:.2f}**" if chosen else f"{100 * criterion:.2f}")
        assert row in page, f"not in docs/reproduction/{page_name}.md: {row}"


@pytest.mark.parametrize(("name", "horizon", "page_name"),
                         [("paper_tune_linear_lr", 500, "tuning"),
                          ("paper_tune_linear_lr_full", 3000, "causes")])
def test_the_learning_rate_tuning_in_reproduction_md_is_the_kept_runs(name: str, horizon: int,
                                                                      page_name: str) -> None:
    tuning = kept_tuning(name)["all runs"]
    lines = page_lines(page_name)
    start = next(i for i, line in enumerate(lines) if line.startswith(
        f"| γ0 | α-weighted training loss at round {horizon} |"))
    rows = [cells(line) for line in lines[start + 2:start + 2 + len(tuning)]]
    for row, (lr, (criterion, chosen)) in zip(rows, tuning.items(), strict=True):
        assert float(row[0].split()[0].strip("*")) == lr
        assert float(row[1].strip("*")) == pytest.approx(criterion, abs=5e-4)
        assert ("(chosen)" in row[0]) == chosen


# The statistics of the reproduction table (simfl.study.intervals), each against a hand
# computation.
from simfl.study import intervals  # noqa: E402

T_975_2 = 4.302652729749462  # scipy.stats.t.ppf(0.975, 2), the textbook 4.303


def test_welch_interval_from_summary_statistics() -> None:
    # 10 ± 2 over 4 seeds against 8 ± 1 over 5: va = 4/4 = 1, vb = 1/5 = 0.2, se = √1.2;
    # Welch-Satterthwaite df = 1.2² / (1²/3 + 0.2²/4) = 4.194175; its t.ppf(0.975) is
    # 2.726479, so the half-width is 2.726479 √1.2 = 2.98671; Welch's p (scipy's
    # ttest_ind_from_stats(10, 2, 4, 8, 1, 5, equal_var=False)) is 0.138604.
    d = intervals.welch(10.0, 2.0, 4, 8.0, 1.0, 5)
    assert d.estimate == 2.0
    assert (d.low, d.high) == (pytest.approx(2 - 2.98671, abs=1e-5),
                               pytest.approx(2 + 2.98671, abs=1e-5))
    assert d.p == pytest.approx(0.138604, abs=1e-6)


def test_equivalence_verdicts_follow_the_registered_margins() -> None:
    diff = intervals.Difference
    verdict = intervals.equivalence
    assert verdict(diff(0.5, -0.2, 0.9, 0.1), 1.0) == "equivalent"
    assert verdict(diff(0.5, 0.2, 0.8, 0.01), 1.0) == "equivalent"  # inside the margin wins
    assert verdict(diff(2.0, 1.2, 2.8, 0.01), 1.0) == "different"
    assert verdict(diff(-2.0, -2.8, -1.2, 0.01), 1.0) == "different"
    assert verdict(diff(0.5, -0.8, 1.8, 0.4), 1.0) == "undetermined"
    assert verdict(diff(0.5, -0.8, 1.8, 0.4), 2.0) == "equivalent"  # the ConvNet's ± 2
    assert verdict(diff(0.0, -1.0, 0.5, 0.9), 1.0) == "undetermined"  # the edge is outside
    # FedAvg's linear cell: +2.60 [+1.18, +4.03] is different; the ConvNet's Δ-FL
    # θ = 0.5, 25.78 ± 4.95 over 3 seeds against 23.69 ± 0.94, undetermined
    assert verdict(intervals.welch(25.78, 4.95, 3, 23.69, 0.94, 5), 2.0) == "undetermined"


def test_holm_adjusts_step_down_in_the_given_order() -> None:
    # sorted: 0.005·4 = 0.02, 0.01·3 = 0.03, 0.03·2 = 0.06, 0.04·1 = 0.04 -> max so far 0.06
    assert intervals.holm([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert intervals.holm([0.6, 0.7]) == [1.0, 1.0]  # 1.2 capped at 1; never below an earlier
    got = intervals.holm([0.01, float("nan"), 0.04])  # nan is no test: m = 2
    assert got[0] == pytest.approx(0.02) and np.isnan(got[1]) and got[2] == pytest.approx(0.04)


def test_fieller_interval_of_a_paired_ratio() -> None:
    # a = b - 3 exactly, b = (5, 6, 7): a - ρb = (1 - ρ) b - 3 has mean 6x - 3 and sd |x|
    # (x = 1 - ρ), so the set is |6x - 3| ≤ c|x|, c = t/√3: x in [3/(6 + c), 3/(6 - c)].
    c = T_975_2 / np.sqrt(3)
    ratio = intervals.fieller(np.array([2.0, 3.0, 4.0]), np.array([5.0, 6.0, 7.0]))
    assert ratio.estimate == 0.5 and not ratio.outside
    assert ratio.low == pytest.approx(1 - 3 / (6 - c))  # 0.14673
    assert ratio.high == pytest.approx(1 - 3 / (6 + c))  # 0.64640
    assert str(ratio) == "0.50 [0.15, 0.65]"


def test_fieller_is_unbounded_where_the_denominator_is_not_resolved() -> None:
    # a = b + 2, b = (-0.9, 0.1, 1.1) (mean 0.1, sd 1): a - ρb = x b + 2 has mean 2 + 0.1x
    # and sd |x|; |2 + 0.1x| ≤ c|x| holds for x ≥ 2/(c - 0.1) and x ≤ -2/(c + 0.1):
    # ρ ≤ 1 - 2/(c - 0.1) or ρ ≥ 1 + 2/(c + 0.1), two rays
    c = T_975_2 / np.sqrt(3)
    b = np.array([-0.9, 0.1, 1.1])
    ratio = intervals.fieller(b + 2, b)
    assert ratio.outside
    assert ratio.estimate == pytest.approx(21.0)
    assert ratio.low == pytest.approx(1 - 2 / (c - 0.1))  # 0.16112
    assert ratio.high == pytest.approx(1 + 2 / (c + 0.1))  # 1.77396
    assert str(ratio) == "21.00 (-∞, 0.16] ∪ [1.77, +∞)"
    # a and b both centred on 0, negatively correlated: a - ρb has mean 0 for every ρ,
    # which no test rejects: every real number
    whole = intervals.fieller(np.array([-1.0, 0.0, 1.0]), np.array([0.0, 1.0, -1.0]))
    assert (whole.low, whole.high, whole.outside) == (-np.inf, np.inf, False)
    assert str(whole).endswith("(-∞, +∞)")


def test_weighted_p90_is_the_lower_weighted_quantile() -> None:
    errors = np.array([0.1, 0.2, 0.3, 0.4, 0.5])
    # cumulative weights 1/10 ... 4/10, then 1: 0.9 is first reached at 0.5
    assert intervals.weighted_p90(errors, np.array([1, 1, 1, 1, 6])) == 0.5
    # 10/14, 11/14, 12/14 = 0.857, 13/14 = 0.929: reached at 0.4
    assert intervals.weighted_p90(errors, np.array([10, 1, 1, 1, 1])) == 0.4
    # 5/9 ... 8/9 = 0.889 < 0.9: reached at 0.5
    assert intervals.weighted_p90(errors, np.array([5, 1, 1, 1, 1])) == 0.5
    # equal weights: the 9th of 1..10 (np.quantile's linear interpolation gives 9.1)
    assert intervals.weighted_p90(np.arange(1.0, 11.0), np.ones(10)) == 9.0


def small_table() -> pl.DataFrame:
    """FedAvg, FedAvg-Sub and Δ-FL θ = 0.5 at three seeds, errors in fractions."""
    p90 = {"fedavg": [0.50, 0.52, 0.54], "fedavg_sub": [0.49, 0.50, 0.53],
           "deltafl_0_5": [0.48, 0.49, 0.52]}
    return pl.DataFrame([
        {"variant": v, "seed": s, "label": v, "p90": p90[v][s], "mean": 0.3 + 0.01 * s,
         "wp90": p90[v][s] - 0.02, "wmean": 0.29 + 0.01 * s, "wall_s": 60.0, "device": "cpu"}
        for v in p90 for s in range(3)])


def test_versus_marks_the_primary_row_and_holm_adjusts_the_others() -> None:
    order = ["fedavg", "fedavg_sub", "deltafl_0_5"]
    out = "\n".join(paper_paired.versus(small_table(), "fedavg", order))
    # Δ-FL − FedAvg: -2, -3, -2 points: mean -2.33, se 0.577/√3 = 1/3, t = 7 on 2 df,
    # p = 0.0198, half-width 4.3027/3 = 1.434 (primary); FedAvg-Sub − FedAvg: -1, -2, -1:
    # t = 4, p = 0.0572, alone in its family (the primary row stays out, else 0.114),
    # so Holm leaves it
    assert "| deltafl_0_5 | 0, 1, 2 | -2.33 [-3.77, -0.90] | 0.02 (primary) |" in out
    assert "| fedavg_sub | 0, 1, 2 | -1.33 [-2.77, +0.10] | 0.057 (0.057) |" in out
    out = "\n".join(paper_paired.versus(small_table(), "fedavg_sub", order, weighted=True))
    # minus FedAvg-Sub: FedAvg +1.33 (p 0.0572); Δ-FL -1, -1, -1 (sd 0: p = 0, primary);
    # the weighted rows (the same differences) are a family of two, Δ-FL's not primary:
    # 2 · 0 = 0, then max(0, 1 · 0.0572)
    assert "| deltafl_0_5 | 0, 1, 2 | -1.00 [-1.00, -1.00] | 0 (primary) |" in out
    assert "| fedavg | 0, 1, 2 | +1.33 [-0.10, +2.77] | 0.057 (0.057) |" in out
    assert "| deltafl_0_5, sample-weighted | 0, 1, 2 | -1.00 [-1.00, -1.00] | 0 (0) |" in out
    assert "| fedavg, sample-weighted | 0, 1, 2 | +1.33 [-0.10, +2.77] | 0.057 (0.057) |" in out


def test_ratio_prints_the_fieller_set() -> None:
    out = "\n".join(paper_paired.ratio(small_table(), "fedavg_sub", "deltafl_0_5", "fedavg"))
    # (FedAvg-Sub − FedAvg) / (Δ-FL − FedAvg): (-1, -2, -1) over (-2, -3, -2)
    want = intervals.fieller(np.array([-1.0, -2.0, -1.0]), np.array([-2.0, -3.0, -2.0]))
    assert f"| p90 | -1.33 | -2.33 | {want} |" in out
    assert str(want).startswith("0.57 ")


def test_the_c1_rule_reads_the_shift_interval_as_registered() -> None:
    diff, rule = intervals.Difference, paper_cells.c1_verdict
    assert rule(diff(-2.2, -2.6, -1.9, 0.001), equivalent=False) == "supported"
    assert rule(diff(-2.2, -2.6, -1.9, 0.001), equivalent=True) == "sufficient"
    assert rule(diff(0.2, -1.1, 1.5, 0.7), equivalent=False) == "not supported"
    assert rule(diff(-0.5, -1.6, 0.6, 0.3), equivalent=False) == "undetermined"  # holds -1.3
    assert rule(diff(1.0, 0.5, 1.5, 0.01), equivalent=False) == "undetermined"  # above 0


def test_the_paper_table_gives_interval_verdict_and_holm() -> None:
    table = small_table().with_columns(variant=pl.lit("fedavg"), label=pl.lit("FedAvg"),
                                       seed=pl.int_range(9))
    out = "\n".join(paper_cells.reproduction_table(table, ["fedavg"], "linear", weighted=True))
    p90 = 100 * table["p90"].to_numpy()
    d = intervals.welch(p90.mean(), p90.std(ddof=1), 9, 49.66, 0.67, 5)
    row = next(line for line in out.splitlines() if line.startswith("| FedAvg | 9 |"))
    # +1.12 [-0.53, +2.77]: neither inside ± 1 nor clear of 0
    assert f"| {d.estimate:+.2f} [{d.low:+.2f}, {d.high:+.2f}] | undetermined | {d.p:.2g} (" in row
    assert "| FedAvg, sample-weighted | 9 |" in out


# The registered causes' shift rows in docs/reproduction/causes.md: (the row's first cell, the
# tested sweep, the seeds of that look).
CAUSE_ROWS = [
    ("**shift, paired by seed (> 100 minus ≥ 100), seeds 0–4**", "linear_pool101", None),
    ("the same at the first look, seeds 0–2", "linear_pool101", [0, 1, 2]),
    ("C4: main source, > 100 samples, minus the protocol", "linear_pool_source", [0, 1, 2]),
    ("C5: γ0 = 0.3 minus γ0 = 1.0", "linear_lr_chosen", [0, 1, 2]),
    ("C4: main source, > 100 samples, minus the protocol, seeds 0–4", "linear_pool_source", None),
    ("C5: γ0 = 0.3 minus γ0 = 1.0, seeds 0–4", "linear_lr_chosen", None),
]


def test_the_one_screen_causes_table_repeats_the_tested_rows() -> None:
    """The one-screen table of the causes gives FedAvg's shift of each second look as
    the detailed rows do (which the test below ties to the kept runs)."""
    page = [cells(line) for line in page_lines("answer", "causes") if line.startswith("| ")]

    def row(first: str) -> list[str]:
        return next(c for c in page if c[0] == first)

    for summary, detail in (("C3 writers with > 100 samples", CAUSE_ROWS[0][0]),
                            ("C4 main source copy only (and > 100)", CAUSE_ROWS[4][0]),
                            ("C5 γ0 = 0.3 (tuned over 3000 rounds)", CAUSE_ROWS[5][0])):
        assert row(summary)[1] == row(detail)[1].strip("*"), summary


@pytest.mark.slow
def test_the_fedavg_sub_l2_check_in_reproduction_md_is_the_kept_runs() -> None:
    """The ten-seed check against FedAvg-Sub at ℓ2 1e-5 on the page holds what
    simfl.study.paper_table prints from the kept runs, unweighted and sample-weighted."""
    out = subprocess.run(
        [*COMMAND,
         "scenarios/paper/linear_ten_seeds_sub_l2.sweep.toml", "--results", "docs/runs",
         "--versus", "fedavg_sub_l2_1e5", "--weighted", "--ratio", "fedavg_sub_l2_1e5",
         "deltafl_0_5", "fedavg"],
        cwd=ROOT, check=True, capture_output=True, text=True).stdout
    paired, ratios = out.split("Each rule minus fedavg_sub_l2_1e5")[1].split("ratio [Fieller")
    diffs = {c[0]: c[2].replace("-", "−") for c in map(cells, paired.splitlines()) if len(c) > 2}
    fieller = {c[0]: c[3].replace("-", "−") for c in map(cells, ratios.splitlines())
               if len(c) > 3}
    lines = page_lines("random_half", "answer")
    start = lines.index("| 10 paired seeds (test p90, points; 95 % intervals) | unweighted "
                        "| sample-weighted |")
    page = {c[0].strip("*"): c[1:] for c in map(cells, lines[start + 2:start + 7])}
    sub4 = "FedAvg-Sub (a random 0.5 of the cohort), model.l2 = 0.0001"
    for label, rule in (("Δ-FL θ = 0.5 − FedAvg-Sub (ℓ2 1e-5)", "Δ-FL θ = 0.5"),
                        ("FedAvg − FedAvg-Sub (ℓ2 1e-5)", "FedAvg"),
                        ("FedAvg-Sub at 1e-4 − at 1e-5", sub4)):
        for column, suffix in enumerate(("", ", sample-weighted")):
            assert page[label][column].strip("*").startswith(diffs[rule + suffix]), label
    ratio = "(FedAvg-Sub − FedAvg) / (Δ-FL − FedAvg), Fieller"
    assert page[ratio] == [fieller["p90"], fieller["p90, sample-weighted"]]
    one_screen = next(cells(line) for line in lines if line.startswith(
        "| Linear, FedAvg-Sub at ℓ2 1e-5 (the tie's other side):"))
    assert one_screen[1:3] == ["10", diffs["Δ-FL θ = 0.5"]]


@pytest.mark.parametrize(("row", "sweep", "seeds"), CAUSE_ROWS)
@pytest.mark.slow
def test_the_causes_shifts_in_reproduction_md_are_the_kept_runs(row: str, sweep: str,
                                                                 seeds: list[int] | None) -> None:
    """Each cause's shift on the page (FedAvg's and Δ-FL θ = 0.5's test p90 at the tested
    level minus the protocol's, paired by seed) is what simfl.study.paper_table prints from
    the kept runs, at the seeds of that look (``--seeds``)."""
    lines = page_lines("causes")
    page = next(cells(line) for line in lines if line.startswith(f"| {row} |"))
    for column, (versus, rule) in enumerate((("fedavg", "FedAvg"),
                                             ("deltafl_0_5", "Δ-FL θ = 0.5")), start=1):
        out = subprocess.run(
            [*COMMAND,
             "scenarios/paper/linear_history.sweep.toml", "--also",
             f"scenarios/paper/{sweep}.sweep.toml", "--results", "docs/runs", "--versus",
             versus, *(["--seeds", *map(str, seeds)] if seeds else [])],
            cwd=ROOT, check=True, capture_output=True, text=True).stdout
        paired = out.split(f"Each rule minus {versus}")[1]
        shift = next(c for c in map(cells, paired.splitlines())
                     if len(c) > 2 and c[0].startswith(rule))
        assert shift[1] == ", ".join(map(str, seeds or range(5))), shift
        assert page[column].strip("*") == shift[2].replace("-", "−"), (row, shift)


@pytest.mark.slow
def test_the_ten_seed_answer_in_reproduction_md_is_the_kept_runs() -> None:
    """The ten-seed table of docs/reproduction/random_half.md (the filter against a random
    half) holds what simfl.study.paper_table prints from the kept runs: each rule's tail,
    simfl − paper, the paired differences unweighted and sample-weighted, and the Fieller
    ratio."""
    out = subprocess.run(
        [*COMMAND,
         "scenarios/paper/linear_ten_seeds.sweep.toml", "--results", "docs/runs", "--versus",
         "fedavg_sub", "--weighted", "--ratio", "fedavg_sub", "deltafl_0_5", "fedavg"],
        cwd=ROOT, check=True, capture_output=True, text=True).stdout

    def figure(text: str) -> str:
        return text.replace("-", "−")

    def rows(text: str) -> dict[str, list[str]]:
        return {c[0]: c for c in map(cells, text.splitlines()) if len(c) > 2}

    main, rest = out.split("Sample-weighted minus unweighted")
    paired, ratios = rest.split("Each rule minus fedavg_sub")[1].split("ratio [Fieller")
    main_rows, paired_rows, ratio_rows = rows(main), rows(paired), rows(ratios)
    lines = page_lines("random_half")
    start = lines.index("| quantity (test error, points; 95 % intervals over 10 paired seeds) "
                        "| unweighted | sample-weighted |")
    page = {c[0]: c[1:] for c in map(cells, lines[start + 2:start + 14])}
    for label, rule in (("FedAvg p90, mean ± sd", "FedAvg"),
                        ("FedAvg-Sub (ℓ2 1e-4) p90", "FedAvg-Sub (a random 0.5 of the cohort)"),
                        ("Δ-FL θ = 0.5 p90", "Δ-FL θ = 0.5")):
        assert page[label] == [main_rows[rule][2], main_rows[f"{rule}, sample-weighted"][2]]
    for label, rule in (("simfl − paper, FedAvg p90 (Welch)", "FedAvg"),
                        ("simfl − paper, Δ-FL θ = 0.5 p90 (Welch)", "Δ-FL θ = 0.5")):
        for cell, row in zip(page[label], (rule, f"{rule}, sample-weighted"), strict=True):
            assert cell == f"{figure(main_rows[row][4])} *{main_rows[row][5]}*"
    primary = page["**Δ-FL θ = 0.5 − FedAvg-Sub, p90 (primary)**"]
    assert primary[0].startswith(f"**{figure(paired_rows['Δ-FL θ = 0.5'][2])}**")
    assert primary[1] == figure(paired_rows["Δ-FL θ = 0.5, sample-weighted"][2])
    assert page["FedAvg − FedAvg-Sub, p90"] == [
        figure(paired_rows["FedAvg"][2]), figure(paired_rows["FedAvg, sample-weighted"][2])]
    assert page["Δ-FL θ = 0.5 − FedAvg-Sub, mean"] == [
        figure(paired_rows["Δ-FL θ = 0.5"][4]),
        figure(paired_rows["Δ-FL θ = 0.5, sample-weighted"][4])]
    assert page["(FedAvg-Sub − FedAvg) / (Δ-FL − FedAvg), p90, Fieller"][0] == figure(
        ratio_rows["p90"][3])

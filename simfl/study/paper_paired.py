"""simfl's own comparisons of a paper sweep's rules (``python -m simfl.study.paper_table``
with ``--versus``, ``--ratio``, ``--window``, ``--by-size``): differences paired by seed (a
seed fixes the writers kept, the held-out half and the initial model, so the rules of one
seed share them) with t-intervals and Holm's adjustment, Fieller's ratio of two paired
differences, the seeds a paired test would need, the test error averaged over the last
evaluations of each run, and the error of small and large devices.

Every table function takes the per-run table of :func:`simfl.study.paper_table.read_runs`
(errors as fractions; the tables print percentage points) and returns its markdown lines;
InputError where a variant it names has no complete run.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import polars as pl

from simfl.errors import InputError
from simfl.study.intervals import fieller, holm, paired, seeds_for
from simfl.study.paper_cells import UNWEIGHTED, interval_text, pm, statistics
from simfl.tables import error_by_round

# The registered primary comparisons: Δ-FL θ = 0.5 minus each of these, in the 90th
# percentile, within the first sweep given (no other test on a table is primary).
PRIMARY = ("deltafl_0_5", ("fedavg", "fedavg_sub"))


def versus(table: pl.DataFrame, reference: str, order: list[str], of: str = "",
           gap: float | None = None, weighted: bool = False) -> list[str]:
    """Each variant minus ``reference``, paired by seed: mean [95% t-interval], the paired
    t-test's p and its Holm adjustment over the table's rows of that column, except the
    registered primary rows (PRIMARY; only for the final evaluation, ``of`` empty), which
    are marked and not adjusted (``of`` names the figures compared when they are not the
    final evaluation's); with ``weighted`` a sample-weighted row below each; with ``gap``,
    the seeds a paired test needs to find a p90 difference of ``gap`` points."""
    columns = ["seed"] + [c for statistic in statistics(weighted) for c in statistic[1:]]
    ref = table.filter(pl.col("variant") == reference).select(columns)
    if ref.height == 0:
        raise InputError(f"--versus {reference}: no complete run of that variant")
    rows = []  # (label, seeds, statistic, [p90 differences, mean differences], primary)
    for variant in order:
        if variant == reference:
            continue
        both = table.filter(pl.col("variant") == variant).join(ref, on="seed", suffix="_ref")
        if both.height == 0:
            continue
        seeds = ", ".join(map(str, sorted(both["seed"])))
        for statistic in statistics(weighted):
            diffs = [100 * (both[m] - both[f"{m}_ref"]).to_numpy() for m in statistic[1:]]
            primary = (not of and statistic == UNWEIGHTED and variant == PRIMARY[0]
                       and reference in PRIMARY[1])
            rows.append((both["label"][0] + statistic[0], seeds, statistic, diffs, primary))
    adjusted = _holm_by_column(rows)
    plan = f" seeds to find {gap:g} points |" if gap else ""
    lines = [f"\nEach rule minus {reference}{of}, paired by seed (percentage points; 95% "
             f"t-interval over the seeds both have; p: paired t-test, Holm-adjusted over the "
             "column's rows in brackets; primary: a registered primary comparison, "
             "not adjusted)\n",
             f"| rule | seeds | p90 difference | p (Holm) | mean difference | p (Holm) |{plan}",
             "|---|---|---|---|---|---|" + ("---|" if gap else "")]
    for i, (label, seeds, _, diffs, primary) in enumerate(rows):
        need = ""
        if gap:
            need = f" {seeds_needed(diffs[0].std(ddof=1), gap)} |" if len(diffs[0]) > 1 else " — |"
        text = [_paired(d, adjusted[(i, k)], primary and k == 0) for k, d in enumerate(diffs)]
        lines.append(f"| {label} | {seeds} | {text[0]} | {text[1]} |{need}")
    return lines


def _holm_by_column(rows: list) -> dict[tuple[int, int], float]:
    """(row, metric) -> Holm-adjusted paired p, each statistic's metric a family of the
    rows that are not primary (a primary row's p90 stays out: nan here)."""
    out: dict[tuple[int, int], float] = {}
    for statistic in {row[2] for row in rows}:
        for k in (0, 1):
            family = [i for i, row in enumerate(rows) if row[2] == statistic
                      and not (row[4] and k == 0) and len(row[3][k]) > 1]
            ps = holm([paired(rows[i][3][k]).p for i in family])
            out.update(zip([(i, k) for i in family], ps, strict=True))
    return {(i, k): out.get((i, k), math.nan) for i in range(len(rows)) for k in (0, 1)}


def ratio(table: pl.DataFrame, a: str, b: str, c: str, weighted: bool = False) -> list[str]:
    """(a - c) / (b - c) of the paired mean differences over the seeds all three have,
    with Fieller's 95 % confidence set (:func:`simfl.study.intervals.fieller`: unbounded
    where b - c is not resolved from 0)."""
    metrics = [m for statistic in statistics(weighted) for m in statistic[1:]]
    runs = {v: table.filter(pl.col("variant") == v).select("seed", *metrics) for v in (a, b, c)}
    for v, part in runs.items():
        if part.height == 0:
            raise InputError(f"--ratio: no complete run of {v}")
    both = runs[a].join(runs[b], on="seed", suffix="_b").join(runs[c], on="seed", suffix="_c")
    if both.height < 2:
        raise InputError("--ratio: needs at least two seeds with all three variants")
    lines = [f"\n({a} − {c}) / ({b} − {c}), paired by seed over seeds "
             f"{', '.join(map(str, sorted(both['seed'])))}: the ratio of the mean differences "
             "with Fieller's 95 % confidence set\n",
             "| statistic | numerator | denominator | ratio [Fieller 95 %] |", "|---|---|---|---|"]
    for statistic in statistics(weighted):
        for metric, name in zip(statistic[1:], ("p90", "mean"), strict=True):
            top = 100 * (both[metric] - both[f"{metric}_c"]).to_numpy()
            bottom = 100 * (both[f"{metric}_b"] - both[f"{metric}_c"]).to_numpy()
            lines.append(f"| {name}{statistic[0]} | {top.mean():+.2f} | {bottom.mean():+.2f} | "
                         f"{fieller(top, bottom)} |")
    return lines


def seeds_needed(sd: float, gap: float, most: int = 1000) -> str:
    """The fewest paired seeds at which a two-sided paired t-test at 0.05 on differences
    of standard deviation ``sd`` finds a true mean difference ``gap`` with probability 0.8
    (:func:`simfl.study.intervals.seeds_for`); '> most' beyond ``most``."""
    n = seeds_for(abs(gap), sd, most=most)
    return str(n) if n <= most else f"> {most}"


def evaluations(run_dir: Path, evals: pl.DataFrame) -> pl.DataFrame | None:
    """A run's test mean and p90 at every evaluation round (its ``eval_rounds.parquet``,
    or from ``evals``, its ``eval.parquet``, where that is whole); None where only the
    final round is kept."""
    kept = run_dir / "eval_rounds.parquet"
    rounds = pl.read_parquet(kept) if kept.is_file() else error_by_round(evals)
    test = rounds.filter(pl.col("split") == "test")
    return test if test.height > 1 else None


def in_window(rounds: int) -> pl.Expr:
    """The rows of each run's (variant, seed) last ``rounds`` rounds."""
    return pl.col("round") > pl.col("round").max().over("variant", "seed") - rounds


def window(trajectories: pl.DataFrame, rounds: int, order: list[str], labels: dict[str, str],
           reference: str | None, gap: float | None = None) -> list[str]:
    """Per variant, over its runs with evaluation rounds: the final test p90, the p90 and
    mean averaged over the evaluations after round (last - ``rounds``) (mean ± std over
    seeds), and the within-run standard deviation of p90 over those evaluations (its range
    over the runs); with ``reference``, the paired differences of the averages."""
    per_run = trajectories.filter(in_window(rounds)).group_by("variant", "seed").agg(
        final=pl.col("p90").sort_by("round").last(), p90=pl.col("p90").mean(),
        mean=pl.col("mean").mean(), within=pl.col("p90").std(), evaluations=pl.len())
    lines = [f"\nTest error (%) averaged over the evaluations of each run's last {rounds} "
             "rounds (simfl's addition: the papers report the final model), mean ± std over "
             "seeds\n",
             "| rule | seeds | evaluations a run | final p90 | p90, averaged | within-run sd of "
             "p90 | mean, averaged |", "|---|---|---|---|---|---|---|"]
    for variant in order:
        part = per_run.filter(pl.col("variant") == variant).sort("seed")
        if part.height == 0:
            continue
        within = 100 * part["within"].to_numpy()
        spread = (f"{within[0]:.2f}" if len(within) == 1
                  else f"{within.min():.2f}–{within.max():.2f}")
        counts = part["evaluations"].to_list()
        low, high = min(counts), max(counts)
        lines.append(f"| {labels[variant]} | {', '.join(map(str, part['seed']))} | "
                     f"{low if low == high else f'{low}–{high}'} | "
                     f"{pm(100 * part['final'].to_numpy())} | "
                     f"{pm(100 * part['p90'].to_numpy())} | {spread} | "
                     f"{pm(100 * part['mean'].to_numpy())} |")
    if reference:
        lines += versus(per_run.with_columns(pl.col("variant").replace_strict(labels)
                                             .alias("label")),
                        reference, order, of=f" (averaged over the last {rounds} rounds)",
                        gap=gap)
    return lines


def by_size(errors: pl.DataFrame, n: int, order: list[str], labels: dict[str, str]) -> list[str]:
    """Each variant's mean test error over its devices with fewer than ``n`` samples and
    over the others: mean ± std over seeds of each seed's mean, with the devices' count
    (its range over the seeds, which draw different writers)."""
    large = (pl.col("num_samples") >= n).alias("large")
    per_seed = errors.group_by("variant", "seed", large).agg(
        error=100 * pl.col("error").mean(), devices=pl.len())
    lines = [f"\nMean test error (%) of the test devices with < {n} and ≥ {n} samples "
             "(mean ± std over seeds)\n",
             f"| rule | seeds | < {n}: devices | mean error | ≥ {n}: devices | mean error |",
             "|---|---|---|---|---|---|"]
    for variant in order:
        part = per_seed.filter(pl.col("variant") == variant)
        if part.height == 0:
            continue
        cells = []
        for is_large in (False, True):
            side = part.filter(pl.col("large") == is_large)
            if side.height == 0:
                cells.append("0 | —")
                continue
            counts = side["devices"].to_list()
            low, high = min(counts), max(counts)
            count = f"{low}" if low == high else f"{low}–{high}"
            cells.append(f"{count} | {pm(side['error'].to_numpy())}")
        lines.append(f"| {labels[variant]} | {part['seed'].n_unique()} | {' | '.join(cells)} |")
    return lines


def by_size_over_window(errors: pl.DataFrame, n: int, rounds: int, order: list[str],
                        labels: dict[str, str]) -> list[str]:
    """Per run: the mean test error of its devices with fewer than ``n`` samples and of the
    others at each evaluation of its last ``rounds`` rounds, as mean ± std over those
    evaluations, and the number of evaluations where the smaller devices' is higher."""
    large = (pl.col("num_samples") >= n).alias("large")
    per_round = errors.group_by("variant", "seed", "round", large).agg(
        error=100 * pl.col("error").mean()).pivot("large", index=["variant", "seed", "round"],
                                                  values="error")
    lines = [f"\nMean test error (%) of the test devices with < {n} and ≥ {n} samples at each "
             f"evaluation of the last {rounds} rounds (mean ± std over those evaluations; runs "
             "with every evaluation at hand)\n",
             f"| rule | seed | evaluations | < {n}: mean error | ≥ {n}: mean error | "
             f"evaluations with < {n} worse |", "|---|---|---|---|---|---|"]
    for variant in order:
        for seed in sorted(set(per_round.filter(pl.col("variant") == variant)["seed"])):
            run = per_round.filter((pl.col("variant") == variant) & (pl.col("seed") == seed))
            small, big = run["false"].to_numpy(), run["true"].to_numpy()
            lines.append(f"| {labels[variant]} | {seed} | {run.height} | {pm(small)} | "
                         f"{pm(big)} | {int((small > big).sum())} |")
    return lines


def _paired(diff: np.ndarray, holm_p: float = math.nan, primary: bool = False) -> str:
    """'mean [low, high] | p (Holm p)' of paired differences ('p (primary)' for a primary
    comparison); the value alone for one seed."""
    if len(diff) < 2:
        return f"{diff[0]:+.2f} | —"
    d = paired(diff)
    adjusted = "primary" if primary else f"{holm_p:.2g}"
    return f"{interval_text(d)} | {d.p:.2g} ({adjusted})"

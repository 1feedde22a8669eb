"""The reproduction table of a paper sweep, cell by cell against the Δ-FL papers.

    python bench/paper_table.py scenarios/paper/linear.sweep.toml [--errors OUT.parquet]
        [--ecdf OUT.png] [--scatter OUT.png] [--plot-variants V ...] [--versus fedavg]
        [--also OTHER.sweep.toml] [--by-size N] [--window R] [--trajectory OUT.png]
        [--seeds-for GAP] [--weighted] [--ratio A B C] [--seeds S ...] [--results DIR ...]

Reads every complete run of the sweep (its manifest and final evaluation), from
``results/`` or else from the copies ``bench/archive_runs.py`` keeps in
``docs/runs/``, and prints one markdown row per variant: simfl's mean ± std over the
seeds present (n) of the unseen test devices' 90th-percentile and mean error, the
papers' mean ± std over their 5 seeds, and simfl − paper: the difference of the
means with Welch's 95 % interval (from the summary statistics, Welch-Satterthwaite
degrees of freedom), the verdict docs/reproduction.md registered against a margin
of ± 1 point (linear) or ± 2 points (ConvNet), *equivalent* when the interval lies
inside the margin (both one-sided tests against the margin reject at 0.025),
*different* when it excludes 0, else *undetermined*, and Welch's p with its Holm
adjustment over the table's rows (one seed: the difference alone). Also the wall
time per run.

``--weighted`` adds below every row its sample-weighted row: each test device
weighted by its sample count, the weighted mean (what the authors' code reports as
the mean) and the weighted 90th percentile, the lower weighted quantile
min{u : Σ_{k: e_k ≤ u} n_k / Σ n ≥ 0.9} (simfl's ``weighted_quantile``, the long
paper's Property 7; the unweighted 90th percentile interpolates linearly); and a
table of weighted minus unweighted on the same runs, with the registered verdict
of cause C1 for the linear model. Every table then has both.

The papers' values: Pillutla, Laguel, Malick, Harchaoui, "Tackling Distribution
Shifts in Federated Learning with Superquantile Aggregation" (NeurIPS 2022
workshop), Tables 1-2 (every rule but FedAvg-Sub; the long paper's Tables 2-3
repeat the FedAvg and Δ-FL cells), and the CISS 2021 paper's Table I for
FedAvg-Sub (ConvNet only). ``../shared/papers/`` has both.

``--versus V`` adds simfl's own comparison of every variant with variant V: the
difference in 90th-percentile and mean test error paired by seed (a seed fixes
the writers kept, the held-out half and the initial model, so the rules of one
seed share them), its mean with a 95% t-interval, and the paired t-test's p with its
Holm adjustment over the column's rows, except the registered primary comparisons
(the first sweep's Δ-FL θ = 0.5 minus its FedAvg or FedAvg-Sub, in the unweighted
90th percentile), marked *primary* and not adjusted.
``--ratio A B C`` (repeatable) gives (A − C) / (B − C), the ratio of the paired mean
differences over the seeds all three have, with Fieller's 95 % confidence set: the
ratios ρ at which a paired t-test of (A − C) − ρ (B − C) does not reject, an interval
when B − C is resolved from 0 and otherwise two rays or the whole line, printed as such.
With ``--seeds-for GAP`` it adds how many paired seeds a two-sided paired t-test at
0.05 would need to find a true difference of GAP points in the 90th percentile with
probability 0.8, were the paired differences' standard deviation the one these seeds
show: a planning figure, as uncertain as a standard deviation from two or three seeds.
``--seeds S ...`` keeps only those seeds' runs: a registered first look at
seeds 0–2 recomputes after its second look's runs have joined the sweep.

``--also`` adds the runs of another sweep of the same model (e.g. the baselines); a
variant whose name an earlier sweep already has is called ``<its sweep's name>/<variant>``
(``--versus paper_linear_batch32/fedavg``), so two protocols' runs are never pooled.

The papers' AFL row is q-FFL with q = 10 ("We use q-FFL with q = 10 in place of
AFL", workshop paper, Baselines): simfl's ``qffl_10`` variant is set beside it, and
simfl's own AFL (``afl``, Mohri et al.'s projected ascent on λ) too.

``--window R`` is simfl's addition, not the papers' protocol (they report the final
model): the 90th percentile of one evaluation moves from one evaluation to the next,
so for every run with its evaluation rounds kept (``eval_rounds.parquet``, or a whole
``eval.parquet`` in ``results/``) it averages the test p90 and mean over the
evaluations of the last R rounds, gives their within-run standard deviation beside
the final one, and (with ``--versus``) the paired differences of those averages;
with ``--by-size N`` too, for every run whose whole ``eval.parquet`` is at hand
(``results/``; ``docs/runs`` keeps the final round only), the mean test error of the
devices below and above N samples over those evaluations, and in how many of them
the smaller devices fare worse.
``--trajectory`` draws every such run's test p90 against the round (over the window's
rounds with ``--window``).

``--errors`` writes the final per-device test errors of every run; ``--ecdf``
draws their ECDF and ``--scatter`` the error against local data size, one
colour per variant (its lowest seed). ``--by-size N`` splits the unseen test
devices at N samples and gives each part's mean error per variant (mean ± std over
seeds): the long paper's Figure 14 in two numbers, who gains and who loses.
"""

from __future__ import annotations

import argparse
import json
import math
from collections import Counter
from pathlib import Path

import numpy as np
import polars as pl
from scipy import stats

from simfl.plots import save_figure
from simfl.plots.runs import plot_error_ecdf, plot_error_vs_size_by_rule, plot_p90_by_round
from simfl.runs.sweep import Sweep, SweepRun, is_complete, load_sweep
from simfl.scenario import Scenario, flatten, load_scenario, to_dict
from simfl.study.intervals import (
    Difference,
    equivalence,
    fieller,
    holm,
    paired,
    weighted_p90,
    welch,
)
from simfl.tables import error_by_round

PAPER_SEEDS = 5
# (model, variant) -> ((p90 mean, std), (mean mean, std)), test error in %.
PAPER: dict[tuple[str, str], tuple[tuple[float, float], tuple[float, float]]] = {
    ("linear", "fedavg"): ((49.66, 0.67), (34.38, 0.38)),
    ("linear", "fedprox"): ((49.15, 0.74), (33.82, 0.30)),
    ("linear", "qffl"): ((49.90, 0.58), (34.34, 0.33)),
    ("linear", "term"): ((48.59, 0.62), (34.02, 0.30)),
    ("linear", "afl"): ((51.62, 0.28), (39.33, 0.27)),
    ("linear", "qffl_10"): ((51.62, 0.28), (39.33, 0.27)),  # the papers' "AFL" row
    ("linear", "deltafl_0_8"): ((49.10, 0.24), (34.49, 0.26)),
    ("linear", "deltafl_0_5"): ((48.44, 0.38), (35.02, 0.20)),
    ("linear", "deltafl_0_1"): ((50.34, 0.95), (38.33, 0.48)),
    ("convnet", "fedavg"): ((28.46, 1.07), (16.64, 0.50)),
    ("convnet", "fedavg_sub"): ((27.57, 0.81), (16.23, 0.23)),
    ("convnet", "fedprox"): ((27.01, 1.86), (16.02, 0.54)),
    ("convnet", "qffl"): ((28.02, 0.80), (16.59, 0.30)),
    ("convnet", "term"): ((25.46, 1.49), (15.68, 0.38)),
    ("convnet", "afl"): ((45.08, 1.00), (33.01, 0.37)),
    ("convnet", "qffl_10"): ((45.08, 1.00), (33.01, 0.37)),
    ("convnet", "deltafl_0_8"): ((26.23, 1.15), (16.09, 0.40)),
    ("convnet", "deltafl_0_5"): ((23.69, 0.94), (15.49, 0.30)),
    ("convnet", "deltafl_0_1"): ((25.46, 2.77), (16.37, 1.03)),
}
# Variants that change one setting of a rule, set beside that rule's paper cell
# (linear_authors_code.sweep.toml: FedAvg with one choice of the authors' code).
SAME_CELL = {"fedavg_authors_pixels": "fedavg", "fedavg_batch_32": "fedavg",
             "fedavg_authors_model": "fedavg"}
PAPER_BATCH = {"linear": 10, "convnet": 16}  # App. C.2.2's mini-batch sizes
# The equivalence margins docs/reproduction.md registered (points of test error): below
# the paper's own seed-to-seed spread and the rule differences it reports.
MARGIN = {"linear": 1.0, "convnet": 2.0}
# The registered primary comparisons: Δ-FL θ = 0.5 minus each of these, in the 90th
# percentile, within the first sweep given (no other test on a table is primary).
PRIMARY = ("deltafl_0_5", ("fedavg", "fedavg_sub"))
# Cause C1's "not supported" bound: half of FedAvg's 2.60-point linear gap (registered).
HALF_GAP = 1.3
# The statistics of a run: (label suffix, 90th percentile column, mean column).
UNWEIGHTED = ("", "p90", "mean")
WEIGHTED = (", sample-weighted", "wp90", "wmean")


def rule_label(scenario: dict) -> str:
    """The table's name of a run's rule, with its knob, from the manifest's scenario."""
    aggregator = scenario["aggregator"]
    name = aggregator["name"]
    knob = {"fedavg": "FedAvg", "deltafl": "Δ-FL θ = {theta:g}",
            "fedavg_sub": "FedAvg-Sub (a random {theta:g} of the cohort)",
            "fedprox": "FedProx (μ = {mu:g})", "qffl": "q-FFL (q = {q:g})",
            "term": "TERM (tilt {tilt:g})", "afl": "AFL (λ step {lambda_step:g})"}.get(name, name)
    authors = scenario["data"].get("pixel_scaling") == "authors"
    model = scenario["model"]
    no_bias, zeros = not model.get("bias", True), model.get("init") == "zeros"
    batch = scenario["train"]["batch_size"]
    other_batch = batch != PAPER_BATCH.get(model["name"], batch)
    return (knob.format(**aggregator) + ", the authors' pixel scaling" * authors
            + ", no bias" * no_bias + ", from W = 0" * zeros + f", batch {batch}" * other_batch)


def versus_paper(ours: np.ndarray, paper: tuple[float, float]) -> Difference | None:
    """simfl - paper (in %): our seeds' mean against the paper's mean ± std over its 5
    seeds, Welch's 95 % interval and t-test from the summary statistics; None with
    fewer than two of ours."""
    if len(ours) < 2:
        return None
    return welch(float(ours.mean()), float(ours.std(ddof=1)), len(ours), *paper, PAPER_SEEDS)


def wall_cell(part: pl.DataFrame, by_device: bool) -> str:
    """Mean wall minutes per run of the rows in ``part``; per device when ``by_device``
    (a GPU run and a CPU run of the same rule differ by an order of magnitude)."""
    groups = part.group_by("device", maintain_order=True).agg(pl.col("wall_s").mean())
    return "; ".join(f"{w / 60:.1f} min" + (f" ({d})" if by_device else "")
                     for d, w in groups.iter_rows())


def paper_cells(ours: np.ndarray, paper: tuple[float, float] | None, d: Difference | None,
                holm_p: float, margin: float) -> str:
    """'simfl | paper | simfl - paper [95 %] | verdict | p (Holm p)' for one metric, in %."""
    if paper is None:
        return f"{_pm(ours)} | — | — | — | —"
    if d is None:  # one seed: the difference, no interval
        return f"{_pm(ours)} | {paper[0]:.2f} ± {paper[1]:.2f} | {ours[0] - paper[0]:+.2f} | — | —"
    return (f"{_pm(ours)} | {paper[0]:.2f} ± {paper[1]:.2f} | {_interval(d)} | "
            f"{equivalence(d, margin)} | {d.p:.2g} ({holm_p:.2g})")


def paper_table(table: pl.DataFrame, order: list[str], model: str, weighted: bool) -> None:
    """One row per variant (and its sample-weighted row with ``weighted``): simfl's
    mean ± std over seeds, the paper's cell, simfl - paper with Welch's 95 % interval,
    the registered verdict against ± MARGIN[model], and Welch's p with its Holm
    adjustment over the table's rows of that statistic and metric."""
    margin = MARGIN.get(model, math.nan)
    stats_ = (UNWEIGHTED, WEIGHTED) if weighted else (UNWEIGHTED,)
    rows = []  # (part, statistic, {metric: (values, paper, difference)})
    for variant in order:
        part = table.filter(pl.col("variant") == variant)
        if part.height == 0:
            continue
        rule = variant.rsplit("/", 1)[-1]
        paper = PAPER.get((model, SAME_CELL.get(rule, rule)))
        for statistic in stats_:
            cells = {}
            for k, column in enumerate(statistic[1:]):
                values = 100 * part[column].to_numpy()
                cell_paper = paper and paper[k]
                cells[k] = (values, cell_paper, cell_paper and versus_paper(values, cell_paper))
            rows.append((part, statistic, cells))
    adjusted = {}  # (statistic, metric) -> Holm p per row, in row order
    for statistic in stats_:
        for k in (0, 1):
            family = [(i, row[2][k][2]) for i, row in enumerate(rows) if row[1] == statistic]
            ps = holm([d.p if d else math.nan for _, d in family])
            adjusted.update({(i, k): p for (i, _), p in zip(family, ps, strict=True)})
    print(f"Test error in %, mean ± std over seeds; simfl − paper: the difference of the "
          f"means with Welch's 95 % interval against the paper's {PAPER_SEEDS} seeds; verdict: "
          f"equivalent when that interval lies inside ± {margin:g} point{'s' * (margin != 1)}, "
          "different when it "
          "excludes 0, else undetermined; p: Welch's t-test (Holm-adjusted over the table's "
          "rows of the column).\n")
    print("| rule | runs | p90: simfl | paper | simfl − paper | verdict | p (Holm) "
          "| mean: simfl | paper | simfl − paper | verdict | p (Holm) | wall time per run |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for i, (part, statistic, cells) in enumerate(rows):
        text = [paper_cells(*cells[k], adjusted[(i, k)], margin) for k in (0, 1)]
        print(f"| {part['label'][0]}{statistic[0]} | {part.height} | {text[0]} | {text[1]} | "
              f"{wall_cell(part, table['device'].n_unique() > 1)} |")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("sweep")
    parser.add_argument("--errors", help="write the final test errors of every run here")
    parser.add_argument("--ecdf", help="draw the ECDF of the final test errors here (PNG)")
    parser.add_argument("--scatter", help="draw error against data size here (PNG)")
    parser.add_argument("--versus", help="compare every variant with this one, paired by seed")
    parser.add_argument("--per-seed", action="store_true",
                        help="each run's final test p90 / mean, a column per seed")
    parser.add_argument("--plot-variants", nargs="+",
                        help="the variants the figures show (default: all)")
    parser.add_argument("--by-size", type=int, metavar="N",
                        help="mean test error of the devices with fewer than N samples and of "
                             "the others, per variant")
    parser.add_argument("--window", type=int, metavar="R",
                        help="average each run's test p90 and mean over the evaluations of "
                             "its last R rounds (runs with their evaluation rounds kept)")
    parser.add_argument("--trajectory", help="draw each run's test p90 against the round here "
                                             "(PNG)")
    parser.add_argument("--seeds-for", type=float, metavar="GAP",
                        help="with --versus: the paired seeds needed to find a p90 difference "
                             "of GAP points (t-test at 0.05, power 0.8)")
    parser.add_argument("--weighted", action="store_true",
                        help="every statistic sample-weighted too (weighted 90th percentile and "
                             "mean), each in a row beside the unweighted one")
    parser.add_argument("--ratio", nargs=3, action="append", default=[], metavar=("A", "B", "C"),
                        help="(A - C) / (B - C) of the paired mean differences, with Fieller's "
                             "95%% interval (repeatable)")
    parser.add_argument("--also", action="append", default=[], help="another sweep's runs too")
    parser.add_argument("--seeds", type=int, nargs="+",
                        help="only these seeds' runs (e.g. a registered first look at fewer "
                             "seeds than the sweeps now have)")
    parser.add_argument("--results", action="append", type=Path,
                        help="where run directories are, in order of preference (repeatable; "
                             "default: results, then docs/runs, bench/archive_runs.py's copies)")
    args = parser.parse_args()
    if args.seeds_for and not args.versus:
        parser.error("--seeds-for needs --versus: it plans a paired comparison")
    sweep = load_sweep(args.sweep)
    model = load_scenario(sweep.scenario, sweep.runs[0].overrides).model.name
    runs = variant_keys([load_sweep(path) for path in (args.sweep, *args.also)])
    places = args.results or [Path("results"), Path("docs/runs")]
    rows, errors, trajectories, windows = [], [], [], []
    scenarios: dict[str, dict] = {}  # variant -> the scenario of its first complete run
    for key, run in runs:
        if args.seeds is not None and run.params["seed"] not in args.seeds:
            continue
        # A sweep's run directory is <results>/<sweep name>/<run id>: look in every place.
        run_dir = next((d / run.run_dir.parent.name / run.run_id for d in places
                        if is_complete(d / run.run_dir.parent.name / run.run_id)), None)
        if run_dir is None:
            continue
        manifest = json.loads((run_dir / "manifest.json").read_text())
        test = manifest["summary"]["test"]
        evals = pl.read_parquet(run_dir / "eval.parquet")
        last = evals.filter((pl.col("split") == "test") & (pl.col("round") == evals["round"].max()))
        error, counts = last["error"].to_numpy(), last["num_samples"].to_numpy()
        weighted = float(error @ counts / counts.sum())
        weighted_tail = weighted_p90(error, counts)
        scenarios.setdefault(key, manifest["scenario"])
        rows.append({"variant": key, "seed": run.params["seed"],
                     "label": rule_label(manifest["scenario"]),
                     "mean": test["mean"], "p90": test["p90"], "wmean": weighted,
                     "wp90": weighted_tail,
                     "wall_s": manifest["wall_s"], "device": manifest.get("device", "")})
        errors.append(last.select("client_id", "num_samples", "error").with_columns(
            variant=pl.lit(rows[-1]["variant"]), label=pl.lit(rows[-1]["label"]),
            seed=pl.lit(run.params["seed"])))
        this_run = {"variant": pl.lit(key), "seed": pl.lit(run.params["seed"])}
        if args.window and args.by_size and evals["round"].n_unique() > 1:
            windows.append(evals.with_columns(**this_run).filter(
                (pl.col("split") == "test") & in_window(args.window)).select(
                "variant", "seed", "round", "num_samples", "error"))
        if (args.window or args.trajectory) and (
                rounds := evaluations(run_dir, evals)) is not None:
            trajectories.append(rounds.select("round", "mean", "p90").with_columns(**this_run))
    if not rows:
        raise SystemExit(f"{args.sweep}: no complete run yet")
    table = pl.DataFrame(rows)
    labels = distinguish(dict(zip(table["variant"], table["label"], strict=True)), scenarios)
    table = table.with_columns(pl.col("variant").replace_strict(labels).alias("label"))
    print(f"{sweep.name} ({model}): {table.height} complete runs of {len(runs)}; "
          f"devices: {', '.join(sorted(set(table['device'])))}")
    order = list(dict.fromkeys(key for key, _ in runs))
    paper_table(table, order, model, args.weighted)
    if args.per_seed:
        per_seed(table, order)
    if args.weighted:
        weighting_shift(table, order, model)
    if args.versus:
        versus(table, args.versus, order, gap=args.seeds_for, weighted=args.weighted)
    for a, b, c in args.ratio:
        ratio(table, a, b, c, weighted=args.weighted)
    if args.by_size:
        by_size(pl.concat(errors), args.by_size, order, labels)
    if args.window:
        if not trajectories:
            raise SystemExit("--window: no run has its evaluation rounds kept")
        window(pl.concat(trajectories), args.window, order, labels, args.versus, args.seeds_for)
        if windows:
            by_size_over_window(pl.concat(windows), args.by_size, args.window, order, labels)
    if args.errors:
        pl.concat(errors).write_parquet(args.errors)
    first = pl.concat(errors).filter(pl.col("seed") == pl.col("seed").min().over("variant"))
    if args.plot_variants:
        first = first.filter(pl.col("variant").is_in(args.plot_variants))
    for out, draw, what in ((args.ecdf, plot_error_ecdf, "final test error per device"),
                            (args.scatter, plot_error_vs_size_by_rule,
                             "final test error against data size")):
        if out:
            save_figure(draw(first, f"{sweep.name}: {what}"), out)
            print(out)
    if args.trajectory and trajectories:
        runs_drawn = pl.concat(trajectories).with_columns(
            pl.col("variant").replace_strict(labels).alias("label"))
        if args.plot_variants:
            runs_drawn = runs_drawn.filter(pl.col("variant").is_in(args.plot_variants))
        if args.window:  # the evaluations the window averages
            runs_drawn = runs_drawn.filter(in_window(args.window))
        save_figure(plot_p90_by_round(runs_drawn, f"{sweep.name}: test p90 by round"),
                    args.trajectory)
        print(args.trajectory)


def distinguish(labels: dict[str, str], scenarios: dict[str, dict]) -> dict[str, str]:
    """Labels (variant -> label) with the settings that tell apart variants sharing a
    label (e.g. the same rule in two sweeps): ", model.l2 = 1e-06". A key that an
    older manifest lacks (added to simfl later) takes simfl's default there, so it
    counts only where a run set it to something else (e.g. ``data.sources``)."""
    out = dict(labels)
    defaults = dict(flatten(to_dict(Scenario())))
    for label in [name for name, count in Counter(labels.values()).items() if count > 1]:
        same = [variant for variant, name in labels.items() if name == label]
        flat = {variant: dict(flatten(scenarios[variant])) for variant in same}
        keys = set.union(*(set(f) for f in flat.values())) - {"seed"}
        full = {v: {k: flat[v].get(k, defaults.get(k)) for k in keys} for v in same}
        differ = sorted(k for k in keys
                        if len({json.dumps(full[v][k], default=str) for v in same}) > 1)
        for variant in same:
            out[variant] = label + "".join(f", {k} = {full[variant][k]}" for k in differ)
    return out


def variant_keys(sweeps: list[Sweep]) -> list[tuple[str, SweepRun]]:
    """(key, run) for every run of the sweeps: the key is the run's variant, or
    ``<sweep name>/<variant>`` where an earlier sweep already has that variant."""
    keyed: list[tuple[str, SweepRun]] = []
    for sweep in sweeps:
        earlier = {key for key, _ in keyed}
        for run in sweep.runs:
            variant = str(run.params.get("variant", ""))
            keyed.append((f"{sweep.name}/{variant}" if variant in earlier else variant, run))
    return keyed


def per_seed(table: pl.DataFrame, order: list[str]) -> None:
    """Each run's final test p90 / mean (in %), a row per variant and a column per seed."""
    seeds = sorted(set(table["seed"]))
    print("\nEach run's final test error in %: 90th percentile / mean\n")
    print("| rule | " + " | ".join(f"seed {seed}" for seed in seeds) + " |")
    print("|---|" + "---|" * len(seeds))
    for variant in order:
        part = table.filter(pl.col("variant") == variant)
        if part.height == 0:
            continue
        by_seed = {run["seed"]: f"{100 * run['p90']:.2f} / {100 * run['mean']:.2f}"
                   for run in part.iter_rows(named=True)}
        print(f"| {part['label'][0]} | " + " | ".join(by_seed.get(seed, "—") for seed in seeds)
              + " |")


def versus(table: pl.DataFrame, reference: str, order: list[str], of: str = "",
           gap: float | None = None, weighted: bool = False) -> None:
    """Each variant minus ``reference``, paired by seed: mean [95% t-interval], the paired
    t-test's p and its Holm adjustment over the table's rows of that column, except the
    registered primary rows (PRIMARY; only for the final evaluation, ``of`` empty), which
    are marked and not adjusted (``of`` names the figures compared when they are not the
    final evaluation's); with ``weighted`` a sample-weighted row below each; with ``gap``,
    the seeds a paired test needs to find a p90 difference of ``gap`` points."""
    statistics = (UNWEIGHTED, WEIGHTED) if weighted else (UNWEIGHTED,)
    columns = ["seed"] + [c for statistic in statistics for c in statistic[1:]]
    ref = table.filter(pl.col("variant") == reference).select(columns)
    if ref.height == 0:
        raise SystemExit(f"--versus {reference}: no complete run of that variant")
    rows = []  # (label, seeds, statistic, [p90 differences, mean differences], primary)
    for variant in order:
        if variant == reference:
            continue
        both = table.filter(pl.col("variant") == variant).join(ref, on="seed", suffix="_ref")
        if both.height == 0:
            continue
        seeds = ", ".join(map(str, sorted(both["seed"])))
        for statistic in statistics:
            diffs = [100 * (both[m] - both[f"{m}_ref"]).to_numpy() for m in statistic[1:]]
            primary = (not of and statistic == UNWEIGHTED and variant == PRIMARY[0]
                       and reference in PRIMARY[1])
            rows.append((both["label"][0] + statistic[0], seeds, statistic, diffs, primary))
    adjusted = _holm_by_column(rows)
    print(f"\nEach rule minus {reference}{of}, paired by seed (percentage points; 95% "
          f"t-interval over the seeds both have; p: paired t-test, Holm-adjusted over the "
          "column's rows in brackets; primary: a registered primary comparison, "
          "not adjusted)\n")
    plan = f" seeds to find {gap:g} points |" if gap else ""
    print(f"| rule | seeds | p90 difference | p (Holm) | mean difference | p (Holm) |{plan}")
    print("|---|---|---|---|---|---|" + ("---|" if gap else ""))
    for i, (label, seeds, _, diffs, primary) in enumerate(rows):
        need = ""
        if gap:
            need = f" {seeds_needed(diffs[0].std(ddof=1), gap)} |" if len(diffs[0]) > 1 else " — |"
        text = [_paired(d, adjusted[(i, k)], primary and k == 0) for k, d in enumerate(diffs)]
        print(f"| {label} | {seeds} | {text[0]} | {text[1]} |{need}")


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


def ratio(table: pl.DataFrame, a: str, b: str, c: str, weighted: bool = False) -> None:
    """(a - c) / (b - c) of the paired mean differences over the seeds all three have,
    with Fieller's 95 % confidence set (unbounded where b - c is not resolved from 0)."""
    statistics = (UNWEIGHTED, WEIGHTED) if weighted else (UNWEIGHTED,)
    metrics = [m for statistic in statistics for m in statistic[1:]]
    runs = {v: table.filter(pl.col("variant") == v).select("seed", *metrics) for v in (a, b, c)}
    for v, part in runs.items():
        if part.height == 0:
            raise SystemExit(f"--ratio: no complete run of {v}")
    both = runs[a].join(runs[b], on="seed", suffix="_b").join(runs[c], on="seed", suffix="_c")
    print(f"\n({a} − {c}) / ({b} − {c}), paired by seed over seeds "
          f"{', '.join(map(str, sorted(both['seed'])))}: the ratio of the mean differences "
          "with Fieller's 95 % confidence set\n")
    print("| statistic | numerator | denominator | ratio [Fieller 95 %] |")
    print("|---|---|---|---|")
    for statistic in statistics:
        for metric, name in zip(statistic[1:], ("p90", "mean"), strict=True):
            top = 100 * (both[metric] - both[f"{metric}_c"]).to_numpy()
            bottom = 100 * (both[f"{metric}_b"] - both[f"{metric}_c"]).to_numpy()
            if len(top) < 2:
                raise SystemExit("--ratio: needs at least two seeds with all three variants")
            print(f"| {name}{statistic[0]} | {top.mean():+.2f} | {bottom.mean():+.2f} | "
                  f"{fieller(top, bottom)} |")


def weighting_shift(table: pl.DataFrame, order: list[str], model: str) -> None:
    """Per variant, sample-weighted minus unweighted on the same runs (paired by run):
    the shift of the 90th percentile and of the mean with their 95 % t-intervals and,
    for a linear cell of the paper, the registered verdict of cause C1 (docs/
    reproduction.md): supported when the p90 shift's interval lies below 0, sufficient
    when moreover the weighted p90 minus the paper is equivalent within the margin, not
    supported when the interval contains 0 and excludes -HALF_GAP, else undetermined."""
    margin = MARGIN.get(model, math.nan)
    print("\nSample-weighted minus unweighted, the same runs (percentage points; 95 % "
          "t-interval over the runs; C1: the registered verdict, linear model)\n")
    print("| rule | runs | p90 shift | mean shift | weighted p90 − paper | verdict | C1 |")
    print("|---|---|---|---|---|---|---|")
    for variant in order:
        part = table.filter(pl.col("variant") == variant)
        if part.height < 2:
            continue
        shifts = [paired(100 * (part[w] - part[u]).to_numpy()) for u, w in (("p90", "wp90"),
                                                                             ("mean", "wmean"))]
        rule = variant.rsplit("/", 1)[-1]
        paper = PAPER.get((model, SAME_CELL.get(rule, rule)))
        d = paper and versus_paper(100 * part["wp90"].to_numpy(), paper[0])
        verdict = equivalence(d, margin) if d else "—"
        cause = c1_verdict(shifts[0], verdict == "equivalent") if d and model == "linear" else "—"
        print(f"| {part['label'][0]} | {part.height} | {_interval(shifts[0])} | "
              f"{_interval(shifts[1])} | {_interval(d) if d else '—'} | {verdict} | {cause} |")


def c1_verdict(shift: Difference, equivalent: bool) -> str:
    """The registered decision rule of a cause, on the shift's 95 % interval."""
    if shift.high < 0:
        return "sufficient" if equivalent else "supported"
    if shift.low > -HALF_GAP and shift.low <= 0 <= shift.high:
        return "not supported"
    return "undetermined"


def seeds_needed(sd: float, gap: float, power: float = 0.8, alpha: float = 0.05,
                 most: int = 1000) -> str:
    """The fewest paired seeds n at which a two-sided one-sample t-test at ``alpha`` on
    differences of standard deviation ``sd`` finds a true mean difference ``gap`` with
    probability ``power`` (the noncentral t with n - 1 degrees of freedom and
    noncentrality gap √n / sd); '> most' beyond ``most``."""
    if sd == 0:
        return "2"  # differences that never vary: any true gap shows at the fewest seeds
    for n in range(2, most + 1):
        crit = stats.t.ppf(1 - alpha / 2, n - 1)
        shift = abs(gap) * math.sqrt(n) / sd
        lower = float(stats.nct.cdf(-crit, n - 1, shift))  # scipy: nan far out in the tail
        if stats.nct.sf(crit, n - 1, shift) + (0.0 if math.isnan(lower) else lower) >= power:
            return str(n)
    return f"> {most}"


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
           reference: str | None, gap: float | None = None) -> None:
    """Per variant, over its runs with evaluation rounds: the final test p90, the p90 and
    mean averaged over the evaluations after round (last - ``rounds``) (mean ± std over
    seeds), and the within-run standard deviation of p90 over those evaluations (its range
    over the runs); with ``reference``, the paired differences of the averages."""
    per_run = trajectories.filter(in_window(rounds)).group_by("variant", "seed").agg(
        final=pl.col("p90").sort_by("round").last(), p90=pl.col("p90").mean(),
        mean=pl.col("mean").mean(), within=pl.col("p90").std(), evaluations=pl.len())
    print(f"\nTest error (%) averaged over the evaluations of each run's last {rounds} rounds "
          "(simfl's addition: the papers report the final model), mean ± std over seeds\n")
    print("| rule | seeds | evaluations a run | final p90 | p90, averaged | within-run sd of "
          "p90 | mean, averaged |")
    print("|---|---|---|---|---|---|---|")
    for variant in order:
        part = per_run.filter(pl.col("variant") == variant).sort("seed")
        if part.height == 0:
            continue
        within = 100 * part["within"].to_numpy()
        spread = (f"{within[0]:.2f}" if len(within) == 1
                  else f"{within.min():.2f}–{within.max():.2f}")
        counts = part["evaluations"].to_list()
        low, high = min(counts), max(counts)
        print(f"| {labels[variant]} | {', '.join(map(str, part['seed']))} | "
              f"{low if low == high else f'{low}–{high}'} | "
              f"{_pm(100 * part['final'].to_numpy())} | {_pm(100 * part['p90'].to_numpy())} | "
              f"{spread} | {_pm(100 * part['mean'].to_numpy())} |")
    if reference:
        versus(per_run.with_columns(pl.col("variant").replace_strict(labels).alias("label")),
               reference, order, of=f" (averaged over the last {rounds} rounds)", gap=gap)


def by_size(errors: pl.DataFrame, n: int, order: list[str], labels: dict[str, str]) -> None:
    """Each variant's mean test error over its devices with fewer than ``n`` samples and
    over the others: mean ± std over seeds of each seed's mean, with the devices' count
    (its range over the seeds, which draw different writers)."""
    large = (pl.col("num_samples") >= n).alias("large")
    per_seed = errors.group_by("variant", "seed", large).agg(
        error=100 * pl.col("error").mean(), devices=pl.len())
    print(f"\nMean test error (%) of the test devices with < {n} and ≥ {n} samples "
          "(mean ± std over seeds)\n")
    print(f"| rule | seeds | < {n}: devices | mean error | ≥ {n}: devices | mean error |")
    print("|---|---|---|---|---|---|")
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
            cells.append(f"{count} | {_pm(side['error'].to_numpy())}")
        print(f"| {labels[variant]} | {part['seed'].n_unique()} | {' | '.join(cells)} |")


def by_size_over_window(errors: pl.DataFrame, n: int, rounds: int, order: list[str],
                        labels: dict[str, str]) -> None:
    """Per run: the mean test error of its devices with fewer than ``n`` samples and of the
    others at each evaluation of its last ``rounds`` rounds, as mean ± std over those
    evaluations, and the number of evaluations where the smaller devices' is higher."""
    large = (pl.col("num_samples") >= n).alias("large")
    per_round = errors.group_by("variant", "seed", "round", large).agg(
        error=100 * pl.col("error").mean()).pivot("large", index=["variant", "seed", "round"],
                                                  values="error")
    print(f"\nMean test error (%) of the test devices with < {n} and ≥ {n} samples at each "
          f"evaluation of the last {rounds} rounds (mean ± std over those evaluations; runs "
          "with every evaluation at hand)\n")
    print(f"| rule | seed | evaluations | < {n}: mean error | ≥ {n}: mean error | "
          f"evaluations with < {n} worse |")
    print("|---|---|---|---|---|---|")
    for variant in order:
        for seed in sorted(set(per_round.filter(pl.col("variant") == variant)["seed"])):
            run = per_round.filter((pl.col("variant") == variant) & (pl.col("seed") == seed))
            small, big = run["false"].to_numpy(), run["true"].to_numpy()
            print(f"| {labels[variant]} | {seed} | {run.height} | {_pm(small)} | {_pm(big)} | "
                  f"{int((small > big).sum())} |")


def _paired(diff: np.ndarray, holm_p: float = math.nan, primary: bool = False) -> str:
    """'mean [low, high] | p (Holm p)' of paired differences ('p (primary)' for a primary
    comparison); the value alone for one seed."""
    if len(diff) < 2:
        return f"{diff[0]:+.2f} | —"
    d = paired(diff)
    adjusted = "primary" if primary else f"{holm_p:.2g}"
    return f"{_interval(d)} | {d.p:.2g} ({adjusted})"


def _interval(d: Difference) -> str:
    """'+1.23 [+0.45, +2.01]'."""
    return f"{d.estimate:+.2f} [{d.low:+.2f}, {d.high:+.2f}]"


def _pm(values: np.ndarray) -> str:
    """Mean ± sample std over seeds (just the value for one seed), already in %."""
    if len(values) == 1:
        return f"{values[0]:.2f}"
    return f"{values.mean():.2f} ± {values.std(ddof=1):.2f}"


if __name__ == "__main__":
    main()

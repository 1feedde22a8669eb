"""The reproduction table of a paper sweep, cell by cell against the Δ-FL papers.

    python bench/paper_table.py scenarios/paper/linear.sweep.toml [--errors OUT.parquet]
        [--ecdf OUT.png] [--scatter OUT.png] [--plot-variants V ...] [--versus fedavg]
        [--also OTHER.sweep.toml] [--by-size N] [--window R] [--trajectory OUT.png]
        [--seeds-for GAP] [--results DIR ...]

Reads every complete run of the sweep (its manifest and final evaluation), from
``results/`` or else from the copies ``bench/archive_runs.py`` keeps in
``docs/runs/`` (runs outlive a work session only there), and
prints one markdown row per variant: simfl's mean ± std over the seeds present
(n) of the unseen test devices' 90th-percentile and mean error, next to the
papers' mean ± std over their 5 seeds, and Welch's two-sided t-test of the two
(unequal variances, from the summary statistics; "agree" when p ≥ 0.05; with
one simfl seed there is no test). Also the sample-weighted mean (what the
authors' code reports as the mean) and the wall time per run.

The papers' values: Pillutla, Laguel, Malick, Harchaoui, "Tackling Distribution
Shifts in Federated Learning with Superquantile Aggregation" (NeurIPS 2022
workshop), Tables 1-2 (every rule but FedAvg-Sub; the long paper's Tables 2-3
repeat the FedAvg and Δ-FL cells), and the CISS 2021 paper's Table I for
FedAvg-Sub (ConvNet only). ``../shared/papers/`` has both.

``--versus V`` adds simfl's own comparison of every variant with variant V: the
difference in 90th-percentile and mean test error paired by seed (a seed fixes
the writers kept, the held-out half and the initial model, so the rules of one
seed share them), its mean with a 95% t-interval, and the paired t-test's p.
With ``--seeds-for GAP`` it adds how many paired seeds a two-sided paired t-test at
0.05 would need to find a true difference of GAP points in the 90th percentile with
probability 0.8, were the paired differences' standard deviation the one these seeds
show: a planning figure, as uncertain as a standard deviation from two or three seeds.
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
from simfl.plots.runs import (
    error_by_round,
    plot_error_ecdf,
    plot_error_vs_size_by_rule,
    plot_p90_by_round,
)
from simfl.scenario import load_scenario
from simfl.sweep import Sweep, SweepRun, is_complete, load_sweep

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


def welch_p(ours: np.ndarray, paper: tuple[float, float]) -> float:
    """Two-sided p-value of Welch's t-test, our seeds (in %) against the paper's mean ± std
    over its 5 seeds; nan with fewer than two of ours."""
    if len(ours) < 2:
        return math.nan
    mean, std = paper
    return float(stats.ttest_ind_from_stats(ours.mean(), ours.std(ddof=1), len(ours), mean, std,
                                            PAPER_SEEDS, equal_var=False).pvalue)


def wall_cell(part: pl.DataFrame, by_device: bool) -> str:
    """Mean wall minutes per run of the rows in ``part``; per device when ``by_device``
    (a GPU run and a CPU run of the same rule differ by an order of magnitude)."""
    groups = part.group_by("device", maintain_order=True).agg(pl.col("wall_s").mean())
    return "; ".join(f"{w / 60:.1f} min" + (f" ({d})" if by_device else "")
                     for d, w in groups.iter_rows())


def cell(ours: np.ndarray, paper: tuple[float, float] | None) -> str:
    """'ours | paper | p (agree?)' for one metric, all in %."""
    if paper is None:
        return f"{_pm(ours)} | — | —"
    p = welch_p(ours, paper)
    verdict = "—" if math.isnan(p) else f"{p:.2g} ({'agree' if p >= 0.05 else 'differ'})"
    return f"{_pm(ours)} | {paper[0]:.2f} ± {paper[1]:.2f} | {verdict}"


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
    parser.add_argument("--also", action="append", default=[], help="another sweep's runs too")
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
        scenarios.setdefault(key, manifest["scenario"])
        rows.append({"variant": key, "seed": run.params["seed"],
                     "label": rule_label(manifest["scenario"]),
                     "mean": test["mean"], "p90": test["p90"], "wmean": weighted,
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
    print("Test error in %, mean ± std over seeds; p: Welch's t-test against the paper "
          f"({PAPER_SEEDS} seeds), agree when p ≥ 0.05.\n")
    print("| rule | runs | p90: simfl | paper | p | mean: simfl | paper | p "
          "| sample-weighted mean | wall time per run |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    order = list(dict.fromkeys(key for key, _ in runs))
    for variant in order:
        part = table.filter(pl.col("variant") == variant)
        if part.height == 0:
            continue
        p90, mean, wmean = (part[c].to_numpy() for c in ("p90", "mean", "wmean"))
        rule = variant.rsplit("/", 1)[-1]
        paper = PAPER.get((model, SAME_CELL.get(rule, rule)))
        print(f"| {part['label'][0]} | {part.height} | {cell(100 * p90, paper and paper[0])} | "
              f"{cell(100 * mean, paper and paper[1])} | {_pm(100 * wmean)} | "
              f"{wall_cell(part, table['device'].n_unique() > 1)} |")
    if args.per_seed:
        per_seed(table, order)
    if args.versus:
        versus(table, args.versus, order, gap=args.seeds_for)
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
    label (e.g. the same rule in two sweeps): ", model.l2 = 1e-06". Only settings
    present in all their manifests count (a key added to simfl later is absent from
    older manifests, not different)."""
    out = dict(labels)
    for label in [name for name, count in Counter(labels.values()).items() if count > 1]:
        same = [variant for variant, name in labels.items() if name == label]
        flat = {variant: _flatten(scenarios[variant]) for variant in same}
        keys = sorted(set.intersection(*(set(f) for f in flat.values())) - {"seed"})
        differ = [k for k in keys if len({repr(flat[v][k]) for v in same}) > 1]
        for variant in same:
            out[variant] = label + "".join(f", {k} = {flat[variant][k]}" for k in differ)
    return out


def _flatten(tree: dict, prefix: str = "") -> dict[str, object]:
    """{"model": {"l2": 1e-6}} -> {"model.l2": 1e-6}."""
    flat: dict[str, object] = {}
    for key, value in tree.items():
        if isinstance(value, dict):
            flat.update(_flatten(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


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
           gap: float | None = None) -> None:
    """Each variant minus ``reference``, paired by seed: mean [95% t-interval], paired p
    (``of`` names the figures compared when they are not the final evaluation's); with
    ``gap``, the seeds a paired test needs to find a p90 difference of ``gap`` points."""
    ref = table.filter(pl.col("variant") == reference).select("seed", "p90", "mean")
    if ref.height == 0:
        raise SystemExit(f"--versus {reference}: no complete run of that variant")
    print(f"\nEach rule minus {reference}{of}, paired by seed (percentage points; 95% "
          f"t-interval over the seeds both have; p: paired t-test)\n")
    plan = f" seeds to find {gap:g} points |" if gap else ""
    print(f"| rule | seeds | p90 difference | p | mean difference | p |{plan}")
    print("|---|---|---|---|---|---|" + ("---|" if gap else ""))
    for variant in order:
        if variant == reference:
            continue
        both = table.filter(pl.col("variant") == variant).join(ref, on="seed", suffix="_ref")
        if both.height == 0:
            continue
        p90, mean = (100 * (both[m] - both[f"{m}_ref"]).to_numpy() for m in ("p90", "mean"))
        need = ""
        if gap:
            need = f" {seeds_needed(p90.std(ddof=1), gap)} |" if len(p90) > 1 else " — |"
        print(f"| {both['label'][0]} | {', '.join(map(str, sorted(both['seed'])))} | "
              f"{_paired(p90)} | {_paired(mean)} |{need}")


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


def _paired(diff: np.ndarray) -> str:
    """'mean [low, high] | p' of paired differences; the value alone for one seed."""
    if len(diff) < 2:
        return f"{diff[0]:+.2f} | —"
    half = stats.t.ppf(0.975, len(diff) - 1) * diff.std(ddof=1) / math.sqrt(len(diff))
    p = float(stats.ttest_1samp(diff, 0.0).pvalue)
    return f"{diff.mean():+.2f} [{diff.mean() - half:+.2f}, {diff.mean() + half:+.2f}] | {p:.2g}"


def _pm(values: np.ndarray) -> str:
    """Mean ± sample std over seeds (just the value for one seed), already in %."""
    if len(values) == 1:
        return f"{values[0]:.2f}"
    return f"{values.mean():.2f} ± {values.std(ddof=1):.2f}"


if __name__ == "__main__":
    main()

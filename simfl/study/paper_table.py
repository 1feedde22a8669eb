"""The reproduction table of a paper sweep, cell by cell against the Δ-FL papers.

    python -m simfl.study.paper_table scenarios/paper/linear.sweep.toml [--errors OUT.parquet]
        [--ecdf OUT.png] [--scatter OUT.png] [--plot-variants V ...] [--versus fedavg]
        [--also OTHER.sweep.toml] [--by-size N] [--window R] [--trajectory OUT.png]
        [--seeds-for GAP] [--weighted] [--ratio A B C] [--seeds S ...] [--results DIR ...]

Reads every complete run of the sweep (its manifest and final evaluation), from
``results/`` or else from the copies ``bench/archive_runs.py`` keeps in ``docs/runs/``
(:func:`read_runs`), and prints one markdown row per variant
(:func:`simfl.study.paper_cells.reproduction_table`): simfl's mean ± std over the seeds
present (n) of the unseen test devices' 90th-percentile and mean error, the papers' mean ±
std over their 5 seeds, and simfl − paper: the difference of the means with Welch's 95 %
interval (from the summary statistics, Welch-Satterthwaite degrees of freedom), the
verdict docs/reproduction.md registered against a margin of ± 1 point (linear) or ± 2
points (ConvNet), *equivalent* when the interval lies inside the margin (both one-sided
tests against the margin reject at 0.025), *different* when it excludes 0, else
*undetermined*, and Welch's p with its Holm adjustment over the table's rows (one seed:
the difference alone). Also the wall time per run.

``--weighted`` adds below every row its sample-weighted row: each test device weighted by
its sample count, the weighted mean (what the authors' code reports as the mean) and the
weighted 90th percentile, the lower weighted quantile min{u : Σ_{k: e_k ≤ u} n_k / Σ n ≥
0.9} (simfl's ``weighted_quantile``, the long paper's Property 7; the unweighted 90th
percentile interpolates linearly); and a table of weighted minus unweighted on the same
runs, with the registered verdict of cause C1 for the linear model. Every table then has
both.

``--versus V`` adds simfl's own comparison of every variant with variant V
(:mod:`simfl.study.paper_paired`): the difference in 90th-percentile and mean test error
paired by seed, its mean with a 95% t-interval, and the paired t-test's p with its Holm
adjustment over the column's rows, except the registered primary comparisons (the first
sweep's Δ-FL θ = 0.5 minus its FedAvg or FedAvg-Sub, in the unweighted 90th percentile),
marked *primary* and not adjusted. ``--ratio A B C`` (repeatable) gives (A − C) / (B − C),
the ratio of the paired mean differences over the seeds all three have, with Fieller's
95 % confidence set: the ratios ρ at which a paired t-test of (A − C) − ρ (B − C) does not
reject, an interval when B − C is resolved from 0 and otherwise two rays or the whole line,
printed as such. With ``--seeds-for GAP`` it adds how many paired seeds a two-sided paired
t-test at 0.05 would need to find a true difference of GAP points in the 90th percentile
with probability 0.8, were the paired differences' standard deviation the one these seeds
show: a planning figure, as uncertain as a standard deviation from two or three seeds.
``--seeds S ...`` keeps only those seeds' runs: a registered first look at seeds 0–2
recomputes after its second look's runs have joined the sweep.

``--also`` adds the runs of another sweep of the same model (e.g. the baselines); a
variant whose name an earlier sweep already has is called ``<its sweep's name>/<variant>``
(``--versus paper_linear_batch32/fedavg``), so two protocols' runs are never pooled.

``--window R`` is simfl's addition, not the papers' protocol (they report the final
model): the 90th percentile of one evaluation moves from one evaluation to the next, so
for every run with its evaluation rounds kept (``eval_rounds.parquet``, or a whole
``eval.parquet`` in ``results/``) it averages the test p90 and mean over the evaluations
of the last R rounds, gives their within-run standard deviation beside the final one, and
(with ``--versus``) the paired differences of those averages; with ``--by-size N`` too,
for every run whose whole ``eval.parquet`` is at hand (``results/``; ``docs/runs`` keeps
the final round only), the mean test error of the devices below and above N samples over
those evaluations, and in how many of them the smaller devices fare worse.
``--trajectory`` draws every such run's test p90 against the round (over the window's
rounds with ``--window``).

``--errors`` writes the final per-device test errors of every run; ``--ecdf`` draws their
ECDF and ``--scatter`` the error against local data size, one colour per variant (its
lowest seed). ``--by-size N`` splits the unseen test devices at N samples and gives each
part's mean error per variant (mean ± std over seeds): the long paper's Figure 14 in two
numbers, who gains and who loses.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import polars as pl

from simfl.errors import InputError
from simfl.rundir import MANIFEST
from simfl.runs.sweep import Sweep, SweepRun, is_complete, load_sweep
from simfl.scenario import Scenario, flatten, load_scenario, to_dict
from simfl.study import run_command
from simfl.study.intervals import weighted_p90
from simfl.study.paper_cells import per_seed, reproduction_table, rule_label, weighting_shift
from simfl.study.paper_paired import (
    by_size,
    by_size_over_window,
    evaluations,
    in_window,
    ratio,
    versus,
    window,
)


@dataclass(frozen=True)
class PaperRuns:
    """The complete runs of a paper sweep (and of the sweeps ``--also`` adds), as frames.

    ``table``: a row per run (variant, seed, label, p90, mean, wp90, wmean: final test
    errors as fractions, wall_s, device); ``errors``: the final per-device test errors
    (client_id, num_samples, error, variant, label, seed); ``trajectories``: each run's
    test mean and p90 by evaluation round, where kept (None unless asked); ``windows``:
    the per-device test errors of the window's evaluations of runs whose whole
    eval.parquet is at hand (None unless asked or none is); ``labels``: variant → label;
    ``order``: the variants in the sweeps' order; ``runs``: how many runs the sweeps
    list."""

    name: str
    model: str
    table: pl.DataFrame
    errors: pl.DataFrame
    trajectories: pl.DataFrame | None
    windows: pl.DataFrame | None
    labels: dict[str, str]
    order: list[str]
    runs: int


def read_runs(sweep_files: list[Path], places: list[Path], seeds: list[int] | None = None,
              rounds: int | None = None, by_size_n: int | None = None,
              trajectories: bool = False) -> PaperRuns:
    """The complete runs of the sweeps (the first one's model), each looked for in every
    place in turn (a sweep's run directory is ``<place>/<sweep name>/<run id>``); only
    ``seeds`` when given. ``rounds`` (the window) or ``trajectories`` read the runs'
    evaluation rounds; ``rounds`` with ``by_size_n`` their per-device errors over the
    window. InputError when no run is complete."""
    sweep = load_sweep(sweep_files[0])
    model = load_scenario(sweep.scenario, sweep.runs[0].overrides).model.name
    runs = variant_keys([load_sweep(path) for path in sweep_files])
    rows, errors, paths, windows = [], [], [], []
    scenarios: dict[str, dict] = {}  # variant -> the scenario of its first complete run
    for key, run in runs:
        if seeds is not None and run.params["seed"] not in seeds:
            continue
        run_dir = next((d / run.run_dir.parent.name / run.run_id for d in places
                        if is_complete(d / run.run_dir.parent.name / run.run_id)), None)
        if run_dir is None:
            continue
        manifest = json.loads((run_dir / MANIFEST).read_text())
        test = manifest["summary"]["test"]
        evals = pl.read_parquet(run_dir / "eval.parquet")
        last = evals.filter((pl.col("split") == "test") & (pl.col("round") == evals["round"].max()))
        error, counts = last["error"].to_numpy(), last["num_samples"].to_numpy()
        scenarios.setdefault(key, manifest["scenario"])
        rows.append({"variant": key, "seed": run.params["seed"],
                     "label": rule_label(manifest["scenario"]),
                     "mean": test["mean"], "p90": test["p90"],
                     "wmean": float(error @ counts / counts.sum()),
                     "wp90": weighted_p90(error, counts),
                     "wall_s": manifest["wall_s"], "device": manifest.get("device", "")})
        errors.append(last.select("client_id", "num_samples", "error").with_columns(
            variant=pl.lit(key), label=pl.lit(rows[-1]["label"]),
            seed=pl.lit(run.params["seed"])))
        this_run = {"variant": pl.lit(key), "seed": pl.lit(run.params["seed"])}
        if rounds and by_size_n and evals["round"].n_unique() > 1:
            windows.append(evals.with_columns(**this_run).filter(
                (pl.col("split") == "test") & in_window(rounds)).select(
                "variant", "seed", "round", "num_samples", "error"))
        if (rounds or trajectories) and (by_round := evaluations(run_dir, evals)) is not None:
            paths.append(by_round.select("round", "mean", "p90").with_columns(**this_run))
    if not rows:
        raise InputError(f"{sweep_files[0]}: no complete run yet")
    table = pl.DataFrame(rows)
    labels = distinguish(dict(zip(table["variant"], table["label"], strict=True)), scenarios)
    return PaperRuns(sweep.name, model,
                     table.with_columns(pl.col("variant").replace_strict(labels).alias("label")),
                     pl.concat(errors), pl.concat(paths) if paths else None,
                     pl.concat(windows) if windows else None, labels,
                     list(dict.fromkeys(key for key, _ in runs)), len(runs))


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


def report(found: PaperRuns, args: argparse.Namespace) -> list[str]:
    """The tables the command's options ask for, in order, as markdown lines."""
    table, order, labels = found.table, found.order, found.labels
    lines = [f"{found.name} ({found.model}): {table.height} complete runs of {found.runs}; "
             f"devices: {', '.join(sorted(set(table['device'])))}"]
    lines += reproduction_table(table, order, found.model, args.weighted)
    if args.per_seed:
        lines += per_seed(table, order)
    if args.weighted:
        lines += weighting_shift(table, order, found.model)
    if args.versus:
        lines += versus(table, args.versus, order, gap=args.seeds_for, weighted=args.weighted)
    for a, b, c in args.ratio:
        lines += ratio(table, a, b, c, weighted=args.weighted)
    if args.by_size:
        lines += by_size(found.errors, args.by_size, order, labels)
    if args.window:
        if found.trajectories is None:
            raise InputError("--window: no run has its evaluation rounds kept")
        lines += window(found.trajectories, args.window, order, labels, args.versus,
                        args.seeds_for)
        if found.windows is not None:
            lines += by_size_over_window(found.windows, args.by_size, args.window, order,
                                         labels)
    return lines


def figures(found: PaperRuns, args: argparse.Namespace) -> list[str]:
    """Write the files asked for (``--errors``, ``--ecdf``, ``--scatter``,
    ``--trajectory``); the figures' paths."""
    from simfl.plots import save_figure
    from simfl.plots.runs import plot_error_ecdf, plot_error_vs_size_by_rule, plot_p90_by_round

    if args.errors:
        found.errors.write_parquet(args.errors)
    first = found.errors.filter(pl.col("seed") == pl.col("seed").min().over("variant"))
    if args.plot_variants:
        first = first.filter(pl.col("variant").is_in(args.plot_variants))
    written = []
    for out, draw, what in ((args.ecdf, plot_error_ecdf, "final test error per device"),
                            (args.scatter, plot_error_vs_size_by_rule,
                             "final test error against data size")):
        if out:
            save_figure(draw(first, f"{found.name}: {what}"), out)
            written.append(out)
    if args.trajectory and found.trajectories is not None:
        drawn = found.trajectories.with_columns(
            pl.col("variant").replace_strict(found.labels).alias("label"))
        if args.plot_variants:
            drawn = drawn.filter(pl.col("variant").is_in(args.plot_variants))
        if args.window:  # the evaluations the window averages
            drawn = drawn.filter(in_window(args.window))
        save_figure(plot_p90_by_round(drawn, f"{found.name}: test p90 by round"),
                    args.trajectory)
        written.append(args.trajectory)
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m simfl.study.paper_table",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("sweep", type=Path)
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
    parser.add_argument("--also", action="append", default=[], type=Path,
                        help="another sweep's runs too")
    parser.add_argument("--seeds", type=int, nargs="+",
                        help="only these seeds' runs (e.g. a registered first look at fewer "
                             "seeds than the sweeps now have)")
    parser.add_argument("--results", action="append", type=Path,
                        help="where run directories are, in order of preference (repeatable; "
                             "default: results, then docs/runs, bench/archive_runs.py's copies)")
    args = parser.parse_args(argv)
    if args.seeds_for and not args.versus:
        parser.error("--seeds-for needs --versus: it plans a paired comparison")

    def work() -> None:
        found = read_runs([args.sweep, *args.also],
                          args.results or [Path("results"), Path("docs/runs")], args.seeds,
                          args.window, args.by_size, bool(args.trajectory))
        print("\n".join(report(found, args)))
        for path in figures(found, args):
            print(path)

    return run_command(work)


if __name__ == "__main__":
    sys.exit(main())

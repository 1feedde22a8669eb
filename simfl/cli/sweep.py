"""``sweep`` (every run of a sweep file, a shard's share, ``--status``), ``collect`` (the
complete runs gathered into one table per kind, with figures) and ``tune`` (a grid's runs
and the hyper-parameters chosen by a criterion)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from simfl.cli.checks import check_plots_dir
from simfl.cli.common import Parser, one_line, say
from simfl.errors import RunInterrupted

if TYPE_CHECKING:
    from simfl.runs.sweep import Sweep


def sweep_parser(command: str) -> argparse.ArgumentParser:
    what = {"sweep": "Run every scenario of a sweep (Ray tasks, or in turn).",
            "collect": "Gather a sweep's finished runs into one table per kind, with figures."}
    parser = Parser(prog=f"python -m simfl {command}", description=what[command])
    parser.add_argument("sweep", type=Path, help="sweep TOML file")
    if command == "collect":
        parser.add_argument("--results", metavar="DIR", type=Path, default=Path("results"),
                            help="where the sweep's run directories are (default: results; "
                                 "docs/runs for the copies kept by bench/archive_runs.py)")
    if command == "sweep":
        parser.add_argument("--backend", choices=("auto", "ray", "sequential"), default="auto",
                            help="auto: Ray when installed, else one run after another")
        parser.add_argument("--shard", metavar="I/N", type=_shard, default=(0, 1),
                            help="run only every N-th run, starting at the I-th (0-based): N "
                                 "machines with I = 0 .. N-1 share a sweep (processes on one "
                                 "machine share it without: each skips the runs another "
                                 "process is working on)")
        parser.add_argument("--archived", metavar="DIR", type=Path,
                            help="skip the runs complete in DIR/<sweep name>/ (copies kept "
                                 "by bench/archive_runs.py, e.g. docs/runs) of this shard; "
                                 "with --status, show them as archived")
        parser.add_argument("--quiet", action="store_true",
                            help="no round progress bar (the sequential backend shows one)")
        parser.add_argument("--status", action="store_true",
                            help="run nothing; print where each run stands")
    return parser


def _shard(text: str) -> tuple[int, int]:
    try:
        i, n = (int(part) for part in text.split("/"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected I/N, got {text!r}") from None
    if not 0 <= i < n:
        raise argparse.ArgumentTypeError(f"need 0 <= I < N, got {text!r}")
    return i, n


def sweep_command(command: str, args: argparse.Namespace) -> int:
    """``sweep`` or ``collect`` (``command``), as parsed by :func:`sweep_parser`."""
    from simfl.runs.sweep import load_sweep, status_lines

    sweep = load_sweep(args.sweep, args.results if command == "collect" else Path("results"))
    if command == "collect":
        return _collect(sweep)
    if args.status:
        for line in status_lines(sweep, args.archived):
            say(line)
        return 0
    from simfl.runs.sweep import is_complete
    from simfl.runs.sweep.execute import BUSY, finished, run_shard

    again = f"continue with: python -m simfl sweep {args.sweep}"
    try:
        statuses = run_shard(sweep, args.shard, args.archived, args.backend, report=say,
                             progress=not args.quiet)
    except RunInterrupted as e:
        print(f"simfl: sweep {sweep.name}: {e}; {again}", file=sys.stderr)
        return 128 + e.signum
    except KeyboardInterrupt:
        print(f"simfl: sweep {sweep.name}: interrupted; {again}", file=sys.stderr)
        return 130
    busy = sum(statuses.get(run.run_id) == BUSY and not is_complete(run.run_dir)
               for run in sweep.runs)  # left to another process and still not complete
    if busy:
        say(f"{sweep.name}: {busy} run{'s' * (busy > 1)} left to the other processes "
            f"working on them (python -m simfl sweep {args.sweep} --status)")
    return 0 if finished(statuses) else 1


def _collect(sweep: Sweep) -> int:
    from simfl.plots.study import plot_sweep
    from simfl.rundir import PLOTS_DIR, SWEEP_FIGURES
    from simfl.runs.sweep import collect, is_complete, lacking, other_scenarios

    check_plots_dir(sweep.out_dir)
    for line in other_scenarios(sweep, [run for run in sweep.runs if is_complete(run.run_dir)]):
        say(line)
    for table, runs in lacking(sweep).items():
        say(f"{sweep.out_dir / table}.parquet: not collected: {runs} complete runs have no "
            f"{table}.parquet (archived with bench/archive_runs.py --lean)")
    for table, rows in collect(sweep).items():
        say(f"{sweep.out_dir / table}.parquet: {rows} rows")
    from simfl.plots.sweep import sweep_figures

    def report(line: str) -> None:
        print(line, file=sys.stderr)

    written = plot_sweep(sweep.out_dir, report=report)
    written += sweep_figures(sweep.out_dir, sweep.out_dir / PLOTS_DIR, report=report)
    for path in written:
        say(path)
    for name in SWEEP_FIGURES:  # a figure skipped now: collect's earlier copy would be stale
        if (stale := sweep.out_dir / PLOTS_DIR / name) not in written:
            stale.unlink(missing_ok=True)  # collect checked that it wrote it
    return 0


def tune_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="python -m simfl tune",
        description="Run a tuning file's grid and choose per variant by its criterion "
                    "(train_loss or holdout_p90); writes tuning.md and chosen.toml.")
    parser.add_argument("tuning", type=Path, help="tuning TOML (a sweep with a criterion)")
    parser.add_argument("--backend", choices=("auto", "ray", "sequential"), default="auto")
    parser.add_argument("--quiet", action="store_true", help="no round progress bar")
    parser.add_argument("--archived", type=Path, metavar="DIR",
                        help="reuse the runs kept under DIR/<name>/ by bench/archive_runs.py "
                             "(e.g. docs/runs) instead of running them again")
    return parser


def tune_command(args: argparse.Namespace) -> int:
    from simfl.runs.tune import tune

    result = tune(args.tuning, args.backend, progress=not args.quiet, archived=args.archived)
    for variant, values in result.chosen.items():
        say(f"{variant or 'all runs'}: " + ", ".join(f"{k} = {v}" for k, v in values.items()))
    for variant, why in result.unchosen.items():
        print(f"simfl: tune {args.tuning}: {variant or 'all runs'}: no choice: "
              f"{one_line(why)}", file=sys.stderr)
    say(result.report)
    if result.chosen_file is not None:
        say(result.chosen_file)
    return 1 if result.unchosen else 0

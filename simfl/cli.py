"""Command line: argument parsing only; the work is in run.py and plots.py.

    python -m simfl SCENARIO.toml [--out DIR] [--set KEY=VALUE ...] [--overwrite] [--quiet]
    python -m simfl plot RUN_DIR [RUN_DIR ...] [--compare OUT.png]
    python -m simfl trace SCENARIO.toml --out TRACE.parquet|.csv [--set KEY=VALUE ...]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from simfl.errors import InputError


def _run_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m simfl", description="Run a scenario.")
    parser.add_argument("scenario", type=Path, help="scenario TOML file")
    parser.add_argument("--out", type=Path, help="run directory (default results/<name>)")
    parser.add_argument("--overwrite", action="store_true", help="replace an existing run")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="override a scenario key, e.g. --set server.num_rounds=200")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    return parser


def _plot_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m simfl plot",
                                     description="Figures from a run's Parquet tables.")
    parser.add_argument("run_dirs", type=Path, nargs="+", help="run directories")
    parser.add_argument("--compare", type=Path,
                        help="also overlay the runs' tail error vs communication in this PNG")
    return parser


def _trace_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m simfl trace",
        description="Write a scenario's device availability (online intervals) as a trace.")
    parser.add_argument("scenario", type=Path, help="scenario TOML file")
    parser.add_argument("--out", type=Path, required=True, help="trace file (.parquet or .csv)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="override a scenario key")
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    try:
        if argv and argv[0] == "plot":
            return _plot(_plot_parser().parse_args(argv[1:]))
        if argv and argv[0] == "trace":
            return _trace(_trace_parser().parse_args(argv[1:]))
        return _run(_run_parser().parse_args(argv))
    except InputError as e:
        print(f"simfl: error: {e}", file=sys.stderr)
        return 2


def _run(args: argparse.Namespace) -> int:
    from simfl.run import run_scenario
    from simfl.scenario import load_scenario

    scenario = load_scenario(args.scenario, args.set)
    run_dir = args.out or Path("results") / scenario.name
    manifest = run_scenario(scenario, run_dir, overwrite=args.overwrite, progress=not args.quiet)
    test = manifest["summary"]["test"]
    print(f"{run_dir}: test error mean {test['mean']:.4f}, p90 {test['p90']:.4f} "
          f"({manifest['wall_s']:.1f} s)")
    return 0


def _plot(args: argparse.Namespace) -> int:
    from simfl.plots import compare_runs, plot_run

    for run_dir in args.run_dirs:
        for path in plot_run(run_dir):
            print(path)
    if args.compare:
        print(compare_runs(args.run_dirs, args.compare))
    return 0


def _trace(args: argparse.Namespace) -> int:
    from simfl.run import write_availability_trace
    from simfl.scenario import load_scenario

    if args.out.suffix not in (".parquet", ".csv"):
        raise InputError(f"{args.out}: a trace file must end in .parquet or .csv")
    num_intervals = write_availability_trace(load_scenario(args.scenario, args.set), args.out)
    print(f"{args.out}: {num_intervals} online intervals")
    return 0

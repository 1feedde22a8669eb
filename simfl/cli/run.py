"""``run`` (a scenario; the word may be left out) and ``resume`` (a run from its last
checkpoint): their arguments, and the one line that says how the run ended."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from simfl.cli.common import Parser, one_line, output_path, say
from simfl.errors import RunFailed, RunInterrupted


def run_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="python -m simfl run",
                    description="Run a scenario ('run' may be left out).")
    parser.add_argument("scenario", type=Path, help="scenario TOML file")
    parser.add_argument("--out", type=output_path, help="run directory (default results/<name>)")
    parser.add_argument("--overwrite", action="store_true", help="replace an existing run")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="override a scenario key, e.g. --set server.num_rounds=200")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    return parser


def resume_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="python -m simfl resume",
        description="Continue a killed, interrupted or failed run from its last checkpoint.")
    parser.add_argument("run_dir", type=Path, help="run directory")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    return parser


def run_command(args: argparse.Namespace) -> int:
    from simfl.runs.run import run_scenario
    from simfl.scenario import load_scenario

    scenario = load_scenario(args.scenario, args.set)
    run_dir = args.out or Path("results") / scenario.name
    return _report(run_dir, lambda: run_scenario(scenario, run_dir, overwrite=args.overwrite,
                                                 progress=not args.quiet, report=say))


def resume_command(args: argparse.Namespace) -> int:
    from simfl.runs.run import resume_run

    return _report(args.run_dir, lambda: resume_run(args.run_dir, progress=not args.quiet,
                                                    report=say))


def _report(run_dir: Path, work: Callable[[], dict[str, Any]]) -> int:
    """Do ``work`` (a run); one line says how it ended: 0 complete, 1 failed, 128 + signal
    stopped. A run that fails or is stopped keeps its last checkpoint."""
    from simfl.rundir import manifest_or_empty

    resume = f"continue with: python -m simfl resume {run_dir}"
    try:
        manifest = work()
    except RunInterrupted as e:
        print(f"simfl: {run_dir}: {e}; {resume}", file=sys.stderr)
        return 128 + e.signum
    except KeyboardInterrupt:
        manifest = manifest_or_empty(run_dir)
        if manifest.get("status") == "complete":  # the signal came when nothing was left to stop
            return _done(run_dir, manifest)
        if manifest.get("status") != "interrupted":  # it had not begun
            print(f"simfl: {run_dir}: interrupted before the run began; nothing written",
                  file=sys.stderr)
        else:
            print(f"simfl: {run_dir}: interrupted; {resume} (from its last checkpoint)",
                  file=sys.stderr)
        return 130
    except RunFailed as e:
        print(f"simfl: {run_dir}: run failed: {one_line(str(e))}", file=sys.stderr)
        return 1
    return _done(run_dir, manifest)


def _done(run_dir: Path, manifest: dict[str, Any]) -> int:
    """The line of a complete run."""
    test = manifest["summary"]["test"]
    say(f"{run_dir}: test error mean {test['mean']:.4f}, p90 {test['p90']:.4f} "
        f"({manifest['wall_s']:.1f} s)")
    return 0

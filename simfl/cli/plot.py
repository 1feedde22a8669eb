"""``plot``: a run's figures redrawn from its Parquet tables; ``--compare`` and
``--compare-time`` overlay several runs; ``--level`` says when each reaches an error."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from simfl.cli.checks import check_output_file, check_plots_dir
from simfl.cli.common import Parser, output_path, say
from simfl.errors import InputError


def plot_parser() -> argparse.ArgumentParser:
    from simfl.rundir import FIGURE_FORMATS

    parser = Parser(prog="python -m simfl plot",
                    description="Figures from a run's Parquet tables.")
    parser.add_argument("run_dirs", type=Path, nargs="+", help="run directories")
    parser.add_argument("--compare", type=output_path, metavar="FILE",
                        help="also overlay the runs' tail error vs communication in this file")
    parser.add_argument("--compare-time", type=output_path, metavar="FILE",
                        help="also overlay the runs' tail error vs simulated time (sync vs async)")
    parser.add_argument("--split", choices=("test", "train"), default="test",
                        help="the devices whose 90th-percentile error --compare and "
                             "--compare-time draw: unseen test devices (default) or the "
                             "training devices")
    parser.add_argument("--format", choices=FIGURE_FORMATS, default=None,
                        help="figure format (default png, or the --compare file's suffix); a "
                             "run's figures are redrawn in RUN_DIR/plots/")
    parser.add_argument("--overwrite", action="store_true",
                        help="replace existing --compare / --compare-time files (a run's own "
                             "plots/ figures are always redrawn)")
    parser.add_argument("--all", action="store_true",
                        help="with --compare or --compare-time, also redraw each run's own "
                             "figures in RUN_DIR/plots/ (without a comparison they always are)")
    parser.add_argument("--level", type=float, metavar="P90",
                        help="print when each run first reaches this 90th-percentile test error "
                             "(simulated time, round, bytes)")
    return parser


def plot_command(args: argparse.Namespace) -> int:
    from simfl.plots.command import plot_runs
    from simfl.plots.runs import reach_level
    from simfl.rundir import FIGURE_FORMATS, MANIFEST

    if args.level is not None and not 0 <= args.level <= 1:
        raise InputError(f"--level {args.level}: must be a 90th-percentile test error, a "
                         "number in [0, 1]")
    compare = [p for p in (args.compare, args.compare_time) if p is not None]
    for out in compare:
        check_output_file(out, args.overwrite, "figure", tuple(f".{f}" for f in FIGURE_FORMATS))
    fmt = _figure_format(args.format, compare)
    for run_dir in args.run_dirs:
        if not (run_dir / MANIFEST).is_file():
            what = ("a sweep's folder: plot its runs (RUN_DIR/*/), or its collected figures "
                    "come from python -m simfl collect") if any(run_dir.glob(f"*/{MANIFEST}")) \
                else "not a run directory (no manifest.json)"
            raise InputError(f"{run_dir}: {what}")
        check_plots_dir(run_dir)
    for path in plot_runs(args.run_dirs, fmt, args.compare, args.compare_time, args.split,
                          every_run=args.all, report=lambda line: print(line, file=sys.stderr)):
        say(path)
    if args.level is not None:
        for run_dir in args.run_dirs:
            hit = reach_level(run_dir, args.level)
            if hit is None:
                say(f"{run_dir}: never reaches p90 <= {args.level}")
                continue
            sent = hit["bytes_cum"]  # unknown: a stopped run's round not written yet
            say(f"{run_dir}: p90 <= {args.level} at {hit['t_s'] / 3600:.2f} h, round "
                f"{hit['round']}, " + (f"{sent / 1e9:.2f} GB" if sent is not None
                                       else "bytes not known yet (the round's row is "
                                            "written when its stragglers end)"))
    return 0


def _figure_format(chosen: str | None, compare: list[Path]) -> str:
    """The format of every figure ``plot`` writes: ``--format``, else the --compare files'
    suffix (one for all), else png. InputError when they disagree."""
    suffixes = {p.suffix.lstrip(".") for p in compare}
    fmt = chosen or (suffixes.pop() if len(suffixes) == 1 else "png")
    for path in compare:
        if path.suffix != f".{fmt}":
            raise InputError(f"{path}: the figures are written as {fmt} files; name it "
                             f"{path.with_suffix('.' + fmt).name} (or use --format)")
    return fmt

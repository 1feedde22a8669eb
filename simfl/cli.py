"""Command line: arguments, the commands' checks of their paths, their output lines and
exit statuses; the work is in runs/ (run.py, sweep/, tune.py, ...), plots/, ...

    python -m simfl SCENARIO.toml [--out DIR] [--set KEY=VALUE ...] [--overwrite] [--quiet]
    python -m simfl COMMAND ...   (python -m simfl --help lists the commands)

Exit status: 0 done; 1 a run failed during its work (its manifest says why; it keeps
its last checkpoint); 2 bad input, found before any work and before anything is
written; 128 + N stopped by signal N (resumable).
"""

from __future__ import annotations

import argparse
import difflib
import math
import os
import re
import sys
import warnings
from collections.abc import Callable
from dataclasses import dataclass, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

from simfl.errors import InputError, RunFailed, RunInterrupted

if TYPE_CHECKING:
    from simfl.population.build import Population
    from simfl.population.trace_stats import AvailabilityStats
    from simfl.runs.sweep import Sweep
    from simfl.scenario import Scenario

# Training devices ``trace stats`` and ``trace fit`` assume for a scenario whose data is
# not at hand to count them (said so in their output; --num-devices sets the number).
ASSUMED_NUM_DEVICES = 1000
LINE_BREAKS = re.compile("[\n\r\x0b\x0c\x1c-\x1e\x85\u2028\u2029]")  # str.splitlines' breaks


class _Parser(argparse.ArgumentParser):
    """argparse with bad arguments as simfl's other bad input: one line, exit status 2
    (argparse's own prints its usage text over several lines)."""

    def error(self, message: str) -> NoReturn:
        raise InputError(f"{self.prog}: {message} ({self.prog} --help shows the usage)")


def _run_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="python -m simfl [run]",
                     description="Run a scenario ('run' may be left out).")
    parser.add_argument("scenario", type=Path, help="scenario TOML file")
    parser.add_argument("--out", type=_output_path, help="run directory (default results/<name>)")
    parser.add_argument("--overwrite", action="store_true", help="replace an existing run")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="override a scenario key, e.g. --set server.num_rounds=200")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    return parser


def _resume_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="python -m simfl resume",
        description="Continue a killed, interrupted or failed run from its last checkpoint.")
    parser.add_argument("run_dir", type=Path, help="run directory")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    return parser


def _plot_parser() -> argparse.ArgumentParser:
    from simfl.rundir import FIGURE_FORMATS

    parser = _Parser(prog="python -m simfl plot",
                     description="Figures from a run's Parquet tables.")
    parser.add_argument("run_dirs", type=Path, nargs="+", help="run directories")
    parser.add_argument("--compare", type=_output_path, metavar="FILE",
                        help="also overlay the runs' tail error vs communication in this file")
    parser.add_argument("--compare-time", type=_output_path, metavar="FILE",
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
    parser.add_argument("--level", type=float, metavar="P90",
                        help="print when each run first reaches this 90th-percentile test error "
                             "(simulated time, round, bytes)")
    return parser


def _trace_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="python -m simfl trace",
        description="Write a scenario's device availability (online intervals) as a trace. "
                    "Also: trace convert (from FedScale or FLASH), trace stats and trace "
                    "fit; python -m simfl trace convert --help, ... stats --help, ... fit "
                    "--help.")
    parser.add_argument("scenario", type=Path, help="scenario TOML file")
    parser.add_argument("--out", type=_output_path, required=True,
                        help="trace file (.parquet or .csv)")
    parser.add_argument("--overwrite", action="store_true", help="replace an existing file")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="override a scenario key")
    return parser


def _trace_convert_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="python -m simfl trace convert",
        description="Convert a FedScale or FLASH device-availability trace into simfl's "
                    "trace format (docs/design.md section 3).")
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--from-fedscale", type=Path, metavar="FILE",
                        help="FedScale's client_behave_trace (a pickle of plain data)")
    source.add_argument("--from-flash", type=Path, metavar="FILE",
                        help="FLASH's state_traces.json")
    parser.add_argument("--out", type=Path, required=True, help="trace file (.parquet or .csv)")
    parser.add_argument("--overwrite", action="store_true", help="replace an existing file")
    parser.add_argument("--start-s", type=float, default=0.0, metavar="S",
                        help="simulated second of the trace's origin (FedScale's time 0, "
                             "midnight of a FLASH trace's first day); default 0")
    parser.add_argument("--horizon-s", type=float, metavar="H",
                        help="repeat each client's pattern, as FedScale and FLASH do, to "
                             "cover simulated [0, H) (default: its recorded span once)")
    return parser


def _trace_source_parser(command: str, description: str) -> argparse.ArgumentParser:
    """A ``trace`` subcommand that reads a trace or a scenario's draws."""
    parser = _Parser(prog=f"python -m simfl trace {command}", description=description)
    parser.add_argument("source", type=Path, help="trace (.parquet or .csv) or scenario (.toml)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="override a scenario key")
    parser.add_argument("--num-devices", type=_positive_int, metavar="N",
                        help="a trace's device count, the never-online ones included "
                             "(default: its recorded client count, else its highest "
                             "client_idx + 1); a scenario's training "
                             "devices, instead of counting them in its data (default: "
                             f"counted; {ASSUMED_NUM_DEVICES}, said to be assumed, where the "
                             "data is not at hand)")
    return parser


def _trace_stats_parser() -> argparse.ArgumentParser:
    parser = _trace_source_parser(
        "stats", "Availability statistics of a trace or of a scenario's model: online share "
                 "by hour of the day and on weekdays and weekends, quantiles of device "
                 "online share, session and gap lengths, devices online per day.")
    parser.add_argument("--figure", type=Path, metavar="FILE",
                        help="also draw the online share by hour (weekdays, weekend) and "
                             "the devices' online shares to FILE (.png, .pdf, .svg)")
    parser.add_argument("--overwrite", action="store_true", help="replace an existing --figure")
    return parser


def _trace_fit_parser() -> argparse.ArgumentParser:
    parser = _trace_source_parser(
        "fit", "Fit the habits availability model (per-device propensity, phase and session "
               "length, and the heavy-tailed components its tests find) to a trace or to a "
               "scenario's draws; print it as the scenario tables that reproduce it, then, "
               "as TOML comments, its statistics against the fitted model's simulated, "
               "with a warning (also on stderr) for each one off (docs/design.md section 3).")
    parser.add_argument("--components", default="all", metavar="LIST",
                        help="heavy-tailed components to fit, each kept only where its test "
                             "finds it: all (default), none, or a comma-separated list of "
                             "classes, weekly, bursts, charging")
    parser.add_argument("--out", type=Path, help="also write the tables to this .toml file")
    parser.add_argument("--overwrite", action="store_true", help="replace an existing --out")
    return parser


def _positive_int(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 1, got {text!r}")
    return int(text)


def _sweep_parser(command: str) -> argparse.ArgumentParser:
    what = {"sweep": "Run every scenario of a sweep (Ray tasks, or in turn).",
            "collect": "Gather a sweep's finished runs into one table per kind, with figures."}
    parser = _Parser(prog=f"python -m simfl {command}", description=what[command])
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


def _drfl_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="python -m simfl drfl",
        description="DRFL's breast-cancer noise study (needs the drfl extra).")
    parser.add_argument("study", type=Path, nargs="?",
                        help="study TOML (default: the paper's protocol, as in "
                             "docs/drfl_breast_cancer.toml)")
    parser.add_argument("--out", type=_output_path, help="output directory "
                        "(default results/<study stem>, or results/drfl_breast_cancer)")
    parser.add_argument("--overwrite", action="store_true",
                        help="replace the study's files in an existing output directory")
    return parser


def _tune_parser() -> argparse.ArgumentParser:
    parser = _Parser(
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


def _tune(args: argparse.Namespace) -> int:
    from simfl.runs.tune import tune

    result = tune(args.tuning, args.backend, progress=not args.quiet, archived=args.archived)
    for variant, values in result.chosen.items():
        _say(f"{variant or 'all runs'}: " + ", ".join(f"{k} = {v}" for k, v in values.items()))
    for variant, why in result.unchosen.items():
        print(f"simfl: tune {args.tuning}: {variant or 'all runs'}: no choice: "
              f"{_one_line(why)}", file=sys.stderr)
    _say(result.report)
    if result.chosen_file is not None:
        _say(result.chosen_file)
    return 1 if result.unchosen else 0


def _data_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="python -m simfl data",
        description="Write FEMNIST as simfl reads it (npz + sha256) from the forms "
                    "researchers have: LEAF's json shards or TFF's HDF5 files.")
    parser.add_argument("dataset", choices=("femnist",), help="the data set")
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--from-leaf", type=Path, metavar="DIR",
                        help="LEAF's data/femnist/data (its train/ and test/ json shards)")
    source.add_argument("--from-tff", type=Path, nargs="+", metavar="FILE.h5",
                        help="fed_emnist_train.h5 and fed_emnist_test.h5 (needs h5py)")
    parser.add_argument("--out", type=_output_path, required=True, metavar="PATH.npz",
                        help="the file to write (never replaced)")
    return parser


def _data(args: argparse.Namespace) -> int:
    from simfl.data.convert import convert_femnist

    summary = convert_femnist(args.out, leaf_dir=args.from_leaf, tff_files=args.from_tff or ())
    _say("\n".join(summary.lines()))
    return 0


def _output_path(text: str) -> Path:
    """An output path argument: not empty (Path('') would be the current folder)."""
    if not text:
        raise argparse.ArgumentTypeError("an output path must not be empty")
    return Path(text)


def _shard(text: str) -> tuple[int, int]:
    try:
        i, n = (int(part) for part in text.split("/"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected I/N, got {text!r}") from None
    if not 0 <= i < n:
        raise argparse.ArgumentTypeError(f"need 0 <= I < N, got {text!r}")
    return i, n


COMMANDS = {  # name: one line of help
    "run": "run a scenario (the default: python -m simfl SCENARIO.toml)",
    "resume": "continue a killed, interrupted or failed run from its last checkpoint",
    "plot": "figures from runs' Parquet tables; --compare overlays several runs",
    "trace": "write, convert (FedScale, FLASH) or summarise device availability traces",
    "sweep": "run every scenario of a sweep (Ray tasks, or in turn); --status",
    "collect": "gather a sweep's finished runs into one table per kind, with figures",
    "drfl": "DRFL's breast-cancer noise study (needs the drfl extra)",
    "data": "make simfl's FEMNIST file from LEAF json or TensorFlow Federated .h5",
    "tune": "pick hyper-parameters from a grid as the papers did (writes the evidence)",
}


def _usage() -> str:
    lines = ["usage: python -m simfl SCENARIO.toml [--out DIR] [--set KEY=VALUE ...] "
             "[--overwrite] [--quiet]",
             "       python -m simfl COMMAND [ARGS]   (python -m simfl COMMAND --help)", "",
             "commands:"]
    lines += [f"  {name:<9} {text}" for name, text in COMMANDS.items()]
    lines += ["", "exit status: 0 done, 1 a run failed (see its manifest), 2 bad input "
              "(nothing written), 128+N stopped by signal N (resume it)"]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """The command line's exit status (module docstring). Memory that runs out anyway is one
    line too: loading torch, polars or pyarrow under too small a limit (the loader cannot
    map the library: exit 2, nothing written), or a MemoryError of the work beyond what
    the memory guard (simfl.runs.memory) estimated (exit 1; a run that had started says
    failed in its manifest)."""
    argv = sys.argv[1:] if argv is None else argv
    # numpy's RuntimeWarnings (an overflow in an extreme scenario's arithmetic) would print
    # before simfl's one line; what they warn of surfaces as simfl's own message or check
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            return _main(argv)
    except ImportError as e:
        # "failed to map segment from shared object", "cannot allocate memory": the
        # dynamic loader's words for an address space too small to load the library
        if not re.search(r"map segment|allocate memory", str(e), re.I):
            raise
        print(f"simfl: error: too little memory to load simfl's libraries "
              f"({_one_line(f'{type(e).__name__}: {e}')}); with torch they take about 1.2 "
              f"GiB of address space (ulimit -v) before any work", file=sys.stderr)
        return 2
    except MemoryError as e:
        print(f"simfl: error: out of memory ({_one_line(f'{type(e).__name__}: {e}')}): more "
              f"than simfl's memory guard estimated; give the process more memory or make "
              f"the scenario smaller", file=sys.stderr)
        return 1


def _main(argv: list[str]) -> int:
    try:
        if not argv or argv[0] in ("-h", "--help"):
            _say(_usage())
            return 0 if argv else 2
        command, rest = argv[0], argv[1:]
        if command == "plot":
            return _plot(_plot_parser().parse_args(rest))
        if command == "trace":
            return _trace_command(rest)
        if command == "resume":
            return _resume(_resume_parser().parse_args(rest))
        if command == "drfl":
            return _drfl(_drfl_parser().parse_args(rest))
        if command == "data":
            return _data(_data_parser().parse_args(rest))
        if command == "tune":
            return _tune(_tune_parser().parse_args(rest))
        if command in ("sweep", "collect"):
            return _sweep(command, _sweep_parser(command).parse_args(rest))
        if command == "run":
            argv = rest
        elif not command.startswith("-") and not _looks_like_scenario(command):
            near = difflib.get_close_matches(command, COMMANDS, n=1)
            hint = f" (did you mean '{near[0]}'?)" if near else ""
            raise InputError(f"unknown command or scenario file '{command}'{hint}; "
                             f"python -m simfl --help lists the commands")
        return _run(_run_parser().parse_args(argv))
    except InputError as e:
        print(f"simfl: error: {_one_line(str(e))}", file=sys.stderr)
        return 2
    except OSError as e:  # an output path that no check foresaw (a run's own is a failed run)
        print(f"simfl: error: {_one_line(os_error(e))}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # before a run began (a run's own stop is _report's)
        print("simfl: interrupted", file=sys.stderr)
        return 130


def os_error(e: OSError) -> str:
    """An OSError as ``path: reason`` (no errno number, no traceback)."""
    where = e.filename if e.filename is not None else ""
    return f"{where}: {e.strerror}" if where and e.strerror else str(e)


def _looks_like_scenario(arg: str) -> bool:
    """A scenario file: it exists, or its name says so (a missing one gets its own error)."""
    return arg.endswith(".toml") or Path(arg).exists()


def _say(line: object) -> None:
    """Print a line to stdout. If its reader has gone (``python -m simfl ... | head``),
    print nothing more and go on: what a command does, and its exit status, do not
    depend on who reads its output (stdout is pointed at /dev/null, so the buffered
    rest is not flushed into the closed pipe either)."""
    try:
        print(line, flush=True)
    except BrokenPipeError:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)


def _one_line(text: str) -> str:
    """``text`` with its line breaks escaped: a message quoting user input stays one line."""
    return LINE_BREAKS.sub(lambda m: repr(m.group())[1:-1], text)


def _run(args: argparse.Namespace) -> int:
    from simfl.runs.run import run_scenario
    from simfl.scenario import load_scenario

    scenario = load_scenario(args.scenario, args.set)
    run_dir = args.out or Path("results") / scenario.name
    return _report(run_dir, lambda: run_scenario(scenario, run_dir, overwrite=args.overwrite,
                                                 progress=not args.quiet, report=_say))


def _resume(args: argparse.Namespace) -> int:
    from simfl.runs.run import resume_run

    return _report(args.run_dir, lambda: resume_run(args.run_dir, progress=not args.quiet,
                                                    report=_say))


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
        print(f"simfl: {run_dir}: run failed: {_one_line(str(e))}", file=sys.stderr)
        return 1
    return _done(run_dir, manifest)


def _done(run_dir: Path, manifest: dict[str, Any]) -> int:
    """The line of a complete run."""
    test = manifest["summary"]["test"]
    _say(f"{run_dir}: test error mean {test['mean']:.4f}, p90 {test['p90']:.4f} "
         f"({manifest['wall_s']:.1f} s)")
    return 0


def _plot(args: argparse.Namespace) -> int:
    from simfl.plots.runs import compare_runs, compare_runs_vs_time, plot_run, reach_level
    from simfl.plots.study import plot_run_bias
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
    for run_dir in args.run_dirs:
        for path in [*plot_run(run_dir, fmt=fmt), *plot_run_bias(run_dir, fmt)]:
            _say(path)
    if args.compare:
        _say(compare_runs(args.run_dirs, args.compare, args.split))
    if args.compare_time:
        _say(compare_runs_vs_time(args.run_dirs, args.compare_time, args.split))
    if args.level is not None:
        for run_dir in args.run_dirs:
            hit = reach_level(run_dir, args.level)
            if hit is None:
                _say(f"{run_dir}: never reaches p90 <= {args.level}")
                continue
            sent = hit["bytes_cum"]  # unknown: a stopped run's round not written yet
            _say(f"{run_dir}: p90 <= {args.level} at {hit['t_s'] / 3600:.2f} h, round "
                 f"{hit['round']}, " + (f"{sent / 1e9:.2f} GB" if sent is not None
                                        else "bytes not known yet (the round's row is "
                                             "written when its stragglers end)"))
    return 0


def _trace(args: argparse.Namespace) -> int:
    """``trace SCENARIO --out FILE``: the scenario's availability as a trace. The memory
    guard counts building the population alone (simfl.runs.memory.population_only)
    and refuses it, in one line, before anything is allocated or written."""
    from simfl.runs.memory import population_only
    from simfl.runs.run import write_availability_trace
    from simfl.scenario import load_scenario

    check_output_file(args.out, args.overwrite, "trace", (".parquet", ".csv"))
    scenario = load_scenario(args.scenario, args.set)
    with population_only():
        num_intervals = write_availability_trace(scenario, args.out)
    _say(f"{args.out}: {num_intervals} online intervals")
    return 0


def _trace_command(rest: list[str]) -> int:
    """``trace convert ...`` and ``trace stats ...`` by their first word; else the
    scenario form ``trace SCENARIO.toml --out ...`` (a scenario file named ``convert``
    or ``stats`` is given as ./convert)."""
    if rest[:1] == ["convert"]:
        return _trace_convert(_trace_convert_parser().parse_args(rest[1:]))
    if rest[:1] == ["stats"]:
        return _trace_stats(_trace_stats_parser().parse_args(rest[1:]))
    if rest[:1] == ["fit"]:
        return _trace_fit(_trace_fit_parser().parse_args(rest[1:]))
    return _trace(_trace_parser().parse_args(rest))


def _trace_convert(args: argparse.Namespace) -> int:
    from simfl.population.trace import write_trace
    from simfl.population.trace_formats import convert_trace

    check_output_file(args.out, args.overwrite, "trace", (".parquet", ".csv"))
    source = "fedscale" if args.from_fedscale else "flash"
    trace = convert_trace(args.from_fedscale or args.from_flash, source, args.start_s,
                          args.horizon_s)
    write_trace(args.out, trace.client_idx, trace.t_on_s, trace.t_off_s, trace.row_client_id,
                trace.metadata)
    kept = len(trace.client_ids)
    _say(f"{args.out}: {kept} devices (client_idx in the order of their ids; client_id "
         f"column), {trace.t_on_s.size} online intervals; of the {trace.num_source} clients, "
         f"left out {trace.num_invalid} invalid and {trace.num_source - kept - trace.num_invalid} "
         "never online")
    return 0


@dataclass(frozen=True)
class _ScenarioPopulation:
    """A scenario's population for ``trace stats`` and ``trace fit``, its seed, and where
    its device count came from when not from its data ("" when it did)."""

    population: Population
    seed: int
    count_note: str


def _scenario_population(args: argparse.Namespace) -> _ScenarioPopulation | None:
    """The training devices of ``args.source`` and their availability when it is a
    scenario (its ``--set`` applied), drawn as a run draws them; None for a trace, which
    takes no ``--set``. Only their number is taken from the data (:func:`_count_devices`),
    unless availability depends on each device's data covariate: then the population is
    built as a run builds it, its data loaded."""
    if args.source.suffix != ".toml":
        if args.set:
            raise InputError("--set is for a scenario (.toml), not a trace")
        return None
    from simfl.population.availability import check_work_bytes
    from simfl.population.build import build_population
    from simfl.rng import Streams
    from simfl.runs.memory import DEVICE_BYTES, population_only
    from simfl.scenario import load_scenario

    scenario = load_scenario(args.source, args.set)
    key = _covariate_key(scenario)
    if key:
        if args.num_devices is not None:
            raise InputError(f"--num-devices: {key} ties availability to each device's data "
                             "covariate, so the data must be loaded (drop --num-devices)")
        from simfl.runs.run import scenario_population

        with population_only():  # the memory guard counts building the population alone
            return _ScenarioPopulation(scenario_population(scenario), scenario.seed, "")
    num_devices, note = _count_devices(scenario, args.num_devices)
    check_work_bytes(DEVICE_BYTES * float(num_devices),
                     f"{args.source}: a table of {num_devices} devices ({note or 'its data'})")
    built = build_population(scenario.population, num_devices, None, Streams(scenario.seed),
                             scenario.model.name)
    return _ScenarioPopulation(built, scenario.seed, note)


def _covariate_key(scenario: Scenario) -> str:
    """The key (as ``key = value``) that makes availability depend on each device's data
    covariate (regions assigned by it, or a habit rank-correlated with it), or ""."""
    population = scenario.population
    if population.region_assignment == "covariate":
        return "population.region_assignment = 'covariate'"
    if population.availability.mode == "habits":
        habits = population.availability.habits
        for field in fields(habits):
            value = getattr(habits, field.name)
            if field.name.endswith("_correlation") and value != 0:
                return f"population.availability.habits.{field.name} = {value!r}"
    return ""


def _count_devices(scenario: Scenario, given: int | None) -> tuple[int, str]:
    """The scenario's training devices and, unless counted in its data, where the number
    came from: ``--num-devices``, else the data's count (FEMNIST: its writer column, no
    image read; any other data set: loaded as a run loads it), else, where the data is not
    at hand (the count of a data set read from files fails with neither SIMFL_DATA_DIR nor
    data.path set), ASSUMED_NUM_DEVICES."""
    if given is not None:
        return given, "from --num-devices, not counted in the data"
    from simfl.data import load_data
    from simfl.data.femnist import count_train_clients
    from simfl.rng import Streams
    from simfl.runs.memory import check_memory, population_only

    data = scenario.data
    try:
        if data.dataset == "femnist":
            return count_train_clients(data, Streams(scenario.seed)), ""
        with population_only():
            check_memory(scenario)
        return load_data(data, Streams(scenario.seed)).train.num_clients, ""
    except InputError as e:  # the synthetic data is made, never missing: its errors stand
        if data.dataset == "synthetic" or data.path or os.environ.get("SIMFL_DATA_DIR"):
            raise
        return ASSUMED_NUM_DEVICES, (
            f"assumed: the data is not at hand to count its training clients "
            f"({_one_line(str(e)).split(';')[0]}); --num-devices N sets the number")


def _trace_stats(args: argparse.Namespace) -> int:
    from simfl.population.trace_stats import model_stats, trace_file_stats

    if args.figure is not None:
        check_output_file(args.figure, args.overwrite, "figure", (".png", ".pdf", ".svg"))
    built = _scenario_population(args)
    if built is None:
        stats = trace_file_stats(args.source, args.num_devices)
    else:
        population = built.population
        window = population.trace.end_s if population.trace is not None else math.inf
        stats = model_stats(population.availability, population.devices.utc_offset_s, window)
    for line in _format_stats(args.source, stats, built.count_note if built else ""):
        _say(line)
    if args.figure is not None:
        from simfl.plots import save_figure
        from simfl.plots.population import plot_population

        clock = "local" if stats.local_time else "UTC"
        save_figure(plot_population(stats.hourly, stats.device_share,
                                    f"{args.source.name}: {stats.num_devices} devices over "
                                    f"{stats.end_s / 86400:.3g} days ({clock} hours)"),
                    args.figure)
        _say(f"wrote {args.figure}")
    return 0


def _trace_fit(args: argparse.Namespace) -> int:
    """``trace fit``: the fitted tables on stdout (and ``--out``), then the fit's check
    (simfl.population.fit_check) as TOML comments; each warning also on stderr."""
    from simfl.population.fit import (
        availability_observed,
        fit_observed,
        parse_components,
        to_toml,
        trace_observed,
    )
    from simfl.population.fit_check import STREAM, check_fit, report_lines
    from simfl.rng import Streams

    components = parse_components(args.components)
    if args.out is not None:
        check_output_file(args.out, args.overwrite, "fit", (".toml",))
    built = _scenario_population(args)
    if built is None:
        observed, seed, note = trace_observed(args.source, num_devices=args.num_devices), 0, ""
    else:
        devices = built.population.devices
        observed = availability_observed(built.population.availability, devices.utc_offset_s,
                                         devices.region_idx, len(devices.region_names))
        seed, note = built.seed, built.count_note
    fitted = fit_observed(observed, components)
    check = check_fit(observed, fitted, Streams(seed).numpy(STREAM))
    warned = [f"warning: {line}" for line in check.warnings()]
    notes = [f"{observed.num_devices} devices ({note})"] if note else []
    decided = [f"component {d.line()}" for d in fitted.components.decisions]
    block = [*notes, *report_lines(check), *decided, *(warned or ["no statistic is off"])]
    text = to_toml(fitted) + "".join(f"# {line}\n" for line in block)
    if args.out is not None:
        args.out.write_text(text)
    _say(text.rstrip())
    for line in [*notes, *warned]:
        print(f"simfl: trace fit: {line}", file=sys.stderr)
    return 0


def _format_stats(source: Path, stats: AvailabilityStats, count_note: str = "") -> list[str]:
    """``trace stats``' lines: the same headings for a trace and for a model;
    ``count_note`` says where an assumed or given device count came from."""
    clock = "local (the regions' UTC offsets)" if stats.local_time else "UTC (no offsets known)"
    devices = f"{stats.num_devices} devices" + (f" ({count_note})" if count_note else "")
    lines = [f"{source}: {devices} over simulated [0, {stats.end_s / 3600:.1f} h)",
             f"online share by hour of the day, {clock}:"]
    shares = stats.hourly["online_share"].to_list()
    lines += ["  " + "  ".join(f"{h:02d}h {shares[h]:.3f}" for h in range(row, row + 6))
              for row in range(0, 24, 6)]
    weekly = [f"{v:.3f}" if math.isfinite(v) else "-"
              for v in (stats.weekday_share, stats.weekend_share, stats.weekend_ratio)]
    lines.append(f"online share on weekdays {weekly[0]}, on weekends {weekly[1]} (weekend "
                 f"/ weekday {weekly[2]}); days {'local' if stats.local_time else 'UTC'}, "
                 "t = 0 is a Monday 00:00 UTC")
    summary = stats.summary
    names = summary.columns[3:]
    lines.append(f"{'quantiles':<24}{'count':>9}{'mean':>10}"
                 + "".join(f"{f'{int(n[1:])}%':>10}" for n in names))
    for row in summary.iter_rows(named=True):
        values = "".join(f"{_number(row[n]):>10}" for n in ("mean", *names))
        lines.append(f"{row['statistic']:<24}{row['count']:>9}{values}")
    return lines


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


def _number(value: float | None) -> str:
    return "-" if value is None else f"{value:.4g}"


DRFL_FIGURES = ("drfl_noise.png", "drfl_convergence.png")  # plots.drfl.write_figures'


def check_output_file(path: Path, overwrite: bool, kind: str, suffixes: tuple[str, ...]
                      ) -> None:
    """InputError unless ``path`` can be written as a ``kind`` file: its suffix one of
    ``suffixes``, a new file in an existing directory, or an existing file that
    ``overwrite`` allows to replace (never a directory)."""
    from simfl.rundir import check_output_path

    if path.suffix not in suffixes:
        raise InputError(f"{path}: a {kind} file must end in "
                         f"{', '.join(suffixes[:-1])} or {suffixes[-1]}")
    if path.is_dir():
        raise InputError(f"{path}: is a directory, not an output file")
    if path.exists() and not overwrite:
        raise InputError(f"{path}: exists (use --overwrite to replace it)")
    if not path.parent.is_dir():
        raise InputError(f"{path}: directory {path.parent} does not exist")
    check_output_path(path)


def check_plots_dir(folder: Path) -> None:
    """InputError when ``folder``'s plots/, where its figures go, is there but no folder."""
    from simfl.rundir import PLOTS_DIR, check_output_path

    plots = folder / PLOTS_DIR
    if plots.exists() and not plots.is_dir():
        raise InputError(f"{plots}: exists and is not a directory (the figures go there)")
    check_output_path(plots)


def check_study_dir(out_dir: Path, overwrite: bool) -> None:
    """InputError unless the DRFL study may write into ``out_dir``: absent or empty, or
    (``overwrite``) holding only files the study writes, which it replaces."""
    from simfl.algorithms.drfl.experiment import TABLES
    from simfl.rundir import check_output_path

    check_output_path(out_dir)
    if not out_dir.exists():
        above = next((p for p in out_dir.parents if p.exists()), None)
        if above is not None and not above.is_dir():
            raise InputError(f"{out_dir}: {above} is a file, not a directory")
        return
    if not out_dir.is_dir():
        raise InputError(f"{out_dir}: exists and is not a directory")
    entries = sorted(out_dir.iterdir())
    if entries and not overwrite:
        raise InputError(f"{out_dir}: exists and is not empty (use --overwrite to replace a "
                         f"DRFL study's files there)")
    ours = {*(f"{table}.parquet" for table in TABLES), *DRFL_FIGURES}
    for entry in entries:
        if entry.name not in ours or entry.is_symlink() or not entry.is_file():
            raise InputError(f"{out_dir}: holds {entry.name!r}, which the DRFL study does not "
                             f"write; --overwrite replaces only the study's files (move it, "
                             f"or choose another --out)")


def _sweep(command: str, args: argparse.Namespace) -> int:
    from simfl.runs.sweep import load_sweep, status_lines

    sweep = load_sweep(args.sweep, args.results if command == "collect" else Path("results"))
    if command == "collect":
        return _collect(sweep)
    if args.status:
        for line in status_lines(sweep, args.archived):
            _say(line)
        return 0
    from simfl.runs.sweep import is_complete
    from simfl.runs.sweep.execute import BUSY, finished, run_shard

    again = f"continue with: python -m simfl sweep {args.sweep}"
    try:
        statuses = run_shard(sweep, args.shard, args.archived, args.backend, report=_say,
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
        _say(f"{sweep.name}: {busy} run{'s' * (busy > 1)} left to the other processes "
             f"working on them (python -m simfl sweep {args.sweep} --status)")
    return 0 if finished(statuses) else 1


def _collect(sweep: Sweep) -> int:
    from simfl.plots.study import plot_sweep
    from simfl.rundir import PLOTS_DIR, SWEEP_FIGURES
    from simfl.runs.sweep import collect, is_complete, lacking, other_scenarios

    check_plots_dir(sweep.out_dir)
    for line in other_scenarios(sweep, [run for run in sweep.runs if is_complete(run.run_dir)]):
        _say(line)
    for table, runs in lacking(sweep).items():
        _say(f"{sweep.out_dir / table}.parquet: not collected: {runs} complete runs have no "
             f"{table}.parquet (archived with bench/archive_runs.py --lean)")
    for table, rows in collect(sweep).items():
        _say(f"{sweep.out_dir / table}.parquet: {rows} rows")
    written = plot_sweep(sweep.out_dir, report=lambda line: print(line, file=sys.stderr))
    for path in written:
        _say(path)
    for name in SWEEP_FIGURES:  # a figure skipped now: collect's earlier copy would be stale
        if (stale := sweep.out_dir / PLOTS_DIR / name) not in written:
            stale.unlink(missing_ok=True)  # collect checked that it wrote it
    return 0


def _drfl(args: argparse.Namespace) -> int:
    from simfl.algorithms.drfl.experiment import (
        ExperimentConfig,
        load_experiment,
        run_experiment,
        summary_table,
    )
    from simfl.plots.drfl import write_figures

    cfg = load_experiment(args.study) if args.study else ExperimentConfig()
    stem = args.study.stem if args.study else "drfl_breast_cancer"
    out_dir = args.out or Path("results") / stem
    check_study_dir(out_dir, args.overwrite)
    tables = run_experiment(cfg, out_dir)
    for path in write_figures(tables, out_dir):
        _say(path)
    _say(summary_table(tables["accuracy"]))
    return 0

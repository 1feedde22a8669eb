"""Command line: arguments, the commands' checks of their paths, their output lines and
exit statuses; the work is in runs/ (run.py, sweep/, tune.py, ...), plots/, ...

    python -m simfl SCENARIO.toml [--out DIR] [--set KEY=VALUE ...] [--overwrite] [--quiet]
    python -m simfl COMMAND ...   (python -m simfl --help lists the commands)

Exit status: 0 done; 1 a run failed during its work (its manifest says why; it keeps
its last checkpoint); 2 bad input, found before any work and before anything is
written; 128 + N stopped by signal N (resumable).

This module dispatches a command to its module, where its parser is beside its code
(``run``: run and resume; ``plot``; ``trace``: trace and trace convert; ``trace_stats``:
trace stats and trace fit; ``sweep``: sweep, collect and tune; ``data``; ``drfl``), and
turns an error into its one line and exit status. ``common`` holds what they share (the
parser of one-line errors, argument types, output lines), ``checks`` their checks of
output paths.
"""

from __future__ import annotations

import difflib
import re
import sys
import warnings
from pathlib import Path

from simfl.cli import data, drfl, plot, run, sweep, trace
from simfl.cli.common import one_line, say
from simfl.errors import InputError

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
              f"({one_line(f'{type(e).__name__}: {e}')}); with torch they take about 1.2 "
              f"GiB of address space (ulimit -v) before any work", file=sys.stderr)
        return 2
    except MemoryError as e:
        print(f"simfl: error: out of memory ({one_line(f'{type(e).__name__}: {e}')}): more "
              f"than simfl's memory guard estimated; give the process more memory or make "
              f"the scenario smaller", file=sys.stderr)
        return 1


def _main(argv: list[str]) -> int:
    try:
        if not argv or argv[0] in ("-h", "--help"):
            say(_usage())
            return 0 if argv else 2
        command, rest = argv[0], argv[1:]
        if command == "plot":
            return plot.plot_command(plot.plot_parser().parse_args(rest))
        if command == "trace":
            return trace.trace_command(rest)
        if command == "resume":
            return run.resume_command(run.resume_parser().parse_args(rest))
        if command == "drfl":
            return drfl.drfl_command(drfl.drfl_parser().parse_args(rest))
        if command == "data":
            return data.data_command(data.data_parser().parse_args(rest))
        if command == "tune":
            return sweep.tune_command(sweep.tune_parser().parse_args(rest))
        if command in ("sweep", "collect"):
            return sweep.sweep_command(command, sweep.sweep_parser(command).parse_args(rest))
        if command == "run":
            argv = rest
        elif not command.startswith("-") and not _looks_like_scenario(command):
            near = difflib.get_close_matches(command, COMMANDS, n=1)
            hint = f" (did you mean '{near[0]}'?)" if near else ""
            raise InputError(f"unknown command or scenario file '{command}'{hint}; "
                             f"python -m simfl --help lists the commands")
        return run.run_command(run.run_parser().parse_args(argv))
    except InputError as e:
        print(f"simfl: error: {one_line(str(e))}", file=sys.stderr)
        return 2
    except OSError as e:  # an output path that no check foresaw (a run's own is a failed run)
        print(f"simfl: error: {one_line(os_error(e))}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # before a run began (a run's own stop: run._report)
        print("simfl: interrupted", file=sys.stderr)
        return 130


def os_error(e: OSError) -> str:
    """An OSError as ``path: reason`` (no errno number, no traceback)."""
    where = e.filename if e.filename is not None else ""
    return f"{where}: {e.strerror}" if where and e.strerror else str(e)


def _looks_like_scenario(arg: str) -> bool:
    """A scenario file: it exists, or its name says so (a missing one gets its own error)."""
    return arg.endswith(".toml") or Path(arg).exists()

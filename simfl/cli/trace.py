"""``trace``: a scenario's device availability written as a trace (online intervals),
and ``trace convert``, a FedScale or FLASH trace into simfl's format; ``trace stats``
and ``trace fit`` (simfl.cli.trace_stats) by their first word."""

from __future__ import annotations

import argparse
from pathlib import Path

from simfl.cli.checks import check_output_file
from simfl.cli.common import Parser, output_path, say
from simfl.cli.trace_stats import fit_command, fit_parser, stats_command, stats_parser


def trace_command(rest: list[str]) -> int:
    """``trace convert ...`` and ``trace stats ...`` by their first word; else the
    scenario form ``trace SCENARIO.toml --out ...`` (a scenario file named ``convert``
    or ``stats`` is given as ./convert)."""
    if rest[:1] == ["convert"]:
        return _trace_convert(_trace_convert_parser().parse_args(rest[1:]))
    if rest[:1] == ["stats"]:
        return stats_command(stats_parser().parse_args(rest[1:]))
    if rest[:1] == ["fit"]:
        return fit_command(fit_parser().parse_args(rest[1:]))
    return _trace(_trace_parser().parse_args(rest))


def _trace_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="python -m simfl trace",
        description="Write a scenario's device availability (online intervals) as a trace. "
                    "Also: trace convert (from FedScale or FLASH), trace stats and trace "
                    "fit; python -m simfl trace convert --help, ... stats --help, ... fit "
                    "--help.")
    parser.add_argument("scenario", type=Path, help="scenario TOML file")
    parser.add_argument("--out", type=output_path, required=True,
                        help="trace file (.parquet or .csv)")
    parser.add_argument("--overwrite", action="store_true", help="replace an existing file")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="override a scenario key")
    return parser


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
    say(f"{args.out}: {num_intervals} online intervals")
    return 0


def _trace_convert_parser() -> argparse.ArgumentParser:
    parser = Parser(
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
    say(f"{args.out}: {kept} devices (client_idx in the order of their ids; client_id "
        f"column), {trace.t_on_s.size} online intervals; of the {trace.num_source} clients, "
        f"left out {trace.num_invalid} invalid and {trace.num_source - kept - trace.num_invalid} "
        "never online")
    return 0

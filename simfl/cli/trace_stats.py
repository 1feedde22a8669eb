"""``trace stats`` and ``trace fit``: a trace's or a scenario's device availability
summarised (online share by hour and by weekday and weekend, quantiles of sessions, gaps
and device shares) or fitted by the habits model (simfl.population.fit) and checked
against it. A scenario's devices are drawn as a run draws them, their number counted in
its data without loading it where that can be done."""

from __future__ import annotations

import argparse
import math
import os
import sys
from dataclasses import dataclass, fields
from pathlib import Path
from typing import TYPE_CHECKING

from simfl.cli.checks import check_output_file
from simfl.cli.common import Parser, one_line, positive_int, say
from simfl.errors import InputError

if TYPE_CHECKING:
    from simfl.population.build import Population
    from simfl.population.trace_stats import AvailabilityStats
    from simfl.scenario import Scenario

# Training devices ``trace stats`` and ``trace fit`` assume for a scenario whose data is
# not at hand to count them (said so in their output; --num-devices sets the number).
ASSUMED_NUM_DEVICES = 1000


def _trace_source_parser(command: str, description: str) -> argparse.ArgumentParser:
    """A ``trace`` subcommand that reads a trace or a scenario's draws."""
    parser = Parser(prog=f"python -m simfl trace {command}", description=description)
    parser.add_argument("source", type=Path, help="trace (.parquet or .csv) or scenario (.toml)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="override a scenario key")
    parser.add_argument("--num-devices", type=positive_int, metavar="N",
                        help="a trace's device count, the never-online ones included "
                             "(default: its recorded client count, else its highest "
                             "client_idx + 1); a scenario's training "
                             "devices, instead of counting them in its data (default: "
                             f"counted; {ASSUMED_NUM_DEVICES}, said to be assumed, where the "
                             "data is not at hand)")
    return parser


def stats_parser() -> argparse.ArgumentParser:
    parser = _trace_source_parser(
        "stats", "Availability statistics of a trace or of a scenario's model: online share "
                 "by hour of the day and on weekdays and weekends, quantiles of device "
                 "online share, session and gap lengths, devices online per day.")
    parser.add_argument("--figure", type=Path, metavar="FILE",
                        help="also draw the online share by hour (weekdays, weekend) and "
                             "the devices' online shares to FILE (.png, .pdf, .svg)")
    parser.add_argument("--overwrite", action="store_true", help="replace an existing --figure")
    return parser


def fit_parser() -> argparse.ArgumentParser:
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


def stats_command(args: argparse.Namespace) -> int:
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
        say(line)
    if args.figure is not None:
        from simfl.plots import save_figure
        from simfl.plots.population import plot_population

        clock = "local" if stats.local_time else "UTC"
        save_figure(plot_population(stats.hourly, stats.device_share,
                                    f"{args.source.name}: {stats.num_devices} devices over "
                                    f"{stats.end_s / 86400:.3g} days ({clock} hours)"),
                    args.figure)
        say(f"wrote {args.figure}")
    return 0


def fit_command(args: argparse.Namespace) -> int:
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
    say(text.rstrip())
    for line in [*notes, *warned]:
        print(f"simfl: trace fit: {line}", file=sys.stderr)
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
    covariate (regions assigned by it, or a habit rank-correlated with it, for a mode
    that reads the habits table), or ""."""
    from simfl.plugins import AVAILABILITY

    population = scenario.population
    if population.region_assignment == "covariate":
        return "population.region_assignment = 'covariate'"
    mode = AVAILABILITY.lookup(population.availability.mode, "population.availability.mode")
    if "habits" in mode.reads:
        habits = population.availability.habits
        for field in fields(habits):
            value = getattr(habits, field.name)
            if field.name.endswith("_correlation") and value != 0:
                return f"population.availability.habits.{field.name} = {value!r}"
    return ""


def _count_devices(scenario: Scenario, given: int | None) -> tuple[int, str]:
    """The scenario's training devices and, unless counted in its data, where the number
    came from: ``--num-devices``, else the data's count (its data set's ``count_train``
    hook where it has one, FEMNIST's: its writer column, no image read; any other data
    set: loaded as a run loads it), else, where the data is not at hand (the count of a
    data set read from files fails with neither SIMFL_DATA_DIR nor data.path set),
    ASSUMED_NUM_DEVICES."""
    if given is not None:
        return given, "from --num-devices, not counted in the data"
    from simfl.data import load_data
    from simfl.plugins import DATASETS
    from simfl.rng import Streams
    from simfl.runs.memory import check_memory, population_only

    data = scenario.data
    dataset = DATASETS.lookup(data.dataset, "data.dataset")
    count = dataset.hook("count_train", "data.dataset")
    try:
        if count is not None:
            return count(data, Streams(scenario.seed)), ""
        with population_only():
            check_memory(scenario)
        return load_data(data, Streams(scenario.seed)).train.num_clients, ""
    except InputError as e:
        # data made from its keys (a sizes hook: synthetic) is never missing: its errors
        # stand, as do those of a data set whose files are said to be somewhere
        if dataset.has_hook("sizes") or data.path or os.environ.get("SIMFL_DATA_DIR"):
            raise
        return ASSUMED_NUM_DEVICES, (
            f"assumed: the data is not at hand to count its training clients "
            f"({one_line(str(e)).split(';')[0]}); --num-devices N sets the number")


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


def _number(value: float | None) -> str:
    return "-" if value is None else f"{value:.4g}"

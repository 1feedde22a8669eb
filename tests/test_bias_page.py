"""The estimation study's evidence pages (docs/bias/*.md) against the kept runs.

Every generated table is a block ``<!-- name: begin -->`` … ``<!-- name: end -->`` (the
convention of tests/test_dose_page.py) and must be what its command (``python -m
simfl.study.<tool>``) prints from the kept runs in docs/runs, collected as
tests/kept_runs.py does (the page's command names ``docs/runs/<sweep>``; here that folder
is the collected one). Every interval the prose of the habits page quotes is one its
tables print, and the figures of the tail page's prose that no table holds are recomputed
from the runs."""

from __future__ import annotations

import contextlib
import importlib
import io
import re
from functools import cache
from pathlib import Path
from typing import NamedTuple

import polars as pl
import pytest

from simfl.study.drivers_table import per_run
from tests.kept_runs import collected

ROOT = Path(__file__).parents[1]
PAGES = ROOT / "docs" / "bias"
EVIDENCE = ("definitions", "habits", "decomposition", "estimators", "cells", "ipw",
            "recency", "tail")
RUNS = "{runs}"  # in a block's arguments: the collected folder of its sweep


class Block(NamedTuple):
    """A generated table: its page, the sweep whose kept runs it reads (None: none), the
    simfl.study tool and its arguments, and whether only the output's last table is shown."""

    page: str
    sweep: str | None
    script: str
    args: tuple[str, ...]
    last_table: bool = False


def _study(page: str, sweep: str, *args: str) -> Block:
    return Block(page, f"scenarios/study/{sweep}.sweep.toml", "bias_table", (RUNS, *args))


PAIRS = ("--paired", "poststrat,cohort_exact", "--paired", "ipw_days,cohort_exact",
         "--paired", "poststrat_history,cohort_exact", "--paired", "ipw_known,cohort_exact",
         "--paired", "ipw_days,ipw_known", "--paired", "ipw_days,ipw")
ALL = ("--estimators", "cohort_exact,ipw,ipw_days,poststrat,tracking")
VERDICTS = ("--margin", "0.01")
PAGE_FILES = tuple(f"docs/bias/{name}.md" for name in EVIDENCE)
BLOCKS: dict[str, Block] = {
    "habits loss reports": _study("habits", "habits_week", "--cohort-sizes"),
    "habits terms": _study("habits", "habits_week", "--prescribed", "--digits", "4", "--only",
                           "clients_per_round=20", "--only", "theta=0.5"),
    "habits sampling": _study("habits", "habits_week", "--prescribed", "--pivot",
                              "sampling_bias", "--across", "theta", "--estimators",
                              "cohort_exact", "--digits", "4", *VERDICTS),
    "habits availability": _study("habits", "habits_week", "--prescribed", "--pivot",
                                  "availability_bias", "--digits", "4", *VERDICTS),
    "habits paired": _study("habits", "habits_week", "--prescribed", "--pivot",
                            "availability_bias", "--digits", "4", *VERDICTS, *PAIRS),
    "availability by theta": _study("decomposition", "bias_week", "--pivot",
                                    "availability_bias", "--across", "theta", "--estimators",
                                    "cohort_exact", *VERDICTS),
    "sampling by theta": _study("decomposition", "bias_week", "--pivot", "sampling_bias",
                                "--across", "theta", "--estimators", "cohort_exact",
                                *VERDICTS),
    "conformity by theta": _study("decomposition", "bias_week", "--pivot", "conformity_gap",
                                  "--across", "theta", "--estimators", "cohort_exact"),
    "shakespeare": _study("decomposition", "shakespeare"),
    "online per estimator": _study("estimators", "bias_week", "--pivot", "online", *ALL),
    "prescribed per estimator": _study("estimators", "bias_week", "--prescribed", "--pivot",
                                       "availability_bias", "--estimators",
                                       "cohort_exact,ipw,ipw_days,poststrat", *VERDICTS),
    "cohort_exact cells": _study("cells", "bias_week", "--estimators", "cohort_exact"),
    "bias cells": _study("cells", "bias_week", "--pivot", "bias", *ALL),
    "conformity cells": _study("cells", "bias_week", "--pivot", "conformity_gap", *ALL),
    "paired ipw cells": _study("cells", "bias_week", "--paired", "ipw_days,ipw", "--paired",
                               "ipw,poststrat", "--paired", "ipw_days,poststrat", "--digits",
                               "4", *VERDICTS),
    "paired cohort_exact cells": _study("cells", "bias_week", "--paired", "ipw,cohort_exact",
                                        "--paired", "ipw_days,cohort_exact", "--paired",
                                        "poststrat,cohort_exact", *VERDICTS),
    "ipw oracle": _study("ipw", "ipw_oracle", "--online"),
    "ipw oracle paired": _study("ipw", "ipw_oracle", "--paired", "ipw,cohort_exact",
                                "--paired", "ipw_known,poststrat", "--digits", "4",
                                *VERDICTS),
    "ipw days": _study("ipw", "ipw_days", "--online"),
    "ipw days paired": _study("ipw", "ipw_days", "--paired", "ipw_days,ipw", "--paired",
                              "ipw,poststrat", "--paired", "ipw_days,poststrat", "--paired",
                              "ipw_known,poststrat", "--digits", "4", *VERDICTS),
    "ipw days by day": _study("ipw", "ipw_days", "--paired", "ipw_days,ipw", "--paired",
                              "ipw,poststrat", "--digits", "4", *VERDICTS, "--by-day"),
    **{f"habits recency seeds {first}-{last}": Block(
        "recency", None, "bias_claims",
        ("seeds", str(ROOT / "docs" / "runs" / "recency" / "output.md"), "--table", "-1",
         "--seeds", *map(str, range(first, last + 1)), "--columns", "A", "exposed − fresh",
         "fresh − control")) for first, last in ((0, 2), (3, 9), (0, 9))},
    "habits drivers": Block("tail", "scenarios/study/habits_drivers.sweep.toml",
                            "drivers_table", (RUNS, "--versus", "cohort_exact")),
    "habits drivers paired": Block(
        "tail", None, "paper_table",
        (str(ROOT / "scenarios" / "study" / "habits_drivers.sweep.toml"), "--results",
         str(ROOT / "docs" / "runs"), "--versus", "cohort_exact", "--seeds-for", "0.5")),
    "habits drivers bias": _study("tail", "habits_drivers", "--digits", "4"),
    "small drivers": Block("tail", "scenarios/study/drivers.sweep.toml", "drivers_table",
                           (RUNS, "--versus", "fedavg")),
    "small drivers versus cohort_exact": Block(
        "tail", "scenarios/study/drivers.sweep.toml", "drivers_table",
        (RUNS, "--versus", "cohort_exact"), last_table=True),
    "small drivers bias": _study("tail", "drivers"),
    "k contrast": Block("limits", "scenarios/study/habits_week.sweep.toml", "bias_claims",
                        ("contrast", RUNS)),
    "k contrast theta 0.8": Block("limits", "scenarios/study/habits_week.sweep.toml",
                                  "bias_claims", ("contrast", RUNS, "--theta", "0.8")),
    "k contrast ipw_days": Block("limits", "scenarios/study/habits_week.sweep.toml",
                                 "bias_claims", ("contrast", RUNS, "--pair",
                                                 "ipw_days,cohort_exact")),
    "k contrast poststrat_history": Block(
        "limits", "scenarios/study/habits_week.sweep.toml", "bias_claims",
        ("contrast", RUNS, "--pair", "poststrat_history,cohort_exact")),
    "multiplicity habits": Block("limits", None, "bias_claims",
                                 ("multiplicity", str(ROOT / "docs" / "bias" / "habits.md"))),
    "multiplicity all": Block("limits", None, "bias_claims",
                              ("multiplicity", *(str(ROOT / p) for p in PAGE_FILES))),
}


@cache
def printed(script: str, *args: str) -> str:
    """What ``python -m simfl.study.<script> ARGS`` prints, run here."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert importlib.import_module(f"simfl.study.{script}").main(list(args)) == 0
    return out.getvalue()


def generated(block: Block) -> str:
    """The block's text as its command prints it from the kept runs."""
    runs = str(collected(block.sweep)) if block.sweep else ""
    text = printed(block.script, *(runs if a == RUNS else a for a in block.args)).strip()
    if block.last_table:
        text = text.split("\n\n")[-1]
    return text


def page_text(page: str) -> str:
    return (PAGES / f"{page}.md").read_text()


def block_text(page: str, name: str) -> str:
    found = re.search(rf"<!-- {re.escape(name)}: begin -->\n(.*?)\n?<!-- {re.escape(name)}: "
                      r"end -->", page_text(page), re.S)
    assert found is not None, f"docs/bias/{page}.md has no block {name!r}"
    return found.group(1)


@pytest.mark.parametrize("name", sorted(BLOCKS))
def test_each_generated_table_is_what_its_command_prints(name: str) -> None:
    block = BLOCKS[name]
    assert block_text(block.page, name) == generated(block)


def test_every_block_on_the_pages_is_checked() -> None:
    """No page carries a block this module does not recompute (the ipw_rates block is
    tests/test_ipw_rates.py's: its command simulates seven days)."""
    for page in (*EVIDENCE, "limits"):
        names = set(re.findall(r"<!-- (.+?): begin -->", page_text(page)))
        ours = {name for name, block in BLOCKS.items() if block.page == page}
        assert names - {"ipw rates"} == ours, page


INTERVAL = re.compile(r"[-+−]\d*\.\d+ ± \d*\.\d+")


def prose(page: str) -> str:
    """The page without its blocks, command lines and tables: what its sentences say."""
    text = re.sub(r"<!-- (.+?): begin -->.*?<!-- \1: end -->", "", page_text(page), flags=re.S)
    return "\n".join(line for line in text.splitlines()
                     if not line.startswith(("|", "    ")))


def test_every_interval_the_habits_prose_quotes_is_in_its_tables() -> None:
    """Each "±" figure of habits.md's sentences (− read as -) is a cell of its blocks."""
    cells = "\n".join(generated(b) for b in BLOCKS.values() if b.page == "habits")
    quoted = {m.replace("−", "-") for m in INTERVAL.findall(prose("habits"))}
    assert len(quoted) > 40
    assert sorted(q for q in quoted if q not in cells) == []


def test_the_habits_verdicts_in_prose_are_the_tables() -> None:
    """Where habits.md's prose gives an interval and then a verdict in brackets, the
    table prints that verdict after that interval."""
    cells = "\n".join(generated(b) for b in BLOCKS.values() if b.page == "habits")
    text = " ".join(prose("habits").replace("−", "-").split())
    pairs = re.findall(r"([-+]\d*\.\d+ ± \d*\.\d+) \((different and equivalent within ±0\.01|"
                       r"different|equivalent within ±0\.01|not detected)", text)
    assert len(pairs) > 10
    for interval, verdict in pairs:
        printed_verdicts = re.findall(re.escape(interval) + r" \(([^)]*)\)", cells)
        assert printed_verdicts, interval
        assert any(v.startswith(verdict) for v in printed_verdicts), (interval, verdict)


def tail_prose() -> str:
    return " ".join(prose("tail").replace("−", "-").split())


def cited(*parts: str) -> None:
    text = "".join(parts)
    assert text in tail_prose(), f"not in docs/bias/tail.md: {text!r}"


def test_the_tail_page_s_threshold_figures_are_the_kept_runs() -> None:
    """The driving estimates' bias and kept weight (bias_table), and the traffic and
    devices ipw_days saves (drivers_table's per-run figures)."""
    folder = collected("scenarios/study/habits_drivers.sweep.toml")
    out = printed("bias_table", str(folder), "--digits", "5")
    header, *rows = [[c.strip() for c in line.strip("|").split("|")]
                     for line in out.splitlines() if line.startswith("| ")]
    by_driver = {row[1]: dict(zip(header, row, strict=True)) for row in rows}
    theta = pl.read_parquet(folder / "bias.parquet", columns=["theta"])["theta"].unique()
    assert theta.to_list() == [0.5]
    value = {e: {c: float(by_driver[e][c].split(" ± ")[0]) for c in ("bias", "conformity − θ")}
             for e in ("cohort_exact", "ipw_days")}
    cited(f"the driving estimate's bias is {value['cohort_exact']['bias']:+.3f} nats with "
          f"`cohort_exact` (different) and {value['ipw_days']['bias']:+.3f} with `ipw_days` "
          "(not detected)")
    kept = {e: 100 * (0.5 + value[e]["conformity − θ"]) for e in value}
    cited(f"the filter keeps {kept['cohort_exact']:.1f} % and {kept['ipw_days']:.1f} % of "
          "the population's weight against the 50 % θ asks")
    cited(f"Why a {kept['cohort_exact'] - kept['ipw_days']:.1f}-point smaller over-inclusion")
    runs = per_run(folder)
    gb = {v: float(runs.filter(pl.col("variant") == v)["gb"].mean())
          for v in ("cohort_exact", "ipw_days")}
    aggregated = {v: float(runs.filter(pl.col("variant") == v)["aggregated"].mean())
                  for v in ("cohort_exact", "ipw_days")}
    less = gb["cohort_exact"] - gb["ipw_days"]
    cited(f"it keeps {aggregated['cohort_exact'] - aggregated['ipw_days']:.1f} fewer devices "
          f"a round and sends {less:.2f} GB less ({100 * less / gb['cohort_exact']:.1f} % "
          "less)")


def test_the_tail_page_s_paired_figures_are_paper_table_s() -> None:
    """ipw_days and FedAvg minus cohort_exact (paper_table's paired table, as the block
    above them prints it): p90 and mean error with their intervals, p, the seeds for 0.5
    points, and Δ-FL minus FedAvg (the FedAvg row's signs turned)."""
    rows = {}
    for line in block_text("tail", "habits drivers paired").splitlines():
        cells = [c.strip() for c in line.strip("|").split("|")]
        if line.startswith("| ") and len(cells) == 7:
            rows[cells[0]] = cells
    ipw = rows["Δ-FL θ = 0.5, batch 32, estimator.name = ipw_days"]
    fedavg = rows["FedAvg, batch 32"]
    cited(f"in final p90 is {ipw[2].replace('−', '-')} (p = {ipw[3].split(' (')[0]}), and "
          f"{ipw[4]} in mean error")
    cited(f"would find a 0.5-point difference with {ipw[6]} seeds at 80 % power")
    p90, lo90, hi90 = map(float, re.findall(r"[-+][\d.]+", fedavg[2]))
    diff, lo, hi = map(float, re.findall(r"[-+][\d.]+", fedavg[4]))
    cited(f"lowers the tail relative to FedAvg by {p90:.2f} points [{lo90:.2f}, {hi90:.2f}] "
          f"at {-diff:+.2f} [{-hi:.2f}, {-lo:.2f}] points of mean error")


BRACKETS = re.compile(r"\[[-+−]\d*\.\d+, [-+−]\d*\.\d+\]")


def test_every_interval_the_limits_prose_quotes_is_printed_by_a_block() -> None:
    """limits.md's sentences quote intervals of its own blocks and of recency.md's."""
    cells = "\n".join(generated(b) for b in BLOCKS.values() if b.page in ("limits", "recency"))
    text = prose("limits").replace("−", "-")
    quoted = set(INTERVAL.findall(text)) | set(BRACKETS.findall(text))
    assert len(quoted) > 10
    assert sorted(q for q in quoted if q not in cells) == []


def test_the_family_wise_reading_is_the_blocks() -> None:
    """The counts and widening factors the limits prose gives are those of its blocks."""
    from scipy import stats

    text = " ".join(prose("limits").split())
    sizes = {}
    for name in ("multiplicity habits", "multiplicity all"):
        lines = generated(BLOCKS[name]).splitlines()
        sizes[name] = int(lines[0].split()[0])
        rows = [line for line in lines if line.startswith("| ") and not line.startswith(
            "| claim")]
        if name == "multiplicity habits":
            kept = sum(row.rstrip(" |").endswith("| different") for row in rows)
            assert f"Holm keeps {kept} of its {len(rows)} headline claims different" in text
    for name, where in (("multiplicity habits", "over the habits page's"),
                        ("multiplicity all", "over the")):
        m = sizes[name]
        factor = stats.t.ppf(1 - 0.025 / m, 4) / stats.t.ppf(0.975, 4)
        assert f"{factor:.1f}-fold {where} {m:,}" in text, (name, factor, m)

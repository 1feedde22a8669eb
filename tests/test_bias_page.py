"""docs/bias.md's third edition (availability that differs device by device) against the
runs it cites: every row of its tables and every figure its prose takes from the kept
runs of docs/runs/habits_week and docs/runs/habits_drivers is what the repository's
scripts print from them (bench/bias_table.py, bench/drivers_table.py,
bench/paper_table.py, run in this process on the section's command lines)."""

from __future__ import annotations

import contextlib
import io
import math
import re
import sys
from functools import cache
from pathlib import Path
from unittest import mock

import polars as pl
import pytest

from tests.bench_scripts import bench_module
from tests.kept_runs import collected

ROOT = Path(__file__).parents[1]
PAGE = ROOT / "docs" / "bias.md"
FIRST = "## Third edition: availability that differs device by device"
NEXT = "## Edition two: availability tied to the data through regions"
PAIRS = ("--paired", "poststrat,cohort_exact", "--paired", "poststrat_history,poststrat",
         "--paired", "ipw_days,poststrat", "--paired", "ipw_days,ipw",
         "--paired", "ipw_days,cohort_exact")  # the section's paired command, K = 20
THETA_PAIRS = ("--paired", "poststrat,cohort_exact", "--paired", "ipw_days,cohort_exact",
               "--paired", "poststrat_history,cohort_exact", "--paired", "ipw_known,cohort_exact")



def week() -> Path:
    """docs/runs/habits_week's kept runs, collected (tests/kept_runs.py)."""
    return collected("scenarios/study/habits_week.sweep.toml")


def drivers() -> Path:
    """docs/runs/habits_drivers's kept runs, collected (tests/kept_runs.py)."""
    return collected("scenarios/study/habits_drivers.sweep.toml")


@cache
def section_lines() -> tuple[str, ...]:
    """The section's lines, a number's typeset minus (−) written as the scripts print it."""
    lines = re.sub(r"−(?=\d)", "-", PAGE.read_text()).splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(FIRST))
    end = lines.index(NEXT)
    return tuple(lines[start:end])


@cache
def prose() -> str:
    """The section as one line (its prose's line breaks are spaces)."""
    return " ".join(" ".join(section_lines()).split())


def cells(line: str) -> list[str]:
    return [cell.strip() for cell in line.strip().strip("|").split("|")]


def page_table(header_start: str) -> tuple[list[str], list[list[str]]]:
    """The header and data rows of the section's table whose header begins so."""
    lines = section_lines()
    start = next(i for i, line in enumerate(lines) if line.startswith(header_start))
    rows = []
    for line in lines[start + 2:]:
        if not line.startswith("| "):
            break
        rows.append(cells(line))
    return cells(lines[start]), rows


@cache
def printed(script: str, *args: str) -> str:
    """What ``python bench/<script>.py ARGS`` prints, run here (bench/ on the path)."""
    module = bench_module(script)
    out = io.StringIO()
    with mock.patch.object(sys, "argv", [f"{script}.py", *args]), \
            contextlib.redirect_stdout(out):
        module.main()
    return out.getvalue()


def table(text: str, first: int = 0) -> tuple[list[str], list[list[str]]]:
    """The header and data rows of the ``first``-th markdown table in ``text``."""
    tables: list[list[list[str]]] = [[]]
    for line in text.splitlines():
        if line.startswith("| "):
            tables[-1].append(cells(line))
        elif not line.startswith("|---") and tables[-1]:
            tables.append([])
    header, *rows = [t for t in tables if t][first]
    return header, rows


def terms(digits: int = 3) -> dict[tuple[str, ...], dict[str, str]]:
    """``bias_table.py habits_week --prescribed --online``: (variant, K, θ, estimator) ->
    column -> cell."""
    header, rows = table(printed("bias_table", str(week()), "--prescribed", "--online",
                                 "--digits", str(digits)))
    return {tuple(row[:4]): dict(zip(header, row, strict=True)) for row in rows}


def paired(pairs: tuple[str, ...], digits: int = 3) -> dict[tuple[str, ...], dict[str, str]]:
    """``bias_table.py habits_week --prescribed --pivot availability_bias PAIRS``:
    (variant, K, θ) -> "A − B" -> cell."""
    header, rows = table(printed("bias_table", str(week()), "--prescribed", "--pivot",
                                 "availability_bias", *pairs, "--digits", str(digits)))
    return {tuple(row[:3]): dict(zip(header, row, strict=True)) for row in rows}


def across_theta() -> dict[tuple[str, ...], dict[str, str]]:
    """``bias_table.py habits_week --prescribed --pivot availability_bias --across theta``:
    (variant, K, estimator) -> "theta θ" -> cell."""
    header, rows = table(printed("bias_table", str(week()), "--prescribed", "--pivot",
                                 "availability_bias", "--across", "theta"))
    return {tuple(row[:3]): dict(zip(header, row, strict=True)) for row in rows}


def mean(cell: str) -> str:
    return cell.split(" ± ")[0]


def value(cell: str) -> float:
    return float(mean(cell))


def cited(*parts: str) -> None:
    """The prose holds these parts joined (the page's − as -): a figure with the words
    around it that say which figure it is."""
    text = "".join(parts)
    assert text in prose(), f"not in the section of docs/bias.md: {text!r}"


PATTERNS = ("region_only", "habits_none", "habits_moderate", "habits_strong")


def test_the_terms_table_is_the_kept_runs_at_k20_theta_05() -> None:
    """Each row of the section's table of terms (``--prescribed --online --digits 4``,
    K = 20, θ = 0.5; the page leaves out the sampling and E_online columns) is printed,
    and the sampling term the prose gives per pattern is the one all rows of it share."""
    printed_rows = terms(4)
    header, rows = page_table("| pattern | estimator | bias |")
    assert header == ["pattern", "estimator", "bias", "availability", "selection",
                      "conformity − θ"]
    want = [[variant, estimator, *(row[c] for c in ("bias", "availability", "selection",
                                                    "conformity − θ"))]
            for (variant, k, theta, estimator), row in printed_rows.items()
            if (k, theta) == ("20", "0.5")]
    assert len(want) == 24 and all(
        row["seeds"] == "5" for key, row in printed_rows.items() if key[1:3] == ("20", "0.5"))
    assert sorted(rows) == sorted(want)
    assert [row[:2] for row in rows] == [[p, e] for p in PATTERNS for e in (
        "cohort_exact", "poststrat", "poststrat_history", "ipw", "ipw_days", "ipw_known")]
    sampling = {p: {row["sampling"] for key, row in printed_rows.items()
                    if key[:3] == (p, "20", "0.5")} for p in PATTERNS}
    assert all(len(cell) == 1 for cell in sampling.values())  # cohort_exact's for all
    (region,), (none,), (moderate,), (strong,) = (sampling[p] for p in PATTERNS)
    cited(f"The sampling term (the same for every estimator) is {region} (region_only), "
          f"{none} (none), {moderate} (moderate) and {strong} (strong).")
    three = sorted(float(row["sampling"].split(" ± ")[0]) for key, row in terms(6).items()
                   if key[1:] == ("20", "0.5", "cohort_exact"))  # unrounded: round once
    cited(f"what the minibatch objective asks for (here {three[0]:+.3f} to {three[-1]:+.3f} "
          "nats)")
    # "The selection term's interval contains 0 in every row."
    for row in want:
        centre, half = map(float, row[4].split(" ± "))
        assert abs(centre) <= half, row
    cited("The selection term's interval contains 0 in every row.")


def test_the_paired_table_is_the_kept_runs_at_k20_theta_05() -> None:
    """The section's paired command prints the page's paired table in its K = 20,
    θ = 0.5 rows, header included."""
    out = printed("bias_table", str(week()), "--prescribed", "--pivot", "availability_bias",
                  *PAIRS, "--digits", "4")
    header, rows = table(out)
    assert header[:4] == ["variant", "clients_per_round", "theta", "seeds"]
    want = [[row[0], *row[3:]] for row in rows if row[1:3] == ["20", "0.5"]]
    page_header, page_rows = page_table("| variant | seeds | poststrat − cohort_exact |")
    assert page_header == [header[0], *header[3:]]
    assert page_rows == want and len(want) == 4


def test_the_answer_and_the_reading_of_the_paired_table() -> None:
    """The figures of the section's opening answer and of its reading of the paired
    table (K = 20, θ = 0.5; three decimals where the page gives three)."""
    k20 = {key[0]: row for key, row in paired(PAIRS).items() if key[1:] == ("20", "0.5")}
    k20_4 = {key[0]: row for key, row in paired(PAIRS, 4).items() if key[1:] == ("20", "0.5")}
    rows = {(key[0], key[3]): row for key, row in terms().items() if key[1:3] == ("20", "0.5")}

    def availability(pattern: str, estimator: str) -> str:
        return rows[pattern, estimator]["availability"]

    strong, control = k20["habits_strong"], k20["region_only"]
    cited(f"({mean(availability('habits_strong', 'cohort_exact'))} nats against "
          f"{mean(availability('region_only', 'cohort_exact'))}, K = 20, θ = 0.5)")
    cited(f"(paired against the uncorrected cohort: "
          f"{k20_4['habits_strong']['poststrat − cohort_exact']})")
    cited(f"({availability('habits_strong', 'ipw_days')} left; "
          f"{strong['ipw_days − cohort_exact']} nearer the prescribed threshold than "
          "`cohort_exact`, paired)")
    cited(f"removes only a fifth ({availability('habits_strong', 'poststrat_history')})")
    cited(f"removes all of it ({availability('habits_strong', 'ipw_known')})")
    cited(f"post-stratification by region moves the threshold "
          f"{control['poststrat − cohort_exact']} towards the prescribed one and `ipw_days` "
          f"does a little less ({control['ipw_days − poststrat']} against it)")
    moderate = k20["habits_moderate"]
    cited(f"`ipw_days` by {moderate['ipw_days − cohort_exact']} (moderate) and "
          f"{strong['ipw_days − cohort_exact']} (strong), and `poststrat_history` by "
          f"{moderate['poststrat_history − poststrat']} and "
          f"{strong['poststrat_history − poststrat']} beyond post-stratification")
    # "within X": the largest |figure| rounded up to three decimals (the 4-digit cells)
    apart = max(abs(value(row["ipw_days − ipw"])) for row in k20_4.values())
    cited(f"are within {math.ceil(apart * 1000 - 1e-9) / 1000:.3f} of each other")
    rows4 = {key[3]: row for key, row in terms(4).items() if key[:3] == ("habits_none", "20",
                                                                          "0.5")}
    none = max(abs(value(row["availability"])) for row in rows4.values())
    cited(f"every estimator's availability term is within "
          f"{math.ceil(none * 1000 - 1e-9) / 1000:.3f} of 0")


def test_the_k100_paragraph_is_the_kept_runs() -> None:
    """``--prescribed`` and the three pairs at K = 100, θ = 0.5."""
    pairs = paired(THETA_PAIRS[:6])
    assert list(next(iter(pairs.values())))[4:] == [
        "poststrat − cohort_exact", "ipw_days − cohort_exact", "poststrat_history − cohort_exact"]
    strong, control = pairs["habits_strong", "100", "0.5"], pairs["region_only", "100", "0.5"]
    rows = terms()

    def term(pattern: str, estimator: str, column: str = "availability", k: str = "100") -> str:
        return rows[pattern, k, "0.5", estimator][column]

    cited(f"the cohort's availability term is the same as at K = 20 "
          f"({term('habits_strong', 'cohort_exact')}) and the sampling term smaller "
          f"({term('habits_strong', 'cohort_exact', 'sampling')} against "
          f"{term('habits_strong', 'cohort_exact', 'sampling', '20')})")
    cited(f"removes none of it (paired {strong['poststrat − cohort_exact']})")
    cited(f"(paired {control['poststrat − cohort_exact']}; "
          f"{term('region_only', 'poststrat')} left)")
    cited(f"({term('habits_strong', 'ipw_days')} left, paired "
          f"{strong['ipw_days − cohort_exact']})")
    cited(f"({term('habits_strong', 'poststrat_history')} left, paired "
          f"{strong['poststrat_history − cohort_exact']})")


@pytest.mark.parametrize("k", ["20", "100"])
def test_the_theta_tables_are_the_kept_runs(k: str) -> None:
    """Each row of the θ table at K (habits_strong): `cohort_exact`'s availability term
    (``--across theta``) and the four paired columns."""
    pairs, terms_by_theta = paired(THETA_PAIRS), across_theta()
    headers = [i for i, line in enumerate(section_lines())
               if line.startswith("| θ | `cohort_exact`'s availability term |")]
    assert len(headers) == 2
    start = headers[["20", "100"].index(k)]
    header = cells(section_lines()[start])
    rows = [cells(line) for line in section_lines()[start + 2:start + 5]]
    names = header[2:]
    assert names == list(pairs["habits_strong", k, "0.5"])[4:]
    want = [[theta, terms_by_theta["habits_strong", k, "cohort_exact"][f"theta {theta}"],
             *(pairs["habits_strong", k, theta][name] for name in names)]
            for theta in ("0.8", "0.5", "0.1")]
    assert rows == want
    assert all(pairs["habits_strong", k, theta]["seeds"] == "5" for theta in ("0.8", "0.5",
                                                                               "0.1"))


def test_the_theta_paragraphs_are_the_kept_runs() -> None:
    pairs, by_theta, rows = paired(THETA_PAIRS), across_theta(), terms()

    def term(pattern: str, k: str, estimator: str, theta: str) -> str:
        return by_theta[pattern, k, estimator][f"theta {theta}"]

    def pair(pattern: str, k: str, theta: str, name: str) -> str:
        return pairs[pattern, k, theta][f"{name} − cohort_exact"]

    # K = 20
    cited(f"`ipw_days` removes all of the term "
          f"({term('habits_strong', '20', 'ipw_days', '0.8')} left)")
    cited(f"(`ipw_known` leaves {term('habits_strong', '20', 'ipw_known', '0.1')})")
    cited(f"without one (`habits_none`) `cohort_exact`'s is "
          f"{term('habits_none', '20', 'cohort_exact', '0.1')} "
          f"({term('habits_none', '20', 'cohort_exact', '0.8')} at θ = 0.8, "
          f"{term('habits_none', '20', 'cohort_exact', '0.5')} at 0.5)")
    for cell in paired(THETA_PAIRS, 4)["habits_none", "20", "0.1"].values():
        if " ± " in cell:  # "paired, every interval holds 0"
            centre, half = map(float, cell.split(" ± "))
            assert abs(centre) <= half, cell
    cited("and again no estimator moves it (paired, every interval holds 0)")
    cited(f"removes a third at θ = 0.1 ({pair('region_only', '20', '0.1', 'poststrat')} of "
          f"{term('region_only', '20', 'cohort_exact', '0.1')}) against nearly all at θ = 0.8 "
          f"and 0.5 ({pair('region_only', '20', '0.8', 'poststrat')}, "
          f"{pair('region_only', '20', '0.5', 'poststrat')})")
    for theta in ("0.8", "0.1"):
        sampling = [value(rows[p, "20", theta, "cohort_exact"]["sampling"]) for p in PATTERNS]
        cited(f"{min(sampling):+.3f} to {max(sampling):+.3f} at θ = {theta}")
    # K = 100
    cited(f"At θ = 0.8 `ipw_days` leaves {term('habits_strong', '100', 'ipw_days', '0.8')} "
          f"(it removed all at K = 20), while the oracle still removes all "
          f"({term('habits_strong', '100', 'ipw_known', '0.8')} left)")
    cited(f"({pair('habits_strong', '100', '0.1', 'ipw_days')}, "
          f"{term('habits_strong', '100', 'ipw_days', '0.1')} left)")
    cited(f"({pair('habits_strong', '100', '0.1', 'ipw_known')}; "
          f"{term('habits_strong', '100', 'ipw_known', '0.1')} left)")
    cited(f"(`habits_none`: {term('habits_none', '100', 'cohort_exact', '0.1')}, against "
          f"{term('habits_none', '100', 'cohort_exact', '0.8')} at θ = 0.8)")
    cited(f"less than half at θ = 0.1 ({pair('region_only', '100', '0.1', 'poststrat')} of "
          f"{term('region_only', '100', 'cohort_exact', '0.1')}) and nearly all at θ = 0.8 "
          f"({pair('region_only', '100', '0.8', 'poststrat')} of "
          f"{term('region_only', '100', 'cohort_exact', '0.8')})")


def test_the_design_s_loss_reports_are_the_kept_runs() -> None:
    """K = 20 devices a round, 26 loss reports with over-selection (``--cohort-sizes``)."""
    header, rows = table(printed("bias_table", str(week()), "--cohort-sizes"))
    most = {row[0]: row[header.index("loss reports (most)")] for row in rows}
    cited(f"K = 20 devices a round ({most['20']} loss reports with over-selection)")


LABELS = {"fedavg": "FedAvg", "cohort_exact": "Δ-FL, `cohort_exact`",
          "ipw_days": "Δ-FL, `ipw_days`"}


def test_the_drivers_table_is_the_kept_runs() -> None:
    """``drivers_table.py habits_drivers --versus cohort_exact``: each driver's row, the
    page keeping the seeds, final test mean and p90, traffic and updates aggregated."""
    header, rows = table(printed("drivers_table", str(drivers()), "--versus", "cohort_exact"))
    columns = ["seeds", "test mean", "test p90", "traffic (GB)", "updates aggregated / round"]
    want = [[LABELS[row[0]], *(row[header.index(c)] for c in columns)] for row in rows]
    page_header, page_rows = page_table("| driver | seeds | final test mean |")
    assert page_header == ["driver", "seeds", "final test mean", "final test p90",
                           "traffic (GB)", "updates aggregated a round"]
    assert page_rows == want and len(want) == 3


def test_the_drivers_paired_differences_and_threshold_are_the_kept_runs() -> None:
    """paper_table.py's paired table (ipw_days and FedAvg minus cohort_exact, the seeds for
    0.5 points), the driving estimates' bias and kept weight (bias_table.py), and the
    traffic and devices ipw_days saves (drivers_table.py's per-run figures)."""
    out = printed("paper_table", str(ROOT / "scenarios" / "study" / "habits_drivers.sweep.toml"),
                  "--results", str(ROOT / "docs" / "runs"), "--versus", "cohort_exact",
                  "--seeds-for", "0.5")
    header, rows = table(out, 1)
    assert header[2:] == ["p90 difference", "p (Holm)", "mean difference", "p (Holm)",
                          "seeds to find 0.5 points"]
    by_rule = {row[0]: row for row in rows}
    ipw = by_rule["Δ-FL θ = 0.5, batch 32, estimator.name = ipw_days"]
    assert ipw[1] == "0, 1, 2, 3, 4"
    cited(f"`ipw_days` ends {ipw[2].split(' [')[0]} points [{ipw[2].split(' [')[1]} from "
          "`cohort_exact` in 90th-percentile test error over 5 paired seeds")
    cited(f"test error is {ipw[2].split(' [')[0]} points [{ipw[2].split(' [')[1]} "
          f"(p = {ipw[3].split(' (')[0]}), and {ipw[4]} in mean error")
    cited(f"would find a 0.5-point difference with {ipw[6]} seeds at 80 % power")
    fedavg = by_rule["FedAvg, batch 32"]
    assert fedavg[1] == "0, 1, 2, 3, 4"
    # the page gives Δ-FL minus FedAvg: the row's FedAvg minus cohort_exact, signs turned
    p90, lo90, hi90 = map(float, re.findall(r"[-+][\d.]+", fedavg[2]))
    diff, lo, hi = map(float, re.findall(r"[-+][\d.]+", fedavg[4]))
    cited(f"lowers the tail relative to FedAvg by {p90:.2f} points [{lo90:.2f}, {hi90:.2f}] "
          f"at {-diff:+.2f} [{-hi:.2f}, {-lo:.2f}] points of mean error")

    header, rows = table(printed("bias_table", str(drivers()), "--digits", "5"))
    assert header[:3] == ["variant", "estimator", "seeds"]
    by_driver = {row[1]: dict(zip(header, row, strict=True)) for row in rows}
    theta = pl.read_parquet(drivers() / "bias.parquet", columns=["theta"])["theta"].unique()
    assert theta.to_list() == [0.5]
    bias = {e: f"{value(by_driver[e]['bias']):+.3f}" for e in ("cohort_exact", "ipw_days")}
    cited(f"the driving estimate's bias is {bias['cohort_exact']} nats with `cohort_exact` and "
          f"{bias['ipw_days']} with `ipw_days`")
    kept = {e: 100 * (0.5 + value(by_driver[e]["conformity − θ"]))
            for e in ("cohort_exact", "ipw_days")}
    cited(f"the filter keeps {kept['cohort_exact']:.1f} % and {kept['ipw_days']:.1f} % of "
          "the population's weight against the 50 % θ asks")
    cited(f"Why a {kept['cohort_exact'] - kept['ipw_days']:.1f}-point smaller over-inclusion")

    runs = bench_module("drivers_table").per_run(drivers())
    gb = {v: float(runs.filter(pl.col("variant") == v)["gb"].mean())
          for v in ("cohort_exact", "ipw_days")}
    less = gb["cohort_exact"] - gb["ipw_days"]
    aggregated = {v: float(runs.filter(pl.col("variant") == v)["aggregated"].mean())
                  for v in ("cohort_exact", "ipw_days")}
    cited(f"it keeps {aggregated['cohort_exact'] - aggregated['ipw_days']:.1f} fewer devices "
          f"a round and sends {less:.2f} GB less")
    cited(f"while sending {100 * less / gb['cohort_exact']:.1f} % less")

"""Three checks of the estimation study's pages (docs/bias/limits.md prints what they give).

``contrast``: a difference the pages would otherwise read across two tables by eye. Per
run, estimator A minus B in the availability term counted from the prescribed threshold
(``simfl.study.bias_table --prescribed``: per run, the mean over the bias rounds after the burn-in
of the per-round difference), at two cohort sizes of one variant and θ; then the
K_first − K_second difference of those per-run values, with Welch's interval (the runs at
two cohort sizes are separate runs) and the paired interval by seed (a seed fixes the
population and its availability at every K, so the seed's two runs share them):

    python -m simfl.study.bias_claims contrast docs/runs/habits_week \\
        --variant habits_strong --theta 0.5 --pair ipw_days,ipw_known --k 20 100

``seeds``: a subset of the seeds of a per-seed table that a script printed and the
repository keeps (``bench/recency.py``'s, in docs/runs/recency/output.md): the mean ± 95 %
t half-width of the chosen rows in the chosen columns, with the pages' verdict, e.g. the
seeds added after a first look, on their own:

    python -m simfl.study.bias_claims seeds docs/runs/recency/output.md --table -1 \\
        --seeds 3 4 5 6 7 8 9 --columns A "exposed − fresh" "fresh − control"

``multiplicity``: how many intervals the pages report, and what a family-wise reading
leaves of their headline claims (:data:`CLAIMS`, each quoted as its page prints it).
The family is every distinct signed interval on the given pages ("+a ± h" or "−a ± h";
unsigned figures such as losses or gigabytes are levels, not tests against 0), each read
as a t-test of its mean against 0 with 4 degrees of freedom (5 seeds, the study's rule;
the few intervals over 3 or 10 seeds are read the same way, which misstates their p).
For each claim on those pages: its p, Bonferroni's m·p, Holm's step-down p over the
family (:func:`simfl.study.intervals.holm`), and its interval widened to Bonferroni's
level 1 − 0.05 / m; its family-wise verdict is *different* when Holm's p ≤ 0.05,
*equivalent within ±0.01* when the widened interval lies inside ±0.01, else *not
detected*:

    python -m simfl.study.bias_claims multiplicity docs/bias/habits.md

Each check is a function returning its markdown lines; InputError for input it cannot read.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path
from typing import NamedTuple

import numpy as np
import polars as pl
from scipy import stats

from simfl.errors import InputError
from simfl.plots.study import against_prescribed, bias_rows
from simfl.study import run_command
from simfl.study.bias_table import paired_runs
from simfl.study.intervals import ci, holm, paired, welch

MARGIN = 0.01  # nats: the pages' equivalence margin (docs/bias/definitions.md, "Verdicts")
DF = 4  # 5 seeds

# The headline claims: (what, page, the interval as the page prints it).
CLAIMS = (
    ("cohort_exact's availability term, habits_strong, K = 20, θ = 0.5", "habits.md",
     "-0.0320 ± 0.0074"),
    ("cohort_exact's availability term, region_only, K = 20, θ = 0.5", "habits.md",
     "-0.0281 ± 0.0078"),
    ("poststrat − cohort_exact, region_only, K = 20, θ = 0.5", "habits.md",
     "+0.0262 ± 0.0044"),
    ("poststrat − cohort_exact, habits_strong, K = 20, θ = 0.5", "habits.md",
     "+0.0004 ± 0.0030"),
    ("ipw_days − cohort_exact, habits_strong, K = 20, θ = 0.5", "habits.md",
     "+0.0246 ± 0.0066"),
    ("ipw_days's availability term, habits_strong, K = 20, θ = 0.5", "habits.md",
     "-0.0074 ± 0.0044"),
    ("ipw_days − ipw_known, habits_strong, K = 20, θ = 0.5", "habits.md",
     "-0.0093 ± 0.0070"),
    ("poststrat_history − cohort_exact, habits_strong, K = 20, θ = 0.5", "habits.md",
     "+0.0068 ± 0.0027"),
    ("ipw_known's availability term, habits_strong, K = 20, θ = 0.8", "habits.md",
     "+0.0073 ± 0.0031"),
    ("poststrat − cohort_exact, habits_strong, K = 20, θ = 0.1", "habits.md",
     "-0.0067 ± 0.0043"),
    ("poststrat's availability term, region_only, K = 100, θ = 0.5", "habits.md",
     "-0.0056 ± 0.0035"),
    ("cohort_exact's availability term, regions sorted at strength 1, K = 100, θ = 0.8",
     "decomposition.md", "-0.026 ± 0.002"),
    ("cohort_exact's availability term, regions sorted at strength 1, K = 100, θ = 0.5",
     "decomposition.md", "-0.028 ± 0.004"),
    ("cohort_exact's availability term, regions sorted at strength 1, K = 100, θ = 0.1",
     "decomposition.md", "-0.040 ± 0.005"),
)

SIGNED = re.compile(r"(?<![\d.])([-+−])(\d*\.\d+) ± (\d*\.\d+)")


class Interval(NamedTuple):
    """A printed "mean ± half-width" 95 % t-interval with DF degrees of freedom."""

    mean: float
    half: float

    @classmethod
    def parse(cls, text: str) -> Interval:
        sign, mean, half = SIGNED.fullmatch(text.strip()).groups()  # type: ignore[union-attr]
        return cls(float(mean) * (-1 if sign in "-−" else 1), float(half))

    @property
    def p(self) -> float:
        """Two-sided p of the t-test of the mean against 0 (1 when nothing varies)."""
        if self.half == 0:
            return 1.0 if self.mean == 0 else 0.0
        se = self.half / stats.t.ppf(0.975, DF)
        return float(2 * stats.t.sf(abs(self.mean) / se, DF))

    def widened(self, m: int) -> float:
        """The half-width at Bonferroni's level 1 − 0.05 / m."""
        return self.half * stats.t.ppf(1 - 0.025 / m, DF) / stats.t.ppf(0.975, DF)


def family(pages: list[Path]) -> dict[str, Interval]:
    """Every distinct signed interval printed on the pages, by its text (− written -)."""
    found: dict[str, Interval] = {}
    for page in pages:
        for sign, mean, half in SIGNED.findall(page.read_text()):
            text = f"{'-' if sign in '-−' else '+'}{mean} ± {half}"
            found[text] = Interval.parse(text)
    return found


def multiplicity(pages: list[Path]) -> list[str]:
    """The family's size and the table of the claims found on the pages."""
    intervals = family(pages)
    texts = list(intervals)
    m = len(texts)
    adjusted = dict(zip(texts, holm([intervals[t].p for t in texts]), strict=True))
    names = {page.name for page in pages}
    lines = [f"{m} distinct signed intervals on {', '.join(sorted(names))}", "",
             "| claim | 95 % interval | verdict | p | Bonferroni p | Holm p | "
             "Bonferroni interval | verdict, family-wise |", "|" + "---|" * 8]
    for what, page, text in CLAIMS:
        if page not in names:
            continue
        if text not in intervals:
            raise InputError(f"{page}: does not print {text!r} ({what})")
        d, holm_p = intervals[text], adjusted[text]
        half = d.widened(m)
        lines.append(f"| {what} | {text} | {judged(d.mean, d.half, d.p)} | {d.p:.1e} | "
                     f"{min(1.0, m * d.p):.2g} | {holm_p:.2g} | {d.mean:+.4f} ± {half:.4f} | "
                     f"{judged(d.mean, half, holm_p)} |")
    return lines


def judged(mean: float, half: float, p: float) -> str:
    """The pages' verdict of an interval (mean ± half) with the p of its test against 0."""
    found = [name for name, holds in (("different", p <= 0.05),
                                      (f"equivalent within ±{MARGIN:g}",
                                       abs(mean) + half < MARGIN)) if holds]
    return " and ".join(found) or "not detected"


def per_run(sweep_dir: Path, variant: str, theta: float, a: str, b: str) -> pl.DataFrame:
    """Per run of the variant at θ: A − B of the availability term against the prescribed
    threshold (column ``diff``), with its cohort size and seed."""
    if not (sweep_dir / "bias.parquet").is_file():
        raise InputError(f"{sweep_dir}: no bias.parquet (run python -m simfl collect)")
    bias = against_prescribed(pl.read_parquet(sweep_dir / "bias.parquet"))
    bias = bias.filter((pl.col("variant") == variant) & (pl.col("theta") == theta))
    if bias.is_empty():
        raise InputError(f"{sweep_dir}: no runs of variant {variant} at θ = {theta}")
    return paired_runs(bias_rows(bias), ["clients_per_round"], a, b, "availability_bias")


def contrast(sweep_dir: Path, variant: str, theta: float, a: str, b: str,
             ks: tuple[int, int]) -> list[str]:
    """The per-K intervals of A − B and the K_first − K_second difference."""
    runs = per_run(sweep_dir, variant, theta, a, b)
    by_k = {k: runs.filter(pl.col("clients_per_round") == k).sort("seed") for k in ks}
    for k, part in by_k.items():
        if part.height < 2:
            raise InputError(f"{sweep_dir}: fewer than 2 runs at K = {k} ({variant}, θ {theta})")
    lines = [f"{a} − {b}, availability term, {variant}, θ = {theta:g}", "",
             "| cohort size | seeds | mean ± 95 % half-width | difference from the other K |",
             "|---|---|---|---|"]
    first, second = (by_k[k]["diff"].to_numpy() for k in ks)
    lines += [f"| K = {k} | {len(v)} | {ci(v, 4)} | |" for k, v in zip(ks, (first, second),
                                                                     strict=True)]
    w = welch(first.mean(), first.std(ddof=1), len(first), second.mean(), second.std(ddof=1),
              len(second))
    lines.append(f"| K = {ks[0]} − K = {ks[1]}, Welch | {len(first)} + {len(second)} | | "
                 f"{w.estimate:+.4f} [{w.low:+.4f}, {w.high:+.4f}], p = {w.p:.2f} |")
    seeds = sorted(set(by_k[ks[0]]["seed"]) & set(by_k[ks[1]]["seed"]))
    pair = {k: by_k[k].filter(pl.col("seed").is_in(seeds))["diff"].to_numpy() for k in ks}
    d = paired(pair[ks[0]] - pair[ks[1]])
    lines.append(f"| K = {ks[0]} − K = {ks[1]}, paired by seed | {len(seeds)} | | "
                 f"{d.estimate:+.4f} [{d.low:+.4f}, {d.high:+.4f}], p = {d.p:.2f} |")
    return lines


def seed_rows(text: str, table: int, seeds: list[int], columns: list[str]) -> list[str]:
    """The chosen rows (by their ``seed`` cell) of the ``table``-th per-seed table in
    ``text``, summarised per column as mean ± 95 % half-width with the verdict."""
    tables: list[list[list[str]]] = []
    for line in text.splitlines():
        if line.startswith("| seed |"):
            tables.append([])
        if tables and line.startswith("| ") and not line.startswith("| seed |"):
            tables[-1].append([c.strip() for c in line.strip().strip("|").split("|")])
    header_line = next((ln for ln in text.splitlines() if ln.startswith("| seed |")), "")
    header = [c.strip() for c in header_line.strip().strip("|").split("|")]
    try:
        rows = {row[0]: row for row in tables[table]}
    except IndexError:
        raise InputError(f"no per-seed table {table} ({len(tables)} tables)") from None
    lacking = [c for c in columns if c not in header] + \
        [f"seed {s}" for s in seeds if str(s) not in rows]
    if lacking:
        raise InputError(f"not in table {table}: {', '.join(lacking)}")
    lines = ["| seeds | " + " | ".join(columns) + " |", "|" + "---|" * (len(columns) + 1)]
    cells = []
    for column in columns:
        values = np.array([float(rows[str(s)][header.index(column)]) for s in seeds])
        d = paired(values)
        cells.append(f"{ci(values, 4)} ({judged(d.estimate, d.high - d.estimate, d.p)})")
    return [*lines, f"| {', '.join(map(str, seeds))} | " + " | ".join(cells) + " |"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m simfl.study.bias_claims",
                                     description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    one = commands.add_parser("contrast", help="A − B at two cohort sizes, and their difference")
    one.add_argument("sweep_dir", type=Path, help="docs/runs/<sweep> after collect")
    one.add_argument("--variant", default="habits_strong")
    one.add_argument("--theta", type=float, default=0.5)
    one.add_argument("--pair", default="ipw_days,ipw_known", metavar="A,B")
    one.add_argument("--k", type=int, nargs=2, default=(20, 100), metavar=("K1", "K2"))
    some = commands.add_parser("seeds", help="chosen seeds of a kept per-seed table")
    some.add_argument("printed", type=Path, help="a kept printout (docs/runs/recency/output.md)")
    some.add_argument("--table", type=int, default=-1, help="which per-seed table (0: first)")
    some.add_argument("--seeds", type=int, nargs="+", required=True)
    some.add_argument("--columns", nargs="+", required=True)
    many = commands.add_parser("multiplicity", help="the pages' intervals, family-wise")
    many.add_argument("pages", type=Path, nargs="+")
    args = parser.parse_args(argv)

    def work() -> None:
        if args.command == "contrast":
            a, sep, b = args.pair.partition(",")
            if not (a and sep and b):
                raise InputError("--pair: two estimators, A,B")
            lines = contrast(args.sweep_dir, args.variant, args.theta, a, b, tuple(args.k))
        elif args.command == "seeds":
            if not args.printed.is_file():
                raise InputError(f"no such file: {args.printed}")
            lines = seed_rows(args.printed.read_text(), args.table, args.seeds, args.columns)
        else:
            missing = [str(p) for p in args.pages if not p.is_file()]
            if missing:
                raise InputError(f"no such page: {', '.join(missing)}")
            lines = multiplicity(args.pages)
        print("\n".join(lines))

    return run_command(work)


if __name__ == "__main__":
    sys.exit(main())

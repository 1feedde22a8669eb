"""The driver comparison's table and figure: per driving estimator (and FedAvg), the final
test error, the run's traffic and round durations, each as the mean over seeds ± the
half-width of a 95 % t-interval, and which drivers are on the Pareto front of final
90th-percentile error against total bytes (no other driver has both lower on average).

    python -m simfl collect scenarios/study/drivers.sweep.toml
    python -m simfl.study.drivers_table results/drivers [--figure OUT.png] [--versus fedavg]
    python -m simfl collect scenarios/study/drivers.sweep.toml --results docs/runs
    python -m simfl.study.drivers_table docs/runs/drivers ...   # the kept runs (archive_runs.py)

``--versus V`` adds each driver minus V on the same seed (a seed fixes the population, its
availability and the initial model): the mean paired difference in final test mean and p90
error with its 95 % t-interval. :func:`per_run` gives the per-run figures as a frame; the
tables are its markdown lines.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import polars as pl

from simfl.errors import InputError
from simfl.plots.study import pareto_front
from simfl.plugins import registered_filters_by_threshold
from simfl.rundir import MANIFEST
from simfl.study import run_command
from simfl.study.intervals import ci
from simfl.tables import sent

SECURE_KINDS = ("quantile_protocol", "secagg")


def comm_file(run_dir: Path) -> Path:
    """A run's messages: ``comm.parquet``, or in a kept copy (bench/archive_runs.py) the
    same summed by round, direction and kind."""
    whole = run_dir / "comm.parquet"
    return whole if whole.is_file() else run_dir / "comm_by_round.parquet"


def secure_bytes(run_dir: Path) -> int:
    """Bytes a run sent for its threshold protocol's secure sums and broadcasts."""
    comm = sent(pl.read_parquet(comm_file(run_dir)))
    secure = comm.filter(pl.col("kind").is_in(SECURE_KINDS))
    return int(secure.select(pl.col("bytes").sum()).item() or 0)


def per_run(sweep_dir: Path) -> pl.DataFrame:
    """One row per run: variant, seed, final test mean / p90 error, GB in all and in the
    threshold protocol, mean round duration (s), updates aggregated per round. InputError
    for a folder without the collected rounds and eval tables."""
    lacking = [t for t in ("rounds", "eval") if not (sweep_dir / f"{t}.parquet").is_file()]
    if lacking:
        raise InputError(f"{sweep_dir}: no {' or '.join(f'{t}.parquet' for t in lacking)} "
                         "(run python -m simfl collect)")
    read = {t: pl.read_parquet(sweep_dir / f"{t}.parquet") for t in ("rounds", "eval")}
    test = read["eval"].filter(pl.col("split") == "test")
    test = test.filter(pl.col("round") == pl.col("round").max().over("run_id"))
    errors = test.group_by("run_id").agg(test_mean=pl.col("error").mean(),
                                         p90=pl.col("error").quantile(0.9, "linear"))
    rounds = read["rounds"].group_by("run_id", "variant", "seed").agg(
        gb=(pl.col("bytes_down") + pl.col("bytes_up")).sum() / 1e9,
        round_s=(pl.col("t_end_s") - pl.col("t_start_s")).mean(),
        aggregated=pl.col("num_aggregated").mean())
    secure = pl.DataFrame([  # comm.parquet is not collected: read each run's own
        {"run_id": run_id, "secure_gb": secure_bytes(sweep_dir / run_id) / 1e9,
         "filters": _filters(sweep_dir / run_id)}
        for run_id in rounds["run_id"]])
    return (rounds.join(errors, on="run_id").join(secure, on="run_id", how="left")
            .with_columns(pl.col("secure_gb").fill_null(0.0)).sort("variant", "seed"))


def driver_order(runs: pl.DataFrame) -> list[str]:
    """The variants, the references first (those whose rule filters by no threshold, such
    as FedAvg: ``filters`` false), then by name."""
    filters = dict(runs.select("variant", "filters").unique().iter_rows())
    return sorted(filters, key=lambda v: (filters[v], v))


def _filters(run_dir: Path) -> bool:
    """Whether the run's rule trains the reporters above a threshold (its manifest's
    ``aggregator.name``, looked up in the registry: nothing it names is imported)."""
    manifest = json.loads((run_dir / MANIFEST).read_text())
    return registered_filters_by_threshold(manifest["scenario"]["aggregator"]["name"])


def drivers_table(runs: pl.DataFrame) -> list[str]:
    """One row per driver: each figure of :func:`per_run` as mean ± 95 % half-width over
    seeds, and whether it is on the Pareto front of final p90 against total bytes."""
    front = pareto_front(runs)
    lines = ["| driver | seeds | test mean | test p90 | traffic (GB) | of which threshold "
             "protocol (GB) | mean round duration (s) | updates aggregated / round | Pareto |",
             "|---|---|---|---|---|---|---|---|---|"]
    for variant in driver_order(runs):
        part = runs.filter(pl.col("variant") == variant)
        cells = [ci(part[c].to_numpy(), d, signed=False) for c, d in (
            ("test_mean", 3), ("p90", 3), ("gb", 2), ("secure_gb", 2), ("round_s", 1),
            ("aggregated", 1))]
        lines.append(f"| {variant} | {part.height} | " + " | ".join(cells)
                     + f" | {'yes' if variant in front else ''} |")
    return lines


def paired_table(runs: pl.DataFrame, versus: str) -> list[str]:
    """Each variant minus ``versus`` on the seeds both have: final test mean and p90."""
    order = driver_order(runs)
    if versus not in order:
        raise InputError(f"--versus: no variant {versus!r} in the runs ({', '.join(order)})")
    base = runs.filter(pl.col("variant") == versus).select(
        "seed", base_test_mean=pl.col("test_mean"), base_p90=pl.col("p90"))
    lines = ["", f"| driver − {versus} | seeds | test mean | test p90 |", "|---|---|---|---|"]
    for variant in (v for v in order if v != versus):
        pairs = runs.filter(pl.col("variant") == variant).join(base, on="seed")
        cells = [ci((pairs[c] - pairs[f"base_{c}"]).to_numpy()) for c in ("test_mean", "p90")]
        lines.append(f"| {variant} | {pairs.height} | " + " | ".join(cells) + " |")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m simfl.study.drivers_table",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("sweep_dir", type=Path, help="results/<sweep> after collect")
    parser.add_argument("--figure", type=Path, help="draw final p90 against bytes here (PNG)")
    parser.add_argument("--versus", help="a variant: paired differences per seed against it")
    args = parser.parse_args(argv)

    def work() -> None:
        runs = per_run(args.sweep_dir)
        lines = drivers_table(runs) + (paired_table(runs, args.versus) if args.versus else [])
        print("\n".join(lines))
        if args.figure:
            from simfl.plots import save_figure
            from simfl.plots.study import plot_final_tail_vs_bytes

            save_figure(plot_final_tail_vs_bytes(runs), args.figure)
            print(args.figure)

    return run_command(work)


if __name__ == "__main__":
    sys.exit(main())

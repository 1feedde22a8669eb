"""docs/foundation.md's measured tables against what is kept in docs/runs: the
learning-at-scale table from bench/million.py's records (docs/runs/million/bench.jsonl)
and the diurnal scenario's table from its kept run (docs/runs/async_check/sync_deltafl).
A page figure must equal the record to the digits it shows."""

from __future__ import annotations

import json
import re
from pathlib import Path

import polars as pl
import pytest

ROOT = Path(__file__).parents[1]
PAGE = ROOT / "docs" / "foundation.md"
MILLION = ROOT / "docs" / "runs" / "million" / "bench.jsonl"
DIURNAL = ROOT / "docs" / "runs" / "async_check" / "sync_deltafl"


def shown(text: str) -> tuple[float, float]:
    """The number a cell shows ("1,050 s", "**4,831 MiB**", "0.481") and half its last
    digit: the record's value must lie within that of it."""
    number = re.search(r"\d[\d,]*(?:\.\d+)?", text)
    assert number is not None, text
    digits = number.group().replace(",", "")
    decimals = len(digits.split(".")[1]) if "." in digits else 0
    return float(digits), 0.5 * 10.0 ** -decimals + 1e-9


def agrees(text: str, value: float) -> bool:
    centre, half = shown(text)
    return abs(centre - value) <= half


def table_rows(header_start: str) -> list[list[str]]:
    lines = PAGE.read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(header_start))
    rows = []
    for line in lines[start + 2:]:
        if not line.startswith("| "):
            break
        rows.append([c.strip() for c in line.strip().strip("|").split("|")])
    return rows


def test_the_learning_at_scale_table_is_bench_million_s_records() -> None:
    """Each row is one record of bench.jsonl; a part's time counts its sample-making."""
    records = [json.loads(line) for line in MILLION.read_text().splitlines()]
    rows = table_rows("| N training devices | wall | peak RSS | oracle")
    assert len(rows) == len(records) == 4
    for cells in rows:
        n = {"10⁴": 10**4, "10⁵": 10**5, "10⁶": 10**6}[cells[0]]
        matching = [r for r in records if r["num_devices"] == n and agrees(cells[1], r["wall_s"])]
        assert len(matching) == 1, cells
        record = matching[0]
        seconds = record["seconds"]
        with_samples = [seconds[part] + seconds.get(f"samples:{part}", 0.0)
                        for part in ("oracle", "evaluation", "training", "engine")]
        assert agrees(cells[2], record["peak_rss_mb"]), cells
        for cell, value in zip(cells[3:7], with_samples, strict=True):
            assert agrees(cell, value), (cells, value)
        start, end = cells[8].split(", ")
        assert agrees(start, record["load"][0]) and agrees(end, record["load"][1]), cells
    quiet = min(records, key=lambda r: r["wall_s"] if r["num_devices"] == 10**6 else 1e9)
    assert f"{quiet['wall_s'] / 60:.1f} minutes and {quiet['peak_rss_mb']:,.0f} MiB" in \
        " ".join(PAGE.read_text().split())


def test_the_diurnal_table_is_its_kept_run() -> None:
    manifest = json.loads((DIURNAL / "manifest.json").read_text())
    table = pl.read_parquet(DIURNAL / "rounds.parquet")
    rounds = {c: table[c].to_numpy().astype(float) for c in table.columns if c != "lr"}
    cells = dict((row[0], row[1]) for row in table_rows("| | |"))
    wall = cells["wall time"]
    assert agrees(wall.split("(")[1], manifest["wall_s"])
    assert agrees(wall.split("peak RSS ")[1], manifest["peak_rss_mb"])
    assert agrees(cells["simulated time"], rounds["t_end_s"].max() / 3600)
    assert table.height == 1000 and "(1000 rounds)" in cells["simulated time"]
    low, high = re.findall(r"\d+", cells["devices online"])[:2]
    assert (int(low), int(high)) == (int(rounds["num_online"].min()),
                                     int(rounds["num_online"].max()))
    per_round = re.findall(r"\d[\d.]*", cells["per round"])
    assert agrees(per_round[0], rounds["num_selected"].mean())
    assert agrees(per_round[1], rounds["num_kept"].mean())
    assert agrees(per_round[2], rounds["num_aggregated"].mean())
    assert int(per_round[-1]) == int(rounds["num_dropped"].sum())
    assert agrees(cells["traffic"], (rounds["bytes_down"] + rounds["bytes_up"]).sum() / 1e9)
    errors = [float(x) for x in re.findall(r"0\.\d+", cells["final test error"])]
    summary = manifest["summary"]
    want = [summary["test"]["mean"], summary["test"]["p90"], summary["train"]["mean"],
            summary["train"]["p90"]]
    assert errors == pytest.approx(want, abs=5e-4)


def test_the_round_durations_by_utc_hour_are_the_kept_run_s() -> None:
    rounds = pl.read_parquet(DIURNAL / "rounds.parquet").with_columns(
        ((pl.col("t_start_s") // 3600) % 24).cast(pl.Int64).alias("hour"),
        (pl.col("t_end_s") - pl.col("t_start_s")).alias("duration"))
    hourly = rounds.group_by("hour").agg(pl.col("duration").mean().alias("mean"),
                                         pl.col("duration").std().alias("sd"),
                                         pl.len().alias("n")).sort("hour")
    mean = dict(zip(hourly["hour"].to_list(), hourly["mean"].to_list(), strict=True))
    page = " ".join(PAGE.read_text().split())
    assert f"rounds take {mean[11]:.2f} s at 11–12 h UTC" in page and f"{mean[12]:.2f}" == \
        f"{mean[11]:.2f}"
    late = [mean[h] for h in (19, 20, 21, 22, 23, 0)]
    assert f"{min(late):.1f}–{max(late):.1f} s at 19–0 h UTC" in page
    sd, n = hourly["sd"].to_numpy(), hourly["n"].to_numpy()
    se = sd / n ** 0.5
    assert (f"hourly mean is {se.min():.2f}–{se.max():.2f} s ({n.min()}–{n.max()} rounds "
            f"each, sd {sd.min():.2f}–{sd.max():.2f} s)") in page

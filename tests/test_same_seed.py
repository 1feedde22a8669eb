"""simfl.study.same_seed: where two runs of one seed part, round by round."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest

from simfl.study.same_seed import compare
from tests.test_cli import SMALL

COMMAND = [sys.executable, "-m", "simfl.study.same_seed"]


def tables(losses: list[float], kept: list[int], estimate: float) -> dict[str, pl.DataFrame]:
    """One round of four devices: their reported losses, the ones kept, the estimate."""
    return {"clients": pl.DataFrame({
        "round": [0] * 4, "client_idx": [0, 1, 2, 3], "loss_reported": losses,
        "train_loss": [loss / 2 for loss in losses],
        "status": ["aggregated" if i in kept else "filtered" for i in range(4)]}),
            "rounds": pl.DataFrame({"round": [0], "quantile_estimate": [estimate]})}


def test_a_device_near_the_estimate_that_changes_side_is_named() -> None:
    a = tables([1.0, 2.0, 3.0, 4.0], kept=[2, 3], estimate=2.5)
    b = tables([1.0, 2.6, 2.4, 4.0], kept=[1, 3], estimate=2.5)
    lines = compare(a, b, rounds=1)
    assert lines[0] == ("round 0: same devices True, largest loss gap 6.00e-01 (training "
                        "loss 3.00e-01), estimate 2.500000 / 2.500000, kept 2 / 2, "
                        "status differs for 2")
    assert lines[1:] == ["    device 1: filtered at loss 2.000000 / aggregated at loss 2.600000",
                         "    device 2: aggregated at loss 3.000000 / filtered at loss 2.400000"]


@pytest.mark.slow
def test_two_runs_of_one_seed_on_one_machine_agree_to_the_bit(tmp_path: Path) -> None:
    scenario = tmp_path / "s.toml"
    scenario.write_text(SMALL.format(seed=3, aggregator="deltafl", theta=0.5))
    for name in ("a", "b"):
        subprocess.run([sys.executable, "-m", "simfl", str(scenario), "--out",
                        str(tmp_path / name), "--quiet"], check=True, cwd=tmp_path,
                       capture_output=True)
    out = subprocess.run([*COMMAND, str(tmp_path / "a"), str(tmp_path / "b"),
                          "--rounds", "6", "--keep", str(tmp_path / "kept")],
                         check=True, capture_output=True, text=True).stdout
    rounds = [line for line in out.splitlines() if line.startswith("round ")]
    assert len(rounds) == 6
    assert all("same devices True, largest loss gap 0.00e+00 (training loss 0.00e+00)" in line
               and line.endswith("status differs for 0") for line in rounds)
    kept = pl.read_parquet(tmp_path / "kept" / "clients.parquet")
    assert kept.equals(pl.read_parquet(tmp_path / "b" / "clients.parquet").filter(
        pl.col("round") < 6))


def test_bad_input_exits_2_and_keeps_nothing(tmp_path: Path) -> None:
    proc = subprocess.run([*COMMAND, str(tmp_path / "none"), str(tmp_path / "none"),
                           "--keep", str(tmp_path / "kept")], capture_output=True, text=True)
    assert proc.returncode == 2
    assert "none/clients.parquet: no such file" in proc.stderr
    assert not (tmp_path / "kept").exists()

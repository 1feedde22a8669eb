"""One smoke scenario end to end, its summary compared with a stored golden file.

The golden file pins behaviour, so an unintended change in data generation,
selection, training or aggregation shows up here. Regenerate it deliberately with
``SIMFL_UPDATE_GOLDEN=1 pytest tests/test_golden.py`` and say why in the commit.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import polars as pl
import pytest
import torch

from simfl.cli import main

GOLDEN = Path(__file__).parent / "golden" / "smoke_summary.json"
SCENARIO = """
seed = 7
[data.synthetic]
num_clients = 30
shared_model = 3.0
[model]
l2 = 1e-3
[train]
lr = 0.2
dtype = "float64"
[aggregator]
name = "deltafl"
theta = 0.5
[server]
num_rounds = 5
clients_per_round = 6
[eval]
every = 5
"""


def summarise(run_dir: Path) -> dict[str, object]:
    rounds = pl.read_parquet(run_dir / "rounds.parquet")
    evals = pl.read_parquet(run_dir / "eval.parquet").filter(pl.col("round") == 5)
    test = evals.filter(pl.col("split") == "test").sort("client_id")
    return {
        "num_kept": rounds["num_kept"].to_list(),
        "quantile_estimate": rounds["quantile_estimate"].to_list(),
        "bytes_up": rounds["bytes_up"].to_list(),
        "test_client_ids": test["client_id"].to_list(),
        "test_loss": test["loss"].to_list(),
    }


NO_GPU = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=NO_GPU)])
def test_smoke_scenario_matches_golden(tmp_path: Path, device: str) -> None:
    """The same golden numbers on the CPU and (float64) on a GPU."""
    scenario = tmp_path / "smoke.toml"
    scenario.write_text(SCENARIO)
    args = [str(scenario), "--out", str(tmp_path / "run"), "--quiet",
            "--set", f"train.device={device}"]
    assert main(args) == 0
    got = summarise(tmp_path / "run")
    if os.environ.get("SIMFL_UPDATE_GOLDEN") and device == "cpu":
        GOLDEN.write_text(json.dumps(got, indent=1) + "\n")
        pytest.skip("golden file rewritten")
    want = json.loads(GOLDEN.read_text())
    for key in ("num_kept", "bytes_up", "test_client_ids"):
        assert got[key] == want[key], key
    for key in ("quantile_estimate", "test_loss"):
        np.testing.assert_allclose(got[key], want[key], rtol=1e-9, err_msg=key)

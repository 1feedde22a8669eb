"""The round progress bar (simfl.runs.loop.simulate): its last line shows the final
evaluation, after the last round, not the one before it."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

import simfl

SCENARIO = """
seed = 1
[data]
dataset = "synthetic"
[data.synthetic]
num_clients = 12
[model]
name = "linear"
[aggregator]
name = "fedavg"
[server]
num_rounds = 5
clients_per_round = 3
[eval]
every = 3
"""


def test_the_bars_last_line_shows_the_final_evaluation(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "s.toml"
    path.write_text(SCENARIO)
    run = simfl.simulate(path, tmp_path / "run", progress=True)
    # evaluations after rounds 0, 3 and 5 (the last): the bar's final state shows round 5's
    last = capsys.readouterr().err.replace("\r", "\n").strip().splitlines()[-1]
    assert "5/5" in last and "eval_round=5" in last, last
    test = json.loads((run.path / "manifest.json").read_text())["summary"]["test"]
    shown = dict(re.findall(r"(test_mean|test_p90)=([0-9.]+)", last))
    assert shown == {"test_mean": f"{test['mean']:.3f}", "test_p90": f"{test['p90']:.3f}"}

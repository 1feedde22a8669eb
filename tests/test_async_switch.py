"""``server.mode`` alone switches a scenario between sync and async: the other mode's
keys are kept, unused, and a run names them in one note."""

from __future__ import annotations

from pathlib import Path

import pytest

from simfl.cli import main
from simfl.scenario import from_dict, unused_server_keys

SYNC = """
seed = 1
[data.synthetic]
num_clients = 40
[aggregator]
name = "deltafl"
[server]
num_rounds = 4
clients_per_round = 6
deadline_s = 600.0
round_interval_s = 600.0
over_selection = 0.3
[population.availability]
mode = "diurnal"
"""


def test_the_other_modes_keys_are_named_not_refused() -> None:
    sync = {"server": {"deadline_s": 600.0, "min_online": 8}}
    assert unused_server_keys(from_dict(sync)) == ()
    switched = from_dict({"server": {**sync["server"], "mode": "async"}})
    assert unused_server_keys(switched) == ("server.deadline_s", "server.min_online")
    back = from_dict({"server": {"mode": "sync", "buffer_size": 5}})
    assert unused_server_keys(back) == ("server.buffer_size",)


def test_a_sync_scenario_runs_async_with_set_alone(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "sync.toml"
    path.write_text(SYNC)
    capsys.readouterr()
    assert main([str(path), "--set", "server.mode=async", "--out", str(tmp_path / "run"),
                 "--quiet"]) == 0
    out = capsys.readouterr().out
    notes = [line for line in out.splitlines() if "does not use" in line]
    assert notes == ["note: server.mode = 'async' does not use server.over_selection, "
                     "server.deadline_s, server.round_interval_s (the other mode's keys): "
                     "ignored"]

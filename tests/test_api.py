"""docs/api.md stays true: its python blocks run, in order, as one script in a fresh
folder outside the repository; and the API's own promises (light import, dict
overrides checked like --set, a run's tables as the records module reads them)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import simfl
from simfl.errors import InputError

ROOT = Path(__file__).parents[1]
API = ROOT / "docs" / "api.md"


@pytest.mark.slow
def test_every_example_of_the_api_page_runs_outside_the_package(tmp_path: Path) -> None:
    blocks = re.findall(r"```python\n(.*?)```", API.read_text(), re.S)
    assert len(blocks) >= 4
    script = tmp_path / "example.py"
    script.write_text("\n".join(blocks))
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    run = simfl.open_run(tmp_path / "results" / "api_demo")
    assert run.status == "complete" and run.manifest["peak_rss_mb"] > 50
    # half of 60 train, then the unseen test devices (null client_idx, as in eval)
    assert run.devices["client_idx"].to_list() == list(range(30)) + [None] * 30
    assert run.devices["split"].to_list() == ["train"] * 30 + ["test"] * 30
    assert (run.path / "plots" / "p90_vs_bytes.png").is_file()
    assert (run.path / "plots" / "threshold_estimates.png").is_file()  # as `simfl plot` draws


def test_importing_simfl_loads_no_torch() -> None:
    done = subprocess.run([sys.executable, "-c", "import sys, simfl; "
                           "print('torch' in sys.modules)"], capture_output=True, text=True)
    assert done.stdout.strip() == "False", done.stderr


def test_dict_overrides_are_checked_like_set(tmp_path: Path) -> None:
    base = {"data": {"dataset": "synthetic"}}
    assert simfl.load_scenario(base, {"server.num_rounds": 7}).server.num_rounds == 7
    with pytest.raises(InputError, match="server.num_roundz"):
        simfl.load_scenario(base, {"server.num_roundz": 7})
    path = tmp_path / "s.toml"
    path.write_text('[aggregator]\nname = "deltafl"\n')
    loaded = simfl.load_scenario(path, {"aggregator.theta": 0.2})
    assert loaded.name == "s" and loaded.aggregator.theta == 0.2
    with pytest.raises(InputError, match="theta"):
        simfl.load_scenario(path, {"aggregator.theta": 2.0})


def test_simulate_stays_callable_after_a_run_imported_simfl_runs(tmp_path: Path) -> None:
    """Importing the submodule simfl.runs.run binds ``runs`` on the package, no name of
    the API: a second run in one process works."""
    scenario = simfl.load_scenario({"data": {"dataset": "synthetic",
                                             "synthetic": {"num_clients": 20}},
                                    "server": {"num_rounds": 2, "clients_per_round": 4}})
    for out in ("a", "b"):
        assert simfl.simulate(scenario, tmp_path / out).status == "complete"


def test_open_run_refuses_a_folder_without_a_manifest(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="manifest"):
        simfl.open_run(tmp_path)
    with pytest.raises(KeyError, match="simfl writes"):
        simfl.Run(tmp_path).table("nope")

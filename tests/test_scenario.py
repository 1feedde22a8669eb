"""Scenario loading: valid files, and clear errors for bad ones."""

from __future__ import annotations

from pathlib import Path

import pytest

from simfl.errors import InputError
from simfl.scenario import load_scenario
from simfl.sweep import load_sweep

ROOT = Path(__file__).parent.parent.joinpath("scenarios")
SWEEPS = sorted(ROOT.rglob("*.sweep.toml"))
TUNINGS = sorted(ROOT.rglob("*.tune.toml"))  # sweeps with a criterion (simfl.tune)
SCENARIOS = sorted(set(ROOT.rglob("*.toml")) - set(SWEEPS) - set(TUNINGS))


@pytest.mark.parametrize("path", SCENARIOS, ids=[p.stem for p in SCENARIOS])
def test_shipped_scenarios_load(path: Path) -> None:
    scenario = load_scenario(path)
    assert scenario.name


@pytest.mark.parametrize("path", SWEEPS, ids=[p.stem for p in SWEEPS])
def test_shipped_sweeps_expand_to_valid_scenarios(path: Path) -> None:
    assert len(load_sweep(path).runs) > 1  # every run's scenario is validated on loading


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "s.toml"
    path.write_text(text)
    return path


@pytest.mark.parametrize("text, expected", [
    ("[aggregator]\nthetta = 0.5\n", "unknown key 'aggregator.thetta' (did you mean "
                                     "'aggregator.theta'?)"),
    ("[aggregator]\ntheta = 1.5\n", "'aggregator.theta' = 1.5 must be in (0, 1]"),
    ("[aggregator]\ntheta = 0\n", "'aggregator.theta' = 0.0 must be in (0, 1]"),
    ("[train]\nlr = -0.1\n", "'train.lr' = -0.1 must be > 0"),
    ("[train]\nlr = \"fast\"\n", "'train.lr' must be float, got str 'fast'"),
    ("[train]\nlocal_epochs = 1.5\n", "'train.local_epochs' must be int, got float 1.5"),
    ("[model]\nname = \"resnet\"\n", "'model.name' = 'resnet' must be one of"),
    ("[server]\nclients_per_round = true\n", "'server.clients_per_round' must be int"),
    ("trian = 3\n", "unknown key 'trian' (did you mean 'train'?)"),
    ("model = 3\n", "[model] must be a table"),
    ("[data\n", "invalid TOML"),
    ("[estimator]\nname = \"median\"\n", "'estimator.name' = 'median' must be one of"),
    ("[estimator]\nshadow = [\"ipw\", \"ipw\"]\n", "'estimator.shadow'"),
    ("[estimator.secure_bisection]\nlow = 2.0\nhigh = 1.0\n",
     "'estimator.secure_bisection.high' = 1.0 must be > 'estimator.secure_bisection.low'"),
    ("[estimator.tracking]\nstep = 0\n", "'estimator.tracking.step' = 0.0 must be > 0"),
])
def test_bad_scenarios_name_the_key(tmp_path: Path, text: str, expected: str) -> None:
    with pytest.raises(InputError) as info:
        load_scenario(write(tmp_path, text))
    message = str(info.value)
    assert expected in message
    assert message.startswith(str(tmp_path / "s.toml"))
    assert "\n" not in message


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="scenario file not found"):
        load_scenario(tmp_path / "nope.toml")


def test_defaults_and_name_from_file(tmp_path: Path) -> None:
    scenario = load_scenario(write(tmp_path, "seed = 3\n[train]\nlr = 1\n"))
    assert scenario.name == "s" and scenario.seed == 3
    assert scenario.train.lr == 1.0 and isinstance(scenario.train.lr, float)


@pytest.mark.parametrize("path", TUNINGS, ids=[p.stem for p in TUNINGS])
def test_shipped_tunings_expand_to_valid_scenarios(path: Path) -> None:
    from simfl.tune import load_tuning

    sweep, criterion, grid = load_tuning(path)
    assert sweep.runs and grid and criterion

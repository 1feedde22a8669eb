"""Scenario loading: valid files, and clear errors for bad ones."""

from __future__ import annotations

from pathlib import Path

import pytest

from simfl.errors import InputError
from simfl.runs.sweep import load_sweep
from simfl.scenario import load_scenario

ROOT = Path(__file__).parent.parent.joinpath("scenarios")
SWEEPS = sorted(ROOT.rglob("*.sweep.toml"))
TUNINGS = sorted(ROOT.rglob("*.tune.toml"))  # sweeps with a criterion (simfl.runs.tune)
SCENARIOS = sorted(set(ROOT.rglob("*.toml")) - set(SWEEPS) - set(TUNINGS))


@pytest.mark.parametrize("path", SCENARIOS, ids=[p.stem for p in SCENARIOS])
def test_shipped_scenarios_load(path: Path) -> None:
    scenario = load_scenario(path)
    assert scenario.name


@pytest.mark.parametrize("path", SWEEPS, ids=[p.stem for p in SWEEPS])
def test_shipped_sweeps_expand_to_valid_scenarios(path: Path) -> None:
    assert load_sweep(path).runs  # every run's scenario is validated on loading


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "s.toml"
    path.write_text(text)
    return path


@pytest.mark.parametrize("text, expected", [
    ("[aggregator]\nthetta = 0.5\n", "unknown key 'aggregator.thetta' (did you mean "
                                     "'aggregator.theta'?)"),
    ("[aggregator]\ntheta = 1.5\n", "'aggregator.theta' = 1.5 must be in (0, 1]"),
    ("[aggregator]\ntheta = 0\n", "'aggregator.theta' = 0.0 must be in (0, 1]"),
    ("[train]\nlr = -0.1\n", "'train.lr' = -0.1 must be in (0, 1e30]"),
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
    ("[estimator.tracking]\nstep = 0\n", "'estimator.tracking.step' = 0.0 must be in (0, 10]"),
    # a rule's or an estimator's knob that the chosen ones do not read
    ("[aggregator]\nname = \"fedavg\"\nq = 3.0\n",
     "'aggregator.q' = 3.0 has no meaning with 'aggregator.name' = 'fedavg'"),
    ("[aggregator]\nname = \"qffl\"\nq = 3.0\nmu = 2.0\n",
     "'aggregator.mu' = 2.0 has no meaning with 'aggregator.name' = 'qffl'"),
    ("[aggregator]\nname = \"term\"\ntheta = 0.8\n",
     "'aggregator.theta' = 0.8 has no meaning with 'aggregator.name' = 'term'"),
    ("[aggregator]\nname = \"deltafl\"\n[estimator.secure_mm]\ntol = 0.01\n",
     "'estimator.secure_mm' is set but no estimator that reads it (secure_mm)"),
    ("[aggregator]\nname = \"deltafl\"\n[estimator]\nshadow = [\"ipw\"]\nnoise_std = 0.1\n",
     "'estimator.noise_std' is set but no estimator that reads it"),
    ("[estimator]\ndecomposition_draws = 10\n",
     "'estimator.decomposition_draws' has no meaning with 'estimator.bias_every' = 0"),
    ("[data]\ndataset = \"femnist\"\npixel_scaling = \"authors\"\n",
     "'data.pixel_scaling' = 'authors' rescales FEMNIST images itself"),
    ("[data]\npixel_scaling = \"authors\"\nstandardise = false\n",
     "needs 'data.dataset' femnist or leaf (got 'synthetic')"),
    ("[model]\nname = \"convnet\"\ninit = \"zeros\"\n",
     "are for the linear model only (got 'model.name' = 'convnet')"),
    ("[model]\nname = \"gru\"\nbias = false\n",
     "are for the linear model only (got 'model.name' = 'gru')"),
    ("[model]\ninit = \"ones\"\n", "'model.init'"),
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
    from simfl.runs.tune import load_tuning

    sweep, criterion, grid = load_tuning(path)
    assert sweep.runs and grid and criterion


@pytest.mark.parametrize("text", [
    "[aggregator]\nname = \"qffl\"\nq = 3.0\n",
    "[aggregator]\nname = \"drfa\"\nlambda_step = 0.01\n",
    "[aggregator]\nname = \"deltafl\"\ntheta = 0.1\n[estimator]\nname = \"ipw\"\n"
    "shadow = [\"tracking\"]\nnoise_std = 0.1\n[estimator.tracking]\nstep = 0.5\n",
    "[aggregator]\nname = \"deltafl\"\n[estimator]\nbias_every = 5\ndecomposition_draws = 9\n",
])
def test_knobs_of_the_chosen_rule_and_estimators_load(tmp_path: Path, text: str) -> None:
    load_scenario(write(tmp_path, text))


def test_switching_rule_from_the_command_line_keeps_default_knobs(tmp_path: Path) -> None:
    """``--set aggregator.name=fedavg`` on a Δ-FL file at the default θ loads (make run)."""
    path = write(tmp_path, "[aggregator]\nname = \"deltafl\"\ntheta = 0.5\n")
    assert load_scenario(path, ["aggregator.name=fedavg"]).aggregator.name == "fedavg"
    with pytest.raises(InputError, match="'aggregator.theta' = 0.8 has no meaning"):
        load_scenario(path, ["aggregator.name=fedavg", "aggregator.theta=0.8"])

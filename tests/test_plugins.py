"""Plug-ins: names registered by decorator, entry point or ``package.module:function``
reach the scenario, the run, its manifest and a resumed process; a plug-in that cannot
be imported or does not fit is one InputError line (exit 2)."""

from __future__ import annotations

import inspect
import json
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from dataclasses import dataclass, replace
from importlib import import_module, metadata
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

import simfl
from simfl import plugins
from simfl.aggregate import Aggregator, make_aggregator
from simfl.cli import main
from simfl.errors import InputError
from simfl.population.availability import build_availability
from simfl.quantile.estimators import Cohort, Estimate
from simfl.quantile.panel import EstimatorPanel
from simfl.rng import Streams
from simfl.scenario import (
    AggregatorConfig,
    from_dict,
    from_manifest,
    load_scenario,
    plugins_of,
)

MODULE = '''
import numpy as np
import simfl
from simfl.aggregate.base import Aggregator, keep_all, weighted_mean


@simfl.register_aggregator("halved")
def halved(theta, scale=0.5):
    """FedAvg with its step scaled (a test rule)."""
    def combine(global_params, inputs, state):
        new = weighted_mean(global_params, inputs, state)
        return type(new)(global_params + scale * (new.params - global_params), state)
    return Aggregator("halved", False, keep_all, combine)


def needs_beta(beta):
    return halved(0.5)


def not_a_rule():
    return 3


NUMBER = 3
'''
TINY = {"name": "tiny", "data": {"synthetic": {"num_clients": 12, "dim": 5}},
        "server": {"num_rounds": 2, "clients_per_round": 3}, "eval": {"every": 2},
        "run": {"checkpoint_every": 0}}


@pytest.fixture
def user_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A module of the user's, ``myrules``, importable from ``tmp_path``."""
    (tmp_path / "myrules.py").write_text(MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield tmp_path
    sys.modules.pop("myrules", None)
    plugins.AGGREGATORS.table.pop("halved", None)


def test_a_decorated_rule_is_a_name_its_keys_come_from_its_signature(user_module: Path) -> None:
    import_module("myrules")
    scenario = from_dict({"aggregator": {"name": "halved", "theta": 0.3,
                                         "params": {"scale": 0.25}}})
    rule = plugins_of(scenario)["aggregator.name"]
    assert (rule.path, rule.keys, rule.required) == ("myrules:halved", ("theta", "scale"),
                                                     ("theta",))
    assert isinstance(make_aggregator(scenario.aggregator), Aggregator)
    with pytest.raises(InputError, match=r"'aggregator.mu' = 0.5 has no meaning"):
        from_dict({"aggregator": {"name": "halved", "mu": 0.5}})


def test_a_module_function_name_imports_itself(user_module: Path) -> None:
    scenario = from_dict({"aggregator": {"name": "myrules:needs_beta",
                                         "params": {"beta": 1.0}}})
    assert make_aggregator(scenario.aggregator).name == "halved"
    assert plugins_of(scenario)["aggregator.name"].record() == {
        "name": "myrules:needs_beta", "path": "myrules:needs_beta", "version": "unknown"}


@pytest.mark.parametrize("table, message", [
    ({"name": "nosuchmodule:rule"}, "'aggregator.name' = 'nosuchmodule:rule' cannot be "
                                    "imported (ModuleNotFoundError: No module named"),
    ({"name": "myrules:missing"}, "cannot be imported (AttributeError: module 'myrules' "
                                  "has no attribute 'missing')"),
    ({"name": "myrules:NUMBER"}, "'aggregator.name' = 'myrules:NUMBER' is not a function"),
    ({"name": "myrules:needs_beta"}, "'myrules:needs_beta' needs 'aggregator.params.beta'"),
    ({"name": "myrules:needs_beta", "params": {"beta": 1, "gamma": 2}},
     "'aggregator.params.gamma' is no hyper-parameter of ['myrules:needs_beta'] "
     "(they take ['beta'])"),
    ({"name": "fedavg", "params": {"beta": 1}}, "'aggregator.params.beta' is no "
                                                "hyper-parameter of ['fedavg']"),
    ({"name": "fedavgg"}, "must be one of ['fedavg', 'fedprox', 'deltafl', 'fedavg_sub', "
                          "'qffl', 'term', 'afl', 'drfa'] or a 'package.module:function' "
                          "(did you mean 'fedavg'?)"),
])
def test_a_name_that_is_no_plugin_is_one_line(user_module: Path, table: dict[str, object],
                                               message: str) -> None:
    with pytest.raises(InputError) as refused:
        from_dict({"aggregator": table})
    assert message in str(refused.value) and "\n" not in str(refused.value)


def test_a_factory_that_does_not_fit_is_refused(user_module: Path) -> None:
    with pytest.raises(InputError, match="a factory of models takes \\(input_shape, "
                                         "num_classes\\) first"):
        from_dict({"model": {"name": "myrules:not_a_rule"}})
    with pytest.raises(InputError, match=r"'aggregator.name' = 'myrules:not_a_rule' "
                                         r"\(myrules:not_a_rule\) returned a int, not a "
                                         r"Aggregator"):
        make_aggregator(AggregatorConfig(name="myrules:not_a_rule"))
    with pytest.raises(InputError, match="one of simfl's own aggregators"):
        simfl.register_aggregator("fedavg")(lambda: None)


def test_simfls_own_names_state_their_factories_keys() -> None:
    """The built-in tables name importable factories whose hyper-parameters are the keys
    they list (no torch is imported to load a scenario, so the keys are written out)."""
    for registry in plugins.REGISTRIES.values():
        for plugin in registry.builtins():
            factory = plugin.load()
            keys, _ = plugins.hyperparameters(registry.point, factory, plugin.name)
            assert keys == plugin.keys, plugin.name


def test_an_installed_packages_entry_point_is_a_name_with_its_version(
        user_module: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    info = user_module / "myrules-0.3.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: myrules\nVersion: 0.3\n")
    (info / "top_level.txt").write_text("myrules\n")
    (info / "entry_points.txt").write_text("[simfl.aggregators]\n"
                                           "from_package = myrules:needs_beta\n")
    monkeypatch.setattr(plugins.AGGREGATORS, "entry_points", None)  # look again
    try:
        assert "from_package" in plugins.AGGREGATORS.names()
        scenario = from_dict({"aggregator": {"name": "from_package", "params": {"beta": 2}}})
        assert plugins_of(scenario)["aggregator.name"].record() == {
            "name": "from_package", "path": "myrules:needs_beta", "version": "0.3"}
    finally:
        plugins.AGGREGATORS.table.pop("from_package", None)
        plugins.AGGREGATORS.entry_points = None


def test_the_version_is_the_providing_distributions() -> None:
    assert plugins.distribution_version("numpy.linalg:norm") == metadata.version("numpy")
    assert plugins.distribution_version("nosuchpackage:f") == "unknown"


@pytest.mark.slow
def test_the_manifest_records_a_decorated_rule_and_a_fresh_process_resolves_it(
        user_module: Path) -> None:
    import_module("myrules")
    run = simfl.simulate(simfl.load_scenario({**TINY, "aggregator": {"name": "halved"}}),
                    user_module / "run")
    assert run.status == "complete"
    assert run.manifest["plugins"] == {"aggregator.name": {
        "name": "halved", "path": "myrules:halved", "version": "unknown"}}
    code = ("import sys, simfl; run = simfl.open_run(sys.argv[1]); "
            "print(run.scenario.aggregator.name)")
    fresh = subprocess.run([sys.executable, "-c", code, str(user_module / "run")],
                           capture_output=True, text=True,
                           env={"PYTHONPATH": f"{user_module}:{Path.cwd()}"})
    assert fresh.stdout.strip() == "halved", fresh.stderr
    manifest = json.loads((user_module / "run" / "manifest.json").read_text())
    manifest["plugins"]["aggregator.name"]["path"] = "__main__:halved"
    plugins.AGGREGATORS.table.pop("halved")
    with pytest.raises(InputError, match="registered by a script run as __main__"):
        from_manifest(manifest, "m.json")


def test_a_bad_plugin_on_the_command_line_is_exit_2_and_one_line(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    scenario = tmp_path / "bad.toml"
    scenario.write_text('[model]\nname = "nosuchmodule:mlp"\n')
    assert main([str(scenario), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip()
    assert "'model.name' = 'nosuchmodule:mlp' cannot be imported" in err
    assert len(err.splitlines()) == 1 and not (tmp_path / "out").exists()


def test_estimator_and_availability_plugins(monkeypatch: pytest.MonkeyPatch) -> None:
    """An estimator plug-in gets the run's context, an availability plug-in the devices."""
    from simfl.population.availability import always_online
    from simfl.quantile.estimators import CohortExact

    @simfl.register_estimator("exact_again")
    def exact_again(ctx: object, shift: float = 0.0) -> CohortExact:
        return CohortExact()

    @simfl.register_availability("everyone")
    def everyone(cfg: object, devices: SimpleNamespace, streams: Streams) -> object:
        return always_online(devices.region_idx, len(devices.region_names))

    try:
        scenario = from_dict({"aggregator": {"name": "deltafl"},
                              "estimator": {"name": "exact_again", "shadow": ["ipw"],
                                            "params": {"shift": 1.0}},
                              "population": {"availability": {"mode": "everyone"}}})
        panel = EstimatorPanel(scenario.estimator, 0.5, 4, Streams(0))
        assert [e.name for e in panel.estimators] == ["cohort_exact", "ipw"]
        devices = SimpleNamespace(region_idx=np.zeros(4, np.int64), region_names=["a"],
                                  num_devices=4)
        availability = build_availability(scenario.population.availability,
                                          devices, Streams(0))  # type: ignore[arg-type]
        assert availability.num_online(10.0) == 4
        with pytest.raises(InputError, match="'ipw_known' needs the online rates .* "
                                             "'everyone' has none"):
            from_dict({"estimator": {"shadow": ["ipw_known"]},
                       "population": {"availability": {"mode": "everyone"}}})
    finally:
        plugins.ESTIMATORS.table.pop("exact_again")
        plugins.AVAILABILITY.table.pop("everyone")


@dataclass(frozen=True)
class _Counting:
    """A stateful estimator plug-in: the cohort's largest loss, and the rounds so far."""

    name: str = "counting"
    losses_in_clear: bool = True

    def init(self) -> dict[str, int]:
        return {"rounds": 0}

    def estimate(self, cohort: Cohort, level: float, rng: np.random.Generator,
                 state: dict[str, int]) -> Estimate:
        return Estimate(float(cohort.losses.max()), state={"rounds": state["rounds"] + 1})


@dataclass
class _KeepsItsState:
    """The same, counting in itself: the Monte-Carlo cohorts would advance it too."""

    name: str = "keeps"
    losses_in_clear: bool = True
    rounds: int = 0

    def estimate(self, cohort: Cohort, level: float, rng: np.random.Generator) -> Estimate:
        self.rounds += 1
        return Estimate(float(cohort.losses.max()))

    def state_dict(self) -> dict[str, int]:
        return {"rounds": self.rounds}

    def load_state_dict(self, state: dict[str, int]) -> None:
        self.rounds = state["rounds"]


def test_a_stateful_estimator_plugin_returns_its_state_and_one_keeping_it_is_refused() -> None:
    @simfl.register_estimator("counting")
    def counting(ctx: object) -> _Counting:
        return _Counting()

    @simfl.register_estimator("keeps")
    def keeps(ctx: object) -> _KeepsItsState:
        return _KeepsItsState()

    try:
        cfg = from_dict({"aggregator": {"name": "deltafl"},
                         "estimator": {"name": "counting"}}).estimator
        panel = EstimatorPanel(cfg, 0.5, 4, Streams(0))
        cohort = Cohort(np.array([0.5, 2.0]), np.ones(2), np.arange(2), 0.0)
        assert panel.estimate(cohort, 0)["counting"].threshold == 2.0
        panel.estimate(cohort, 1)
        assert panel.state_dict()["estimators"] == {"counting": {"rounds": 2}}
        with pytest.raises(InputError, match="'keeps' .* keeps its state itself"):
            EstimatorPanel(replace(cfg, name="keeps"), 0.5, 4, Streams(0))
    finally:
        plugins.ESTIMATORS.table.pop("counting")
        plugins.ESTIMATORS.table.pop("keeps")


def test_a_plugin_model_builds_and_initialises(tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "mymodels.py").write_text(textwrap.dedent('''
        from torch import nn
        def mlp(input_shape, num_classes, hidden=8):
            return nn.Sequential(nn.Flatten(), nn.Linear(input_shape[0], hidden), nn.ReLU(),
                                 nn.Linear(hidden, num_classes))
    '''))
    monkeypatch.syspath_prepend(str(tmp_path))
    from simfl.train import build_model, initial_params

    model = build_model("mymodels:mlp", (5,), 3, params={"hidden": 4})
    assert initial_params(model, 0, __import__("torch").float32).shape == (5 * 4 + 4 + 4 * 3
                                                                           + 3,)
    sys.modules.pop("mymodels")
    assert "hidden" in inspect.signature(plugins.import_path("mymodels:mlp", "k", "s")
                                         ).parameters
    # its training cost per sample is counted from the module: 3 x (60 x 8 + 8 x 10) MACs
    # on the default synthetic data, as if the key had said so
    scenario = tmp_path / "s.toml"
    base = '[model]\nname = "mymodels:mlp"\n[server]\nnum_rounds = 2\n'
    scenario.write_text(base)
    counted = simfl.simulate(load_scenario(scenario), tmp_path / "out").devices
    scenario.write_text(base + f"[population.compute]\ntrain_flops_per_sample = "
                               f"{3.0 * (60 * 8 + 8 * 10)}\n")
    given = simfl.simulate(load_scenario(scenario), tmp_path / "given").devices
    assert counted["train_s_per_sample"].to_list() == given["train_s_per_sample"].to_list()


def test_resume_refuses_a_plugin_whose_package_version_changed(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import simfl.plugins

    folder = tmp_path / "pkg"
    folder.mkdir()
    (folder / "versioned_rule.py").write_text("def rule(**kwargs):\n    return None\n")
    monkeypatch.syspath_prepend(str(folder))
    monkeypatch.setenv("PYTHONPATH", str(folder))
    record = {"aggregator.name": {"name": "versioned_rule:rule", "path": "versioned_rule:rule",
                                  "version": "1.0"}}
    monkeypatch.setattr(simfl.plugins.origins, "distribution_version", lambda path: "1.0")
    lines = simfl.plugins.check_origins(record, tmp_path / "run")
    assert lines == [f"plug-in 'aggregator.name' = 'versioned_rule:rule' from "
                     f"{(folder / 'versioned_rule.py').resolve()}"]
    monkeypatch.setattr(simfl.plugins.origins, "distribution_version", lambda path: "2.0")
    with pytest.raises(InputError, match="started with version 1.0 of its package, 2.0 is"):
        simfl.plugins.check_origins(record, tmp_path / "run")

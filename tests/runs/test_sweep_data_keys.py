"""A sweep compares the scenario a run ran with the one it asks for key by key, but a
``[data]`` key only other data sets read is no change: a FEMNIST run kept from before
``data.synthetic.shared_model``'s default became 3 is still the sweep's (and an
interrupted one resumes rather than starting again)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from simfl import load_scenario
from simfl.runs.sweep import scenario_changes
from simfl.scenario import to_dict


def ran(tmp_path: Path, table: dict[str, object]) -> Path:
    """A run folder whose manifest holds ``table`` resolved (as a run writes it) with
    the old default ``data.synthetic.shared_model = 0``."""
    scenario = to_dict(load_scenario(table))
    scenario["data"]["synthetic"]["shared_model"] = 0.0
    (tmp_path / "manifest.json").write_text(json.dumps({"scenario": scenario}))
    return tmp_path


@pytest.mark.parametrize("dataset", ["femnist", "shakespeare"])
def test_another_data_set_s_default_is_no_change(tmp_path: Path, dataset: str) -> None:
    table = {"data": {"dataset": dataset}, "server": {"num_rounds": 3}}
    run_dir = ran(tmp_path, table)
    assert scenario_changes(run_dir, load_scenario(table)) == []
    # the keys the run's data set reads, and every other section, are still compared
    assert scenario_changes(run_dir, load_scenario(table, {"server.num_rounds": 4})) == [
        "server.num_rounds = 3 (the sweep: 4)"]
    if dataset == "femnist":
        assert scenario_changes(run_dir, load_scenario(
            table, {"data.pixel_scaling": "authors", "data.standardise": False})) == [
            "data.pixel_scaling = \"ink\" (the sweep: \"authors\")",
            "data.standardise = true (the sweep: false)"]


def test_the_synthetic_data_s_own_keys_are_a_change(tmp_path: Path) -> None:
    table = {"data": {"dataset": "synthetic"}}
    assert scenario_changes(ran(tmp_path, table), load_scenario(table)) == [
        "data.synthetic.shared_model = 0.0 (the sweep: 3.0)"]


def test_a_switch_to_synthetic_data_names_its_keys(tmp_path: Path) -> None:
    """One scenario of the two reads data.synthetic: its keys are compared."""
    run_dir = ran(tmp_path, {"data": {"dataset": "femnist"}})
    assert scenario_changes(run_dir, load_scenario({"data": {"dataset": "synthetic"}})) == [
        "data.dataset = \"femnist\" (the sweep: \"synthetic\")",
        "data.synthetic.shared_model = 0.0 (the sweep: 3.0)"]


def test_a_plug_in_data_set_may_read_any_key(tmp_path: Path) -> None:
    """A plug-in's reads are unknown: every key is compared."""
    table = {"data": {"dataset": "tests.runs.test_sweep_data_keys:arrays"}}
    assert scenario_changes(ran(tmp_path, table), load_scenario(table)) == [
        "data.synthetic.shared_model = 0.0 (the sweep: 3.0)"]


def arrays(cfg: object, streams: object) -> None:
    """A data-set factory's signature (never called: the scenario is only compared)."""

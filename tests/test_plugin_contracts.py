"""Plug-ins that break their contract (docs/extending.md) get one line naming the plug-in
and the contract, never a traceback from inside simfl: exit 2 before the run starts (a
module that cannot be imported or calls sys.exit, a factory that raises, a model without
parameters), exit 1 with a failed manifest once it has (a rule's or an estimator's
answer of the wrong kind, found where simfl first receives it)."""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import torch

from simfl import plugins
from simfl.aggregate.base import (
    Aggregator,
    Combined,
    Selection,
    checked_combined,
    checked_sampling,
    checked_selection,
    keep_all,
    weighted_mean,
)
from simfl.cli import main
from simfl.errors import InputError
from simfl.plugins import PluginBroke
from simfl.quantile.estimators import Estimate
from simfl.quantile.panel import check_estimate

MODULE = '''
import sys

import numpy as np
from torch import nn

from simfl.aggregate.base import Aggregator, Combined, Selection, keep_all, weighted_mean
from simfl.quantile.estimators import Estimate


def wrong_shape():
    def combine(global_params, inputs, state):
        return Combined(global_params[:-1], state)
    return Aggregator("wrong_shape", False, keep_all, combine)


def wrong_keep():
    def select(losses, weights):
        return Selection(keep=np.ones(len(weights) + 1, dtype=bool))
    return Aggregator("wrong_keep", True, select, weighted_mean)


def wrong_sampling():
    return Aggregator("wrong_sampling", False, keep_all, weighted_mean,
                      sampling=lambda state, num_samples: np.ones(3))


def no_params(input_shape, num_classes):
    return nn.Flatten()


class Fixed:
    losses_in_clear = True

    def __init__(self, name, threshold):
        self.name, self.threshold = name, threshold

    def estimate(self, cohort, level, rng):
        return Estimate(self.threshold)


def est_abc(ctx):
    return Fixed("est_abc", "abc")


def est_none(ctx):
    return Fixed("est_none", None)


def raises():
    raise RuntimeError("no GPU here")


def exits():
    sys.exit(3)
'''
TINY = """
seed = 0
[data.synthetic]
num_clients = 16
dim = 5
[server]
num_rounds = 2
clients_per_round = 3
[eval]
every = 2
[run]
checkpoint_every = 0
"""


@pytest.fixture
def folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A folder holding the plug-in module ``contracts`` (importable) and ``tiny.toml``."""
    (tmp_path / "contracts.py").write_text(MODULE)
    (tmp_path / "quits.py").write_text("import sys\nsys.exit(0)\n\n\ndef rule():\n    pass\n")
    (tmp_path / "tiny.toml").write_text(TINY)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield tmp_path
    for name in ("contracts", "quits"):
        sys.modules.pop(name, None)


def _main(folder: Path, capsys: pytest.CaptureFixture[str], *sets: str) -> tuple[int, str]:
    code = main([str(folder / "tiny.toml"), "--out", str(folder / "out"), "--quiet",
                 *[a for s in sets for a in ("--set", s)]])
    return code, capsys.readouterr().err.strip()


@pytest.mark.parametrize("sets, message", [
    (["aggregator.name=quits:rule"],
     "'aggregator.name' = 'quits:rule' cannot be imported (its module called sys.exit(0) as "
     "it was imported)"),
    (["aggregator.name=contracts:raises"],
     "'aggregator.name' = 'contracts:raises' (contracts:raises) failed: RuntimeError: no GPU "
     "here"),
    (["aggregator.name=contracts:exits"],
     "'aggregator.name' = 'contracts:exits' (contracts:exits) failed: it called sys.exit(3)"),
    (["model.name=contracts:no_params", "population.compute.train_flops_per_sample=100.0"],
     "'model.name' = 'contracts:no_params' (contracts:no_params) returned a Flatten without "
     "parameters"),
])
def test_a_plugin_broken_before_the_run_is_exit_2_and_one_line(
        folder: Path, capsys: pytest.CaptureFixture[str], sets: list[str], message: str
) -> None:
    code, err = _main(folder, capsys, *sets)
    assert code == 2, err
    assert message in err and len(err.splitlines()) == 1
    assert not (folder / "out").exists()


@pytest.mark.slow
@pytest.mark.parametrize("sets, message", [
    (["aggregator.name=contracts:wrong_shape"],
     "plug-in 'aggregator.name' (the rule 'wrong_shape', "
     "contracts:wrong_shape.<locals>.combine) broke its contract: its combine returned "
     "params of shape (59,) and dtype torch.float32, not the global model's (60,)"),
    (["aggregator.name=contracts:wrong_keep"],
     "plug-in 'aggregator.name' (the rule 'wrong_keep', contracts:wrong_keep.<locals>.select) "
     "broke its contract: its select returned a keep mask of shape (<n>,) and dtype bool for "
     "<n> reporting devices"),
    (["aggregator.name=contracts:wrong_sampling"],
     "its sampling returned chances of shape (3,) and dtype float64 for <n> training devices"),
    (["aggregator.name=deltafl", "estimator.name=contracts:est_abc"],
     "plug-in 'estimator.name' = 'contracts:est_abc' (contracts:est_abc) broke its contract: "
     "its estimate returned the threshold 'abc' (a str)"),
    (["aggregator.name=deltafl", "estimator.shadow=['contracts:est_none']"],
     "plug-in 'estimator.shadow[0]' = 'contracts:est_none' (contracts:est_none) broke its "
     "contract: its estimate returned the threshold None (a NoneType)"),
])
def test_a_plugin_answer_of_the_wrong_kind_fails_the_run_in_one_line(
        folder: Path, capsys: pytest.CaptureFixture[str], sets: list[str], message: str
) -> None:
    code, err = _main(folder, capsys, *sets)
    assert code == 1, err
    # <n>: the devices as the run has them
    pattern = re.escape(message).replace("<n>", r"\d+")
    assert re.search(pattern, err) and len(err.splitlines()) == 1, err
    assert err.startswith(f"simfl: {folder / 'out'}: run failed: ")
    assert "(docs/extending.md)" in err
    manifest = json.loads((folder / "out" / "manifest.json").read_text())
    assert manifest["status"] == "failed"
    assert manifest["reason"].startswith("PluginBroke: ")
    assert re.search(pattern, manifest["reason"])


def _rule() -> Aggregator:
    return Aggregator("r", True, keep_all, weighted_mean)


def test_a_rules_answers_are_checked_where_the_learner_receives_them() -> None:
    rule, params = _rule(), torch.zeros(4)
    ok = Selection(np.array([True, False]))
    assert checked_selection(rule, ok, 2) is ok
    as_list = checked_selection(rule, Selection([True, False]), 2)  # type: ignore[arg-type]
    assert as_list.keep.dtype == np.bool_ and as_list.keep.tolist() == [True, False]
    for bad, what in [(np.array([True]), "of shape (1,)"),
                      (np.array([1, 0]), "dtype int64"),
                      ("yes", "shape () and dtype <U3")]:
        with pytest.raises(PluginBroke, match=r"broke its contract: its select returned a "
                                              r"keep mask .*" + re.escape(what)):
            checked_selection(rule, Selection(bad), 2)  # type: ignore[arg-type]
    with pytest.raises(PluginBroke, match="its select returned the threshold 'x' \\(a str\\)"):
        checked_selection(rule, Selection(np.ones(2, bool), "x"), 2)  # type: ignore[arg-type]
    with pytest.raises(PluginBroke, match="its select returned a ndarray"):
        checked_selection(rule, np.ones(2, bool), 2)
    assert checked_combined(rule, Combined(params + 1), params).params.tolist() == [1.0] * 4
    for bad in (Combined(params.double()), Combined(params[:3]), params):
        with pytest.raises(PluginBroke, match="its combine returned"):
            checked_combined(rule, bad, params)
    assert checked_sampling(rule, None, 5) is None
    assert checked_sampling(rule, [1, 2, 3], 3).tolist() == [1, 2, 3]  # type: ignore[union-attr]
    with pytest.raises(PluginBroke, match="its sampling returned chances of shape \\(2,\\)"):
        checked_sampling(rule, np.ones(2), 3)


def test_an_estimate_is_checked_where_the_panel_receives_it() -> None:
    who = "'estimator.name' = 'x:y' (x:y)"
    for fine in (Estimate(1.5), Estimate(np.float32(2.0)), Estimate(float("nan")),
                 Estimate(3, (), 2)):
        check_estimate(fine, who)
    for bad, what in [(1.5, "its estimate returned 1.5 (a float)"),
                      (Estimate("abc"), "its estimate returned the threshold 'abc' (a str)"),
                      (Estimate(None), "its estimate returned the threshold None"),
                      (Estimate(True), "its estimate returned the threshold True (a bool)"),
                      (Estimate(np.ones(3)), "its estimate returned the threshold array"),
                      (Estimate(1.0, [1]), "its estimate returned the exchanges [1] (a list)"),
                      (Estimate(1.0, (), -1), "its estimate returned secure_sums -1")]:
        with pytest.raises(PluginBroke) as broke:
            check_estimate(bad, who)
        assert str(broke.value).startswith(f"plug-in {who} broke its contract: {what}")


def test_estimators_giving_themselves_one_name_are_refused() -> None:
    from simfl.quantile.estimators import CohortExact
    from simfl.quantile.panel import EstimatorPanel
    from simfl.rng import Streams
    from simfl.scenario import from_dict

    @plugins.register_estimator("twin")
    def twin(ctx: object) -> CohortExact:
        return CohortExact()  # named "cohort_exact", as simfl's own

    try:
        cfg = from_dict({"aggregator": {"name": "deltafl"},
                         "estimator": {"shadow": ["twin"]}}).estimator
        with pytest.raises(InputError, match=r"name themselves \['cohort_exact', "
                                             r"'cohort_exact'\]: each needs its own name"):
            EstimatorPanel(cfg, 0.5, 4, Streams(0))
    finally:
        plugins.ESTIMATORS.table.pop("twin")


def test_the_contracts_are_documented() -> None:
    """docs/extending.md states what is checked, as the messages point there."""
    text = " ".join((Path(__file__).parents[1] / "docs" / "extending.md").read_text().split())
    for phrase in ("a bool array with one entry per reporting device",
                   "a tensor of `global_params`' shape and dtype",
                   "its `threshold` a number", "floating-point parameters",
                   "`sys.exit`"):
        assert phrase in text, phrase

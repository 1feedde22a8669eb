"""The registry is the one place that knows what a name is: no aggregation rule's, data
set's, model's or availability mode's name is compared outside its own entry, and a
plug-in gets what simfl's own names get: a rule that filters by the estimator panel's
threshold the panel, its shadows and bias.parquet; a data set with hooks the memory
guard's terms; an availability mode with rates the ipw_known oracle."""

from __future__ import annotations

import re
import textwrap
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import polars as pl
import pytest

import simfl
from simfl import plugins
from simfl.cli import main
from simfl.data import load_data
from simfl.data import synthetic as syn
from simfl.errors import InputError
from simfl.population import always_online, known_rates
from simfl.population.availability import populate
from simfl.population.diurnal import ProfileRates
from simfl.rng import Streams
from simfl.runs.memory import estimate, key_sizes
from simfl.scenario import DataConfig, SyntheticConfig, from_dict

PACKAGE = Path(__file__).resolve().parents[1] / "simfl"


def _registry(path: Path) -> bool:
    """Whether ``path`` is a module of the registry itself (simfl/plugins/)."""
    return path.relative_to(PACKAGE).parts[0] == "plugins"


def test_no_rule_name_is_compared_outside_the_registry() -> None:
    names = "|".join(re.escape(p.name) for p in plugins.AGGREGATORS.builtins())
    quoted = rf"""["']({names})["']"""
    compared = re.compile(rf"(==|!=|\bin)\s*\(?\s*{quoted}|{quoted}\s*(==|!=|in\b)")
    found = [f"{path.relative_to(PACKAGE.parent)}:{i}: {line.strip()}"
             for path in PACKAGE.rglob("*.py")
             if not _registry(path) and "aggregate" not in path.parts
             for i, line in enumerate(path.read_text().splitlines(), 1)
             if compared.search(line)]
    assert found == []


SCENARIO = """
seed = 2
[data.synthetic]
num_clients = 40
[aggregator]
name = "tailrules:tail_average"
theta = 0.5
[estimator]
name = "ipw"
shadow = ["cohort_exact"]
bias_every = 2
decomposition_draws = 4
[server]
num_rounds = 4
clients_per_round = 8
[eval]
every = 4
"""


def test_a_plugin_rule_that_filters_by_threshold_gets_the_panel(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "tailrules.py").write_text(textwrap.dedent('''
        from simfl.aggregate.deltafl import deltafl

        def tail_average(theta):
            """Δ-FL's mean of the kept updates, as a user would wrap it."""
            return deltafl(theta)

        tail_average.filters_by_threshold = True
    '''))
    monkeypatch.syspath_prepend(str(tmp_path))
    scenario = tmp_path / "s.toml"
    scenario.write_text(SCENARIO)
    assert main([str(scenario), "--out", str(tmp_path / "run"), "--quiet"]) == 0
    bias = pl.read_parquet(tmp_path / "run" / "bias.parquet")
    assert sorted(bias["estimator"].unique().to_list()) == ["cohort_exact", "ipw"]
    assert bias.filter(pl.col("driver"))["estimator"].unique().to_list() == ["ipw"]
    rounds = pl.read_parquet(tmp_path / "run" / "rounds.parquet").sort("round")
    driver = bias.filter(pl.col("driver")).sort("round")
    np.testing.assert_array_equal(rounds["quantile_estimate"], driver["estimate"])
    assert driver.filter(pl.col("oracle_quantile").is_not_null())["round"].to_list() == [0, 2]


def test_no_data_set_model_or_mode_name_is_compared_outside_the_registry() -> None:
    """A scenario's data.dataset, model.name or population.availability.mode compared with
    one of simfl's own names (``mode == "trace"``, ``dataset in ("femnist", "leaf")``)
    outside simfl/plugins/: what such a check stands for is a row's keys, reads or hooks.
    None is left (the command line's trace statistics and the study's rates oracle ask
    the registry; the reproduction table keys its cause C1 by model, as its margins)."""
    names = "|".join(re.escape(p.name) for registry in (plugins.DATASETS, plugins.MODELS,
                                                        plugins.AVAILABILITY)
                     for p in registry.builtins())
    quoted = rf"""["']({names})["']"""
    subject = r"\b(dataset|mode|name|model)\b(?!\s*[.(\[])"  # the name itself
    compared = re.compile(rf"{subject}\s*(==|!=|not\s+in|in)\s*\(?\s*{quoted}"
                          rf"|{quoted}\s*(==|!=|not\s+in|in)\s*\(?\s*[\w.]*{subject}")
    found = {(str(path.relative_to(PACKAGE.parent)), line.strip())
             for path in PACKAGE.rglob("*.py") if not _registry(path)
             for line in path.read_text().splitlines() if compared.search(line)}
    assert found == set()


def test_every_hook_of_simfls_own_names_is_a_function_of_its_point() -> None:
    for registry in plugins.REGISTRIES.values():
        for plugin in registry.builtins():
            for hook, _ in plugin.hooks:
                assert hook in plugins.HOOKS[registry.point], (plugin.name, hook)
                assert callable(plugin.hook(hook)), (plugin.name, hook)


@pytest.mark.parametrize("table", [{"num_clients": 30}, {"num_clients": 41, "min_samples": 60}])
def test_synthetic_datas_sizes_are_the_loaded_counts(table: dict[str, int]) -> None:
    """The sizes hook counts what load_synthetic makes, before it is loaded (exact: no
    client is filtered out and no validation split is made)."""
    cfg = DataConfig(synthetic=SyntheticConfig(**table))
    sizes = syn.sizes(cfg)
    data = load_data(cfg, Streams(0))
    assert sizes.exact
    assert (sizes.train, sizes.devices) == (data.train.num_clients,
                                           data.train.num_clients + data.test.num_clients)
    most = max(int(data.train.num_samples.max()), int(data.test.num_samples.max()))
    assert most <= sizes.most_samples
    assert not syn.sizes(DataConfig(synthetic=SyntheticConfig(**table),
                                    min_samples_per_client=10**6)).exact


def test_a_plugin_data_set_with_hooks_gets_the_memory_guards_terms() -> None:
    """Synthetic data registered again as a plug-in, with the same hooks, is estimated
    term for term as the built-in; without hooks it adds no data, device or model term."""
    hooks = {"input_shape": syn.input_shape, "memory_terms": syn.memory_terms,
             "sizes": syn.sizes}
    simfl.register_dataset("synthetic_again", **hooks)(syn.load_synthetic)
    simfl.register_dataset("synthetic_bare")(syn.load_synthetic)
    try:
        table = {"data": {"synthetic": {"num_clients": 500}},
                 "aggregator": {"name": "deltafl"}, "estimator": {"bias_every": 2}}
        own = estimate(from_dict(table))
        again = from_dict({**table, "data": {**table["data"], "dataset": "synthetic_again"}})
        assert estimate(again) == own
        assert key_sizes(again) == syn.sizes(again.data)
        bare = estimate(from_dict({**table, "data": {**table["data"],
                                                     "dataset": "synthetic_bare"}}))
        assert len(bare) < len(own)
        assert sum(term[0] for term in bare) < sum(term[0] for term in own)
        assert ("the model" in {term[2] for term in bare}
                and all(term[0] == 0 for term in bare if term[2] == "the model"))
    finally:
        plugins.DATASETS.table.pop("synthetic_again")
        plugins.DATASETS.table.pop("synthetic_bare")


def test_a_plugin_mode_with_rates_is_an_oracle_for_ipw_known() -> None:
    """ipw_known needs a mode's rates hook, a plug-in's (here an attribute of its factory)
    as simfl's own; its rates are what known_rates gives, and an unknown hook is refused."""
    def everyone(cfg: object, devices: SimpleNamespace, streams: Streams) -> object:
        return always_online(devices.region_idx, len(devices.region_names))

    def rates(cfg: object, devices: SimpleNamespace, mapped: object) -> ProfileRates:
        return ProfileRates(devices.utc_offset_s, (0.5,) * 24)

    everyone.rates = rates  # type: ignore[attr-defined]
    simfl.register_availability("everyone")(everyone)
    try:
        scenario = from_dict({"estimator": {"shadow": ["ipw_known"]},
                              "population": {"availability": {"mode": "everyone"}}})
        devices = SimpleNamespace(region_idx=np.zeros(3, np.int64), region_names=["a"],
                                  utc_offset_s=np.zeros(3), num_devices=3)
        cfg = scenario.population.availability
        drawn = populate(cfg, devices, Streams(0))  # type: ignore[arg-type]
        assert drawn.habits is None and drawn.trace is None
        assert drawn.availability.num_online(5.0) == 3
        truth = known_rates(cfg, devices)  # type: ignore[arg-type]
        assert isinstance(truth, ProfileRates) and truth.profile == (0.5,) * 24
        simfl.register_availability("bare", populate=lambda *args: everyone(*args[:3]))(
            everyone)
        with pytest.raises(InputError, match="'bare': its populate hook returned a "
                                             "Availability, not a"):
            populate(replace(cfg, mode="bare"), devices, Streams(0))  # type: ignore[arg-type]
    finally:
        plugins.AVAILABILITY.table.pop("everyone")
        plugins.AVAILABILITY.table.pop("bare", None)
    with pytest.raises(InputError, match="'sizes' is no hook of availability"):
        simfl.register_availability("odd", sizes=rates)(everyone)


def test_an_estimator_that_needs_rates_is_refused_by_a_mode_without_them() -> None:
    """``needs_rates`` (ipw_known's flag; a plug-in's by attribute or decorator) refuses
    at load a mode without a rates hook, also where shifted wraps it (its base hook), in
    ipw_known's words; a mode with rates loads them all."""
    def bare(cfg: object, devices: SimpleNamespace, streams: Streams) -> object:
        return always_online(devices.region_idx, len(devices.region_names))

    def oracle(ctx: object) -> object:
        raise AssertionError("loading a scenario builds no estimator")

    def told(ctx: object) -> object:
        raise AssertionError("loading a scenario builds no estimator")

    oracle.needs_rates = True  # type: ignore[attr-defined]
    simfl.register_availability("bare")(bare)
    simfl.register_estimator("oracle")(oracle)
    simfl.register_estimator("told", needs_rates=True)(told)
    wrapped = {"shifted": {"base": "ipw_known"}}
    try:
        for shadow, named in ((["ipw_known"], "ipw_known"), (["shifted"], "ipw_known"),
                              (["cohort_exact", "oracle"], "oracle"), (["told"], "told")):
            with pytest.raises(InputError, match=rf"estimator '{named}' needs the online "
                               r"rates of the availability model; 'population\.availability"
                               r"\.mode' = 'bare' has none"):
                from_dict({"population": {"availability": {"mode": "bare"}},
                           "estimator": {"shadow": shadow, **wrapped}})
        from_dict({"population": {"availability": {"mode": "bare"}},
                   "estimator": {"shadow": ["shifted", "cohort_exact"]}})  # wraps no oracle
        loaded = from_dict({"estimator": {"shadow": ["ipw_known", "shifted", "oracle", "told"],
                                          **wrapped}})
        assert loaded.estimator.shadow == ("ipw_known", "shifted", "oracle", "told")
    finally:
        plugins.AVAILABILITY.table.pop("bare")
        plugins.ESTIMATORS.table.pop("oracle")
        plugins.ESTIMATORS.table.pop("told")


def test_a_wrapped_estimator_reads_its_keys_through_the_base_hook() -> None:
    """An estimator's base (shifted's estimator.shifted.base, a plug-in's base hook) reads
    its own keys for the scenario: estimator.ipw is set with ipw only wrapped; without
    the hook the key has no reader and is refused."""
    def wrapper(ctx: object) -> object:
        raise AssertionError("loading a scenario builds no estimator")

    def plain(ctx: object) -> object:
        raise AssertionError("loading a scenario builds no estimator")

    simfl.register_estimator("wrapper", base=lambda cfg: "ipw")(wrapper)
    simfl.register_estimator("plain")(plain)
    ipw = {"ipw": {"prior": 2.0}}
    try:
        from_dict({"estimator": {"shadow": ["shifted"], "shifted": {"base": "ipw"}, **ipw}})
        from_dict({"estimator": {"shadow": ["wrapper"], **ipw}})
        for estimator in ({"shadow": ["shifted"]}, {"shadow": ["plain"]}):
            with pytest.raises(InputError, match="'estimator.ipw' is set but no estimator "
                                                 "that reads it"):
                from_dict({"estimator": {**estimator, **ipw}})
    finally:
        plugins.ESTIMATORS.table.pop("wrapper")
        plugins.ESTIMATORS.table.pop("plain")


def test_a_model_with_a_flop_count_is_not_counted_from_its_forward_pass() -> None:
    """A model row's train_flops hook is its cost: the run counts no forward pass (this
    factory would fail if built); without it the cost is counted (the cnn's, a plug-in's:
    tests/test_plugins.py)."""
    from simfl.runs.build import _counted_cost

    def costly(input_shape: tuple[int, ...], num_classes: int) -> object:
        raise AssertionError("a model with a count is not built to count it")

    simfl.register_model("costly", train_flops=lambda: 1234.0)(costly)
    try:
        scenario = from_dict({"model": {"name": "costly"}})
        assert _counted_cost(scenario, None) is scenario.population  # type: ignore[arg-type]
        from simfl.population.compute import train_flops_per_sample

        assert train_flops_per_sample(scenario.population.compute, "costly") == 1234.0
    finally:
        plugins.MODELS.table.pop("costly")


def test_trace_stats_counts_a_data_set_by_its_hook_and_assumes_only_for_files(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """``trace stats`` counts a scenario's training devices by the data set's count_train
    hook (FEMNIST's writer column) without loading it; where loading fails with the
    data not at hand, a data set made from its keys (a sizes hook, synthetic's) keeps its
    error and any other is assumed to have ASSUMED_NUM_DEVICES."""
    from simfl.cli.trace_stats import ASSUMED_NUM_DEVICES, _count_devices

    def missing(cfg: DataConfig, streams: Streams) -> object:
        raise InputError("no file here")

    monkeypatch.delenv("SIMFL_DATA_DIR", raising=False)
    simfl.register_dataset("counted", count_train=lambda cfg, streams: 7)(missing)
    simfl.register_dataset("filed")(missing)
    simfl.register_dataset("made", sizes=syn.sizes)(missing)
    try:
        assert _count_devices(from_dict({"data": {"dataset": "counted"}}), None) == (7, "")
        count, note = _count_devices(from_dict({"data": {"dataset": "filed"}}), None)
        assert count == ASSUMED_NUM_DEVICES and note.startswith("assumed: the data is not "
                                                                "at hand")
        with pytest.raises(InputError, match="no file here"):
            _count_devices(from_dict({"data": {"dataset": "made"}}), None)
        assert plugins.DATASETS.table["femnist"].has_hook("count_train")
    finally:
        for name in ("counted", "filed", "made"):
            plugins.DATASETS.table.pop(name)


def test_the_theory_oracle_is_the_modes_rates_rebuilt_from_the_tables() -> None:
    """simfl.study.theory rebuilds the oracle through the mode's rates hook from
    devices.parquet's regions and offsets: diurnal's profile at each device's local hour,
    always's ones; a trace's need the mapped trace, which the tables do not keep."""
    from simfl.study.theory import oracle_rates

    devices = pl.DataFrame({"client_idx": [2, 0, 1],
                            "region": ["europe_africa", "americas", "asia_pacific"],
                            "utc_offset_h": [1.0, -5.0, 8.0]})
    idx, t = np.arange(3), np.array([0.0, 3600.0 * 7, 3600.0 * 13])
    profile = tuple((h + 1) / 25.0 for h in range(24))
    manifest = {"scenario": {"population": {"availability": {
        "mode": "diurnal", "online_prob_by_hour": list(profile)}}}}
    rebuilt = oracle_rates(manifest, devices)
    expected = ProfileRates(np.array([-5.0, 8.0, 1.0]) * 3600.0, profile)
    np.testing.assert_array_equal(rebuilt.online_prob(idx, t), expected.online_prob(idx, t))
    always = oracle_rates({"scenario": {}}, devices)
    np.testing.assert_array_equal(always.online_prob(idx, t), np.ones(3))
    trace = {"scenario": {"population": {"availability": {"mode": "trace",
                                                          "trace_path": "t.parquet"}}}}
    with pytest.raises(InputError, match="availability mode 'trace': no oracle rates to "
                                         "rebuild"):
        oracle_rates(trace, devices)


@pytest.mark.parametrize(("declared", "mode", "noted"), [
    ("", "async", True), ("mean_rule.applies_scales = True", "async", False),
    ("", "sync", False)])
def test_an_async_rule_that_does_not_declare_it_applies_the_scales_is_noted(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        declared: str, mode: str, noted: bool) -> None:
    from simfl.scenario import from_dict, unscaled_rule_note

    module = f"meanrules_{mode}_{bool(declared)}"  # a fresh module for each case
    (tmp_path / f"{module}.py").write_text(textwrap.dedent(f'''
        from simfl.aggregate.fedavg import fedavg

        def mean_rule():
            return fedavg()

        {declared}
    '''))
    monkeypatch.syspath_prepend(str(tmp_path))
    scenario = from_dict({"aggregator": {"name": f"{module}:mean_rule"},
                          "server": {"mode": mode}})
    note = unscaled_rule_note(scenario)
    assert (note is not None) == noted
    if noted:  # and a run says it before it starts
        assert note is not None and f"'{module}:mean_rule' does not declare" in note
        from simfl.cli import main
        out = tmp_path / "run"
        capsys.readouterr()
        assert main([str(Path(__file__).parent.parent / "scenarios" / "quick_synthetic.toml"),
                     "--out", str(out), "--quiet", "--set",
                     f'aggregator.name="{module}:mean_rule"', "--set", 'server.mode="async"',
                     "--set", "server.num_rounds=2"]) == 0
        assert note in capsys.readouterr().out  # with the run's other lines
    for rule in ("fedavg", "fedprox", "deltafl", "term"):  # simfl's async rules apply them
        assert unscaled_rule_note(from_dict({"aggregator": {"name": rule},
                                             "server": {"mode": "async"}})) is None

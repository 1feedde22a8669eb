"""Compute speed: FLOP counts, LeNet calibration, benchmark scores and the fallback."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from simfl import plugins
from simfl.errors import InputError
from simfl.population import compute
from simfl.population.devices import build_devices
from simfl.rng import Streams
from simfl.scenario import ComputeConfig, PopulationConfig
from tests.conftest import data_dir, requires_data

LENET5 = compute.LENET5_TRAIN_FLOPS  # devices at the reference cost: the measured LeNet's


def test_flop_counts() -> None:
    assert compute.LENET5_FORWARD_FLOPS == 416_520  # the usual "0.42 MFLOP"
    assert compute.CONVNET_FORWARD_FLOPS == 24 * 24 * 32 * 25 + 8 * 8 * 64 * 32 * 25 + 1024 * 62
    assert compute.LINEAR_FORWARD_FLOPS == 784 * 62
    assert compute.LENET5_TRAIN_FLOPS == 3 * 416_520


def test_each_model_row_gives_its_hand_count() -> None:
    """The model rows' train_flops hooks are the hand counts, 3 x the forward MACs; the
    cnn has none (a run counts it from its forward pass)."""
    cfg = ComputeConfig()
    forward = {"linear": 784 * 62, "convnet": compute.CONVNET_FORWARD_FLOPS,
               "gru": 20 * (53 * 384 + 128 * 384) + 128 * 53}
    for name, macs in forward.items():
        assert compute.train_flops_per_sample(cfg, name) == 3.0 * macs
    assert not plugins.MODELS.table["cnn"].has_hook("train_flops")


def test_time_per_sample_scales_with_flops_and_speed() -> None:
    speed = np.array([0.5, 1.0, 2.0])
    t = compute.train_s_per_sample(speed, 1e-3, compute.LENET5_TRAIN_FLOPS)
    assert t == pytest.approx([2e-3, 1e-3, 5e-4])
    conv = compute.train_s_per_sample(speed, 1e-3, compute.convnet_train_flops())
    assert conv / t == pytest.approx(np.full(3, compute.CONVNET_FORWARD_FLOPS
                                             / compute.LENET5_FORWARD_FLOPS))


def test_fallback_without_data(tmp_path: Path) -> None:
    assert compute.devices_dir(None) is None
    assert compute.devices_dir(tmp_path) is None  # folder without the files
    ref = compute.lenet_s_per_sample(None, 16)
    assert 1e-3 < ref < 1.5e-3  # the measured range of the three phones
    cfg = PopulationConfig(compute=ComputeConfig(speed_log_sigma=0.93,
                                                 train_flops_per_sample=LENET5))
    devices = build_devices(cfg, 20_000, None, Streams(0), tmp_path)
    assert np.median(devices.speed_rel) == pytest.approx(1.0, abs=0.03)
    assert np.std(np.log(devices.speed_rel)) == pytest.approx(0.93, rel=0.03)
    assert np.median(devices.train_s_per_sample) == pytest.approx(ref, rel=0.03)


def test_the_table_records_where_the_speeds_came_from(tmp_path: Path) -> None:
    devices = build_devices(PopulationConfig(), 5, None, Streams(0), tmp_path)
    assert devices.speed_origin == {"speeds": "lognormal", "lenet_reference": "built-in"}
    assert "speed_origin" not in devices.columns()
    benchmark = ComputeConfig(speed_source="benchmark")
    assert compute.speed_origin(benchmark, None)["speeds"] == "benchmark"  # draw: InputError


@requires_data
def test_auto_takes_the_benchmark_when_the_devices_folder_is_there() -> None:
    folder = compute.devices_dir(data_dir())
    auto = compute.speed_origin(ComputeConfig(), folder)
    assert auto == {"speeds": "benchmark", "lenet_reference": "measured"}
    lognormal = compute.speed_origin(ComputeConfig(speed_source="lognormal"), folder)
    assert lognormal == {"speeds": "lognormal", "lenet_reference": "measured"}


def test_benchmark_source_requires_data(tmp_path: Path) -> None:
    cfg = ComputeConfig(speed_source="benchmark")
    with pytest.raises(InputError, match="SIMFL_DATA_DIR"):
        compute.draw_speed_rel(cfg, 10, np.random.default_rng(0), None)


def test_a_model_without_a_count_needs_flops() -> None:
    with pytest.raises(InputError, match="no FLOP count for model 'cnn': set "
                                         "population.compute.train_flops_per_sample"):
        compute.train_flops_per_sample(ComputeConfig(), "cnn")
    assert compute.train_flops_per_sample(ComputeConfig(train_flops_per_sample=5.0),
                                          "cnn") == 5.0


def test_a_plugin_models_count_is_its_hook_and_checked() -> None:
    """A plug-in model's train_flops hook gives its count as a built-in's does; one that
    gives no positive finite number is an InputError naming model.name."""
    def tiny(input_shape: tuple[int, ...], num_classes: int) -> object:
        raise AssertionError("the count builds no model")

    for name, value in (("counted", 1200), ("odd", float("nan")), ("zero", 0.0)):
        plugins.register_model(name, train_flops=lambda value=value: value)(tiny)
    try:
        assert compute.train_flops_per_sample(ComputeConfig(), "counted") == 1200.0
        for name in ("odd", "zero"):
            with pytest.raises(InputError, match=f"'model.name' = '{name}': its train_flops "
                                                 "hook returned"):
                compute.train_flops_per_sample(ComputeConfig(), name)
    finally:
        for name in ("counted", "odd", "zero"):
            plugins.MODELS.table.pop(name)


@requires_data
def test_calibration_reproduces_median_lenet_time() -> None:
    folder = compute.devices_dir(data_dir())
    assert folder is not None
    # The median of the three phones' measured expr_train(16) / 16, in seconds.
    measured = []
    for path in sorted(folder.glob("ondevice_training/*_lenet_time_table.csv")):
        rows = [line.split(",") for line in path.read_text().splitlines()[1:]]
        measured += [float(r[2]) / 16 / 1000 for r in rows if r[1] == "16"]
    assert len(measured) == 3
    ref = compute.lenet_s_per_sample(folder, 16)
    assert ref == pytest.approx(float(np.median(measured)))
    for mix in ("deployment", "benchmark_list"):
        cfg = PopulationConfig(compute=ComputeConfig(phone_mix=mix, calibration_batch_size=16,
                                                     train_flops_per_sample=LENET5))
        devices = build_devices(cfg, 4000, None, Streams(0), data_dir())
        # seconds per sample = the median LeNet time scaled by median score / score
        assert devices.train_s_per_sample * devices.speed_rel == pytest.approx(
            np.full(4000, ref))
        scores = compute.load_phone_scores(folder, "cpu_float", mix)
        median_phone = np.argmin(np.abs(scores - np.median(scores)))
        assert np.median(scores) / scores[median_phone] == pytest.approx(1.0, abs=0.02)
        assert np.median(devices.train_s_per_sample) == pytest.approx(ref, rel=0.1)


@requires_data
def test_benchmark_speeds_follow_the_scores() -> None:
    folder = compute.devices_dir(data_dir())
    assert folder is not None
    scores = compute.load_phone_scores(folder, "ai_score", "benchmark_list")
    assert scores.size == 307 and scores.max() == 76206  # 333 rows, 307 distinct models
    speed = compute.draw_speed_rel(ComputeConfig(score="ai_score", phone_mix="benchmark_list"),
                                   10_000, np.random.default_rng(0), folder)
    assert np.isin((speed * np.median(scores)).round(3), scores.round(3)).all()
    assert speed.max() / speed.min() > 100  # the spread of real phones

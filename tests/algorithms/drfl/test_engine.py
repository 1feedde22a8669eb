"""DRFL iterations in simulated time: exact durations, waiting for devices, lost attempts."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from simfl.algorithms.drfl.engine import build_fleet, message_bytes, simulate_iterations
from simfl.population.availability import from_intervals
from simfl.population.build import Population
from simfl.rng import Streams
from simfl.scenario import PopulationConfig

NUM_BYTES = message_bytes(4)
BATCH = np.array([100.0, 200.0, 50.0])


@pytest.fixture
def fleet() -> Population:
    return build_fleet(PopulationConfig(), 3, 4, 20.0, Streams(0))


def _task_s(fleet: Population, device: int) -> float:
    """Download, solve, upload of one device alone on its access links."""
    paths, devices = fleet.paths, fleet.devices
    return (paths.path_latency_s(device, "down") + NUM_BYTES / devices.down_bytes_per_s[device]
            + BATCH[device] * devices.train_s_per_sample[device]
            + paths.path_latency_s(device, "up") + NUM_BYTES / devices.up_bytes_per_s[device])


def test_always_online_iterations_last_as_long_as_the_slowest_device(fleet: Population) -> None:
    rows = simulate_iterations(fleet, 4, NUM_BYTES, BATCH)
    slowest = max(_task_s(fleet, s) for s in range(3))
    np.testing.assert_allclose(rows["t_end_s"] - rows["t_start_s"], slowest, rtol=1e-9)
    np.testing.assert_allclose(rows["t_end_s"], slowest * np.arange(1, 5), rtol=1e-9)
    assert rows["bytes_down"].to_list() == [3 * NUM_BYTES] * 4
    assert rows["bytes_up"].to_list() == [3 * NUM_BYTES] * 4
    assert rows["num_retries"].sum() == 0


def _with_intervals(fleet: Population, on: list[tuple[int, float, float]]) -> Population:
    device, t_on, t_off = (np.array(v) for v in zip(*on, strict=True))
    availability = from_intervals(device.astype(np.int64), t_on.astype(float),
                                  t_off.astype(float), fleet.devices.region_idx,
                                  len(fleet.devices.region_names))
    return replace(fleet, availability=availability)


def test_offline_device_is_waited_for(fleet: Population) -> None:
    late = _with_intervals(fleet, [(0, 500.0, np.inf), (1, 0.0, np.inf), (2, 0.0, np.inf)])
    rows = simulate_iterations(late, 1, NUM_BYTES, BATCH)
    assert rows["t_end_s"][0] == pytest.approx(
        max(500.0 + _task_s(fleet, 0), _task_s(fleet, 1), _task_s(fleet, 2)))
    assert rows["wait_s"][0] == pytest.approx(500.0)


def test_device_leaving_mid_task_starts_again(fleet: Population) -> None:
    short = _task_s(fleet, 1) / 2  # device 1 leaves halfway, returns at t = 100
    flaky = _with_intervals(fleet, [(0, 0.0, np.inf), (1, 0.0, short), (1, 100.0, np.inf),
                                    (2, 0.0, np.inf)])
    rows = simulate_iterations(flaky, 1, NUM_BYTES, BATCH)
    assert rows["num_retries"][0] == 1
    assert rows["bytes_down"][0] == 4 * NUM_BYTES  # device 1 downloaded twice
    assert rows["t_end_s"][0] == pytest.approx(100.0 + _task_s(fleet, 1))

"""bench/engine_cost.py: its synthetic clients have FEMNIST's shapes and sizes, and its
table reads the targets off the runs' figures."""

from __future__ import annotations

from collections.abc import Generator

import numpy as np
import pytest
import simpy

from tests.bench_scripts import bench_module
from tests.sim.test_links import make_paths


def test_synthetic_clients_have_femnists_shapes_and_sizes() -> None:
    bench = bench_module("engine_cost")
    data = bench.synthetic_data(200)
    assert (data.train.num_clients, data.test.num_clients) == (180, 20)
    counts = np.concatenate([data.train.num_samples, data.test.num_samples])
    assert counts.min() >= 19 and counts.max() <= 584
    assert 150 <= np.median(counts) <= 210  # FEMNIST's median 179, drawn
    assert data.train.sample_shape == (784,) and data.num_classes == 62
    assert float(data.train.x.min()) >= 0 and float(data.train.x.max()) <= 1
    assert int(data.train.y.max()) < 62 and len(data.train.y) == data.train.offsets[-1]


def test_table_reads_the_targets_off_the_figures(capsys: pytest.CaptureFixture[str]) -> None:
    bench = bench_module("engine_cost")

    def run(k: int, mode: str, round_s: float, outside_s: float) -> dict[str, object]:
        return {"k": k, "mode": mode, "data": "femnist", "round_s": round_s,
                "train_s": round_s - outside_s, "outside_s": outside_s,
                "outside_median_s": outside_s * 0.9, "outside_cpu_s": outside_s / 2, "gc_s": 0.0}

    bench.table([run(100, "train", 0.2, 0.01), run(1000, "train", 2.0, 0.08)],
                [run(1000, "train", 2.5, 0.6)])
    out = capsys.readouterr().out
    assert "100 -> 1,000 clients (train): 8.0x wall, 8.0x CPU" in out
    assert "at 1,000 clients: 4.0 % of the round" in out
    assert "| 1,000 | real | femnist | 2.000 | 1.920 | 0.080 | 0.072 | 4.0 % | 0.040 | 0.000 | " \
           "0.600 | 0.300 | 0.13 |" in out


def test_free_links_take_latency_plus_bytes_over_the_cap() -> None:
    # Two devices behind one link of 1 B/s, which sharing would make them share: free
    # links ignore it, each transfer takes its latency (0.5 s) plus bytes / its own cap.
    bench = bench_module("engine_cost")
    env = simpy.Environment()
    net = bench.FreeLinks(env, make_paths([4.0, 10.0], [0, 0], [1.0], [(0,)], latency_s=0.5))
    ends: dict[int, float] = {}

    def job(device: int, num_bytes: float, direction: str) -> Generator[simpy.Event, None, None]:
        yield net.transfer(device, num_bytes, direction)
        ends[device] = env.now

    env.process(job(0, 8.0, "up"))
    env.process(job(1, 30.0, "down"))
    env.run()
    assert ends == {0: 0.5 + 8.0 / 4.0, 1: 0.5 + 30.0 / 10.0}


def test_table_marks_free_links_runs(capsys: pytest.CaptureFixture[str]) -> None:
    bench = bench_module("engine_cost")
    row = {"k": 100, "mode": "train", "data": "femnist", "round_s": 0.2, "train_s": 0.19,
           "outside_s": 0.01, "outside_median_s": 0.01, "outside_cpu_s": 0.01, "gc_s": 0.0,
           "free_links": True}
    bench.table([row], [])
    assert "| 100 | real | femnist, free links | 0.200 |" in capsys.readouterr().out

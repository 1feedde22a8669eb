"""bench/engine_cost.py: its synthetic clients have FEMNIST's shapes and sizes, and its
table reads the targets off the runs' figures."""

from __future__ import annotations

import numpy as np
import pytest

from tests.bench_scripts import bench_module


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

"""bench/femnist_subset.py: a FEMNIST file cut to some seeds' writers loads the same for them."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from simfl.data import load_data
from simfl.errors import InputError
from simfl.rng import Streams
from simfl.scenario import load_scenario
from tests.bench_scripts import bench_module
from tests.data.test_femnist import fixture_arrays, write_npz

ROOT = Path(__file__).resolve().parents[1]
WRITERS = {f"w{i}": (2 + i % 3, 255 - 5 * i) for i in range(8)}


def scenario(tmp_path: Path) -> Path:
    npz = write_npz(tmp_path / "full.npz", **fixture_arrays(WRITERS))
    path = tmp_path / "s.toml"
    path.write_text(f'[data]\ndataset = "femnist"\npath = "{npz}"\nmax_clients = 4\n'
                    "test_client_fraction = 0.5\nmin_samples_per_client = 2\n")
    return path


def cut(scenario_path: Path, out: Path, *seeds: int) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(ROOT / "bench" / "femnist_subset.py"),
                           str(scenario_path), "--seeds", *map(str, seeds), "--out", str(out)],
                          capture_output=True, text=True, cwd=ROOT)


@pytest.mark.slow
def test_the_cut_file_gives_the_seeds_the_same_data_and_zeroes_the_other_writers(
    tmp_path: Path,
) -> None:
    path, out = scenario(tmp_path), tmp_path / "cut.npz"
    done = cut(path, out, 3)
    assert done.returncode == 0, done.stderr
    cfg = load_scenario(path).data
    full = load_data(cfg, Streams(3))
    with np.load(out) as z:
        cut_cfg = load_scenario(path, [f'data.path="{out}"']).data
        images, writers = z["images"], z["writer"]
    drawn = set(full.train.client_ids) | set(full.test.client_ids)
    assert len(drawn) == 4
    for writer in WRITERS:  # a drawn writer keeps its images; the others' are all 0
        assert (images[writers == writer].max() > 0) == (writer in drawn)
    mine = load_data(cut_cfg, Streams(3))
    for a, b in ((full.train, mine.train), (full.test, mine.test)):
        assert torch.equal(a.x, b.x) and torch.equal(a.y, b.y)
        assert list(a.client_ids) == list(b.client_ids)
    # a seed that draws another writer does not load the same from the cut file
    other = next(s for s in range(50) if set(load_data(cfg, Streams(s)).train.client_ids) - drawn)
    assert not torch.equal(load_data(cfg, Streams(other)).train.x,
                           load_data(cut_cfg, Streams(other)).train.x)


@pytest.mark.slow
def test_an_existing_out_file_is_left_alone_with_exit_status_2(tmp_path: Path) -> None:
    path, out = scenario(tmp_path), tmp_path / "mine.npz"
    out.write_bytes(b"a user's file")
    done = cut(path, out, 0)
    assert done.returncode == 2
    assert done.stderr.strip().count("\n") == 0 and "mine.npz" in done.stderr
    assert out.read_bytes() == b"a user's file"
    assert not (tmp_path / "mine.npz.partial").exists()


def test_a_cut_that_would_change_a_seeds_data_is_not_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    module = bench_module("femnist_subset")
    cfg = load_scenario(scenario(tmp_path)).data
    source = Path(cfg.path)
    rows = sum(n for n, _ in WRITERS.values())
    monkeypatch.setattr(module, "rows_read", lambda *_: np.zeros(rows, bool))  # zero every image
    with pytest.raises(InputError, match=r"cut\.npz: seed 0's data differs"):
        module.write_subset(source, tmp_path / "cut.npz", cfg, [0])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["full.npz", "s.toml"]

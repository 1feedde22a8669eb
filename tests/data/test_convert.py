"""FEMNIST conversion (LEAF json, TFF HDF5 -> simfl's npz): the loaders see the same data."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from simfl.data import load_data
from simfl.data.convert import convert_femnist
from simfl.data.packed import FederatedData
from simfl.errors import InputError
from simfl.rng import Streams
from simfl.scenario import DataConfig

# writer -> (train sample count, test sample count); ids in LEAF's form, shards out of order
WRITERS = {"f0003_12": (7, 2), "f0000_14": (5, 1), "f0102_40": (12, 3), "f0001_41": (3, 1),
           "f0050_07": (9, 2), "f0007_33": (4, 1)}


def make_writers(seed: int = 0) -> dict[str, dict[str, tuple[np.ndarray, np.ndarray]]]:
    """writer -> split -> (grey levels uint8 (n, 28, 28), labels (n,)), in LEAF polarity
    (mostly 255 background with dark strokes)."""
    rng = np.random.default_rng(seed)
    data = {}
    for writer, counts in WRITERS.items():
        data[writer] = {}
        for split, n in zip(("train", "test"), counts, strict=True):
            levels = np.full((n, 28, 28), 255, np.uint8)
            ink = rng.random((n, 28, 28)) < 0.2
            levels[ink] = rng.integers(0, 255, int(ink.sum()))
            data[writer][split] = (levels, rng.integers(0, 62, n))
    return data


def write_leaf(root: Path, data: dict[str, Any]) -> Path:
    """LEAF's data/femnist/data/{train,test}/*.json: x = grey level / 255, 784 floats."""
    writers = list(data)
    for split in ("train", "test"):
        for shard, members in enumerate((writers[3:], writers[:3])):
            table: dict[str, Any] = {"users": members, "num_samples": [], "user_data": {}}
            for w in members:
                levels, labels = data[w][split]
                table["num_samples"].append(len(labels))
                table["user_data"][w] = {"x": (levels.reshape(-1, 784) / 255.0).tolist(),
                                         "y": labels.tolist()}
            path = root / split / f"all_data_{shard}_niid_0_keep_0_{split}_9.json"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(table))
    return root


def write_tff(root: Path, data: dict[str, Any]) -> list[Path]:
    """TFF's fed_emnist_{train,test}.h5: examples/<writer>/pixels (n, 28, 28) float32 in
    [0, 1] (1.0 = background, as LEAF) and examples/<writer>/label (n,) int32."""
    h5py = pytest.importorskip("h5py")
    paths = []
    for split in ("test", "train"):  # given test first: the output still puts train first
        path = root / f"fed_emnist_{split}.h5"
        with h5py.File(path, "w") as h5:
            for w in data:
                levels, labels = data[w][split]
                group = h5.create_group(f"examples/{w}")
                group["pixels"] = (levels / 255.0).astype(np.float32)
                group["label"] = labels.astype(np.int32)
        paths.append(path)
    return paths


def load(dataset: str, path: Path, **cfg: Any) -> FederatedData:
    return load_data(DataConfig(dataset=dataset, path=str(path), **cfg), Streams(3))  # type: ignore[arg-type]


def assert_same(a: FederatedData, b: FederatedData, atol: float) -> None:
    assert a.num_classes == b.num_classes == 62
    for side_a, side_b in ((a.train, b.train), (a.test, b.test)):
        assert side_a.client_ids.tolist() == side_b.client_ids.tolist()
        np.testing.assert_array_equal(side_a.offsets, side_b.offsets)
        np.testing.assert_array_equal(side_a.y.numpy(), side_b.y.numpy())
        assert side_a.x.shape == side_b.x.shape
        np.testing.assert_allclose(side_a.x.numpy(), side_b.x.numpy(), rtol=0, atol=atol)


@pytest.mark.parametrize(("standardise", "pixel_scaling"),
                         [(False, "ink"), (True, "ink"), (False, "authors")])
def test_from_leaf_gives_the_leaf_loaders_arrays(tmp_path: Path, standardise: bool,
                                                 pixel_scaling: str) -> None:
    leaf = write_leaf(tmp_path / "leaf", make_writers())
    out = tmp_path / "femnist" / "femnist_writers.npz"
    convert_femnist(out, leaf_dir=leaf)
    options = dict(standardise=standardise, pixel_scaling=pixel_scaling,
                   test_client_fraction=0.3)
    from_npz = load("femnist", out, **options)
    from_json = load("leaf", leaf, **options)
    assert from_npz.train.num_clients == 4 and from_npz.test.num_clients == 2
    assert_same(from_npz, from_json, atol=1e-6 if not standardise else 1e-5)


def test_npz_layout_and_order(tmp_path: Path) -> None:
    data = make_writers()
    out = tmp_path / "f.npz"
    convert_femnist(out, leaf_dir=write_leaf(tmp_path / "leaf", data))
    npz = np.load(out, allow_pickle=False)
    assert sorted(npz.files) == ["images", "labels", "source", "source_names", "split", "writer"]
    assert npz["images"].dtype == np.uint8 and npz["labels"].dtype == np.int16
    writers = sorted(WRITERS)
    expect = [(w, s) for w in writers for s in ("train", "test")]
    np.testing.assert_array_equal(
        npz["images"], np.concatenate([data[w][s][0] for w, s in expect]))  # exact grey levels
    np.testing.assert_array_equal(npz["labels"], np.concatenate([data[w][s][1] for w, s in expect]))
    assert npz["writer"].tolist() == [w for w, s in expect for _ in data[w][s][1]]
    assert npz["split"].tolist() == [s for w, s in expect for _ in data[w][s][1]]
    assert npz["source"].tolist() == [0] * len(npz["labels"])
    assert npz["source_names"].tolist() == ["LEAF json leaf"]


def test_from_tff_gives_the_same_arrays_as_from_leaf(tmp_path: Path) -> None:
    data = make_writers(seed=1)
    leaf_out, tff_out = tmp_path / "leaf.npz", tmp_path / "tff.npz"
    convert_femnist(leaf_out, leaf_dir=write_leaf(tmp_path / "leaf", data))
    summary = convert_femnist(tff_out, tff_files=write_tff(tmp_path, data))
    a, b = np.load(leaf_out), np.load(tff_out)
    for key in ("images", "labels", "writer", "split"):
        np.testing.assert_array_equal(a[key], b[key])
    assert b["source_names"].tolist() == ["TFF h5 fed_emnist_test.h5", "TFF h5 fed_emnist_train.h5"]
    assert set(b["source"][b["split"] == "train"].tolist()) == {1}
    assert summary.samples_by_split == {"train": 40, "all": 0, "test": 10}
    assert_same(load("femnist", tff_out), load("leaf", tmp_path / "leaf"), atol=1e-5)


def test_checksum_file_and_summary(tmp_path: Path) -> None:
    out = tmp_path / "f.npz"
    summary = convert_femnist(out, leaf_dir=write_leaf(tmp_path / "leaf", make_writers()))
    digest = hashlib.sha256(out.read_bytes()).hexdigest()
    assert summary.checksum_file == tmp_path / "f.npz.sha256"
    assert summary.checksum_file.read_text() == f"{digest}  f.npz\n"  # sha256sum -c format
    assert summary.sha256 == digest
    per_writer = sorted(a + b for a, b in WRITERS.values())  # 4, 5, 6, 9, 11, 15
    assert summary.num_writers == 6 and summary.num_samples == sum(per_writer)
    assert summary.samples_per_writer == (4, 7.5, 15)
    text = "\n".join(summary.lines())
    assert "writers: 6; samples: 50 (40 train, 10 test)" in text
    assert "min 4, median 7.5, max 15" in text and digest in text
    assert not list(tmp_path.glob("*.tmp"))


def test_refuses_to_overwrite_the_output_or_its_checksum(tmp_path: Path) -> None:
    leaf = write_leaf(tmp_path / "leaf", make_writers())
    out = tmp_path / "f.npz"
    out.write_bytes(b"precious")
    with pytest.raises(InputError, match=f"{out}: already exists"):
        convert_femnist(out, leaf_dir=leaf)
    assert out.read_bytes() == b"precious"
    out.unlink()
    (tmp_path / "f.npz.sha256").write_text("precious")
    with pytest.raises(InputError, match="f.npz.sha256: already exists"):
        convert_femnist(out, leaf_dir=leaf)
    assert not out.exists() and (tmp_path / "f.npz.sha256").read_text() == "precious"


def test_bad_inputs_write_nothing(tmp_path: Path) -> None:
    out = tmp_path / "f.npz"
    with pytest.raises(InputError, match="exactly one source"):
        convert_femnist(out)
    with pytest.raises(InputError, match=r"must name the \.npz file"):
        convert_femnist(tmp_path / "f.bin", leaf_dir=tmp_path)
    with pytest.raises(InputError, match="LEAF data directory not found"):
        convert_femnist(out, leaf_dir=tmp_path / "missing")
    with pytest.raises(InputError, match="TFF HDF5 file not found"):
        convert_femnist(out, tff_files=[tmp_path / "missing.h5"])
    data = make_writers()
    bad = write_leaf(tmp_path / "leaf", data)
    shard = next((bad / "train").glob("*.json"))
    table = json.loads(shard.read_text())
    user = table["users"][0]
    table["user_data"][user]["x"][0][5] = 0.5  # 127.5 grey levels: not a LEAF pixel
    shard.write_text(json.dumps(table))
    with pytest.raises(InputError, match=f"user '{user}': pixels are not multiples of 1/255"):
        convert_femnist(out, leaf_dir=bad)
    table["user_data"][user]["x"][0][5] = 2.0
    shard.write_text(json.dumps(table))
    with pytest.raises(InputError, match=r"in \[0, 1\]"):
        convert_femnist(out, leaf_dir=bad)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["leaf"]


def test_tff_file_without_examples_is_refused(tmp_path: Path) -> None:
    h5py = pytest.importorskip("h5py")
    path = tmp_path / "other.h5"
    with h5py.File(path, "w") as h5:
        h5["pixels"] = np.zeros((1, 28, 28), np.float32)
    with pytest.raises(InputError, match="no 'examples' group"):
        convert_femnist(tmp_path / "f.npz", tff_files=[path])
    (tmp_path / "junk.h5").write_text("not hdf5")
    with pytest.raises(InputError, match="cannot read as HDF5"):
        convert_femnist(tmp_path / "f.npz", tff_files=[tmp_path / "junk.h5"])
    assert not (tmp_path / "f.npz").exists()


def test_missing_data_message_names_the_conversion_command(monkeypatch: pytest.MonkeyPatch,
                                                          tmp_path: Path) -> None:
    monkeypatch.delenv("SIMFL_DATA_DIR", raising=False)
    for path in ("", str(tmp_path / "absent.npz")):
        with pytest.raises(InputError, match="python -m simfl data femnist --from-leaf DIR"):
            load_data(DataConfig(dataset="femnist", path=path), Streams(0))


def test_the_data_command_converts_leaf_and_tff_and_never_replaces(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from simfl.cli import main

    data = make_writers(seed=2)
    leaf_out, tff_out = tmp_path / "leaf.npz", tmp_path / "tff.npz"
    leaf_dir = write_leaf(tmp_path / "leaf", data)
    assert main(["data", "femnist", "--from-leaf", str(leaf_dir), "--out", str(leaf_out)]) == 0
    assert f"wrote {leaf_out}" in capsys.readouterr().out
    tff = [str(f) for f in write_tff(tmp_path, data)]
    assert main(["data", "femnist", "--from-tff", *tff, "--out", str(tff_out)]) == 0
    for key in ("images", "labels", "writer"):
        np.testing.assert_array_equal(np.load(leaf_out)[key], np.load(tff_out)[key])
    before = leaf_out.read_bytes()
    assert main(["data", "femnist", "--from-leaf", str(leaf_dir), "--out", str(leaf_out)]) == 2
    assert "simfl: error:" in capsys.readouterr().err and leaf_out.read_bytes() == before

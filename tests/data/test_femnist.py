"""FEMNIST npz: polarity, training-side standardisation, bad files, and the real file."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from simfl.data import load_data
from simfl.data.packed import FederatedData
from simfl.errors import InputError
from simfl.rng import Streams
from simfl.scenario import DataConfig
from tests.conftest import data_dir, requires_data

# writer -> (samples, stored uint8 background); every image also has one black ink pixel at (0, 0)
WRITERS = {"w0": (3, 255), "w1": (2, 255), "w2": (4, 200), "w3": (1, 255)}


def fixture_arrays(writers: dict[str, tuple[int, int]] = WRITERS) -> dict[str, np.ndarray]:
    """Arrays in the layout of femnist_writers.npz (LEAF polarity: white background)."""
    images = np.concatenate([np.full((n, 28, 28), bg, np.uint8) for n, bg in writers.values()])
    images[:, 0, 0] = 0
    counts = [n for n, _ in writers.values()]
    return {
        "images": images,
        "labels": np.repeat(np.arange(len(writers), dtype=np.int16), counts),
        "writer": np.repeat(np.array(list(writers)), counts),
        "split": np.array(["train"] * sum(counts)),
    }


def write_npz(path: Path, **arrays: Any) -> Path:
    np.savez(path, **arrays)
    return path


def load(path: Path | str, seed: int = 0, **cfg: Any) -> FederatedData:
    return load_data(DataConfig(dataset="femnist", path=str(path), **cfg), Streams(seed))


def inverted(stored: float) -> float:
    """MNIST polarity of a stored LEAF-polarity uint8 value."""
    return (255.0 - stored) / 255.0


def test_polarity_and_standardisation_by_hand(tmp_path: Path) -> None:
    data = load(write_npz(tmp_path / "f.npz", **fixture_arrays()), test_client_fraction=0.5)
    assert data.num_classes == 62 and data.input_shape == (1, 28, 28)
    assert data.train.num_clients == data.test.num_clients == 2
    train_ids = data.train.client_ids.tolist()
    # Hand-computed scalar statistics over the training writers' pixels only.
    pixels = []
    for writer in train_ids:
        count, background = WRITERS[writer]
        pixels += [inverted(0)] * count + [inverted(background)] * (count * 783)  # 1 ink pixel
    mean, std = np.mean(pixels), np.std(pixels)
    for side in (data.train, data.test):
        for k, writer in enumerate(side.client_ids):
            x = side.x[side.offsets[k] : side.offsets[k + 1]].double().numpy()
            assert x.dtype == np.float64 and x.shape == (WRITERS[writer][0], 1, 28, 28)
            np.testing.assert_allclose(x[:, 0, 0, 0], (1.0 - mean) / std, rtol=1e-6)  # ink bright
            np.testing.assert_allclose(
                x[:, 0, 5, 5], (inverted(WRITERS[writer][1]) - mean) / std, rtol=1e-6, atol=1e-6
            )
            assert (x[:, 0, 0, 0] > x[:, 0, 5, 5]).all()
            expected_label = list(WRITERS).index(writer)
            assert (side.y[side.offsets[k] : side.offsets[k + 1]] == expected_label).all()
    assert str(data.train.x.dtype) == "torch.float32" and str(data.train.y.dtype) == "torch.int64"


def test_without_standardisation_pixels_stay_in_the_unit_interval(tmp_path: Path) -> None:
    data = load(write_npz(tmp_path / "f.npz", **fixture_arrays()), standardise=False)
    for side in (data.train, data.test):
        for k, writer in enumerate(side.client_ids):
            x = side.x[side.offsets[k] : side.offsets[k + 1]].double().numpy()
            np.testing.assert_allclose(x[:, 0, 0, 0], 1.0)  # the ink pixel
            np.testing.assert_allclose(x[:, 0, 5, 5], inverted(WRITERS[writer][1]), rtol=1e-6)


def test_test_writers_do_not_change_the_training_side(tmp_path: Path) -> None:
    arrays = fixture_arrays()
    first = load(write_npz(tmp_path / "a.npz", **arrays))
    test_rows = np.isin(arrays["writer"], first.test.client_ids)
    arrays["images"][test_rows] = 17  # repaint only the unseen test devices
    second = load(write_npz(tmp_path / "b.npz", **arrays))
    assert second.train.client_ids.tolist() == first.train.client_ids.tolist()
    assert (second.train.x == first.train.x).all()
    assert not (second.test.x == first.test.x).all()


def test_min_samples_and_unsorted_writers(tmp_path: Path) -> None:
    arrays = fixture_arrays()
    order = np.random.default_rng(0).permutation(len(arrays["labels"]))
    shuffled = {key: value[order] for key, value in arrays.items()}
    data = load(write_npz(tmp_path / "f.npz", **shuffled), min_samples_per_client=2)
    kept = sorted(data.train.client_ids.tolist() + data.test.client_ids.tolist())
    assert kept == ["w0", "w1", "w2"]  # w3 has one sample
    for side in (data.train, data.test):
        for k, writer in enumerate(side.client_ids):
            rows = slice(side.offsets[k], side.offsets[k + 1])
            assert (side.y[rows] == list(WRITERS).index(writer)).all()
            assert side.num_samples[k] == WRITERS[writer][0]


def test_missing_file_names_the_path_and_the_settings(tmp_path: Path) -> None:
    with pytest.raises(InputError, match=r"nope\.npz.*SIMFL_DATA_DIR.*data\.path"):
        load(tmp_path / "nope.npz")


def test_default_location_comes_from_simfl_data_dir(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("SIMFL_DATA_DIR", raising=False)
    with pytest.raises(InputError, match="SIMFL_DATA_DIR is not set"):
        load("")
    monkeypatch.setenv("SIMFL_DATA_DIR", str(tmp_path))
    with pytest.raises(InputError, match=r"femnist_writers\.npz: FEMNIST file not found"):
        load("")
    (tmp_path / "femnist").mkdir()
    write_npz(tmp_path / "femnist" / "femnist_writers.npz", **fixture_arrays())
    assert load("").num_classes == 62


def bad_arrays(problem: str) -> dict[str, np.ndarray]:
    arrays = fixture_arrays()
    if problem == "missing key":
        del arrays["writer"]
    elif problem == "label out of range":
        arrays["labels"][3] = 62
    elif problem == "negative label":
        arrays["labels"][0] = -1
    elif problem == "mismatched lengths":
        arrays["writer"] = arrays["writer"][:-1]
    elif problem == "wrong image shape":
        arrays["images"] = arrays["images"][:, :27]
    elif problem == "wrong image dtype":
        arrays["images"] = arrays["images"].astype(np.float32)
    return arrays


@pytest.mark.parametrize(
    ("problem", "message"),
    [
        ("missing key", "missing key 'writer'"),
        ("label out of range", r"labels must be in 0\.\.61, found 0\.\.62"),
        ("negative label", r"labels must be in 0\.\.61"),
        ("mismatched lengths", "'writer' has 9 entries but 'labels' has 10"),
        ("wrong image shape", r"'images' must be uint8 of shape \(10, 28, 28\)"),
        ("wrong image dtype", "'images' must be uint8"),
    ],
)
def test_bad_contents_name_the_file_and_the_problem(
    tmp_path: Path, problem: str, message: str
) -> None:
    path = write_npz(tmp_path / "bad.npz", **bad_arrays(problem))
    with pytest.raises(InputError, match=rf"bad\.npz: {message}"):
        load(path)


@pytest.mark.parametrize("keep_fraction", [0.0, 0.3, 0.9])
def test_truncated_or_corrupt_file_names_the_file(tmp_path: Path, keep_fraction: float) -> None:
    good = write_npz(tmp_path / "good.npz", **fixture_arrays())
    content = good.read_bytes()
    bad = tmp_path / "cut.npz"
    bad.write_bytes(content[: int(keep_fraction * len(content))])
    with pytest.raises(InputError, match=r"cut\.npz: "):
        load(bad)


def test_a_plain_npy_is_not_an_npz(tmp_path: Path) -> None:
    path = tmp_path / "images.npz"
    with path.open("wb") as f:
        np.save(f, np.zeros(3))
    with pytest.raises(InputError, match=r"images\.npz: not an \.npz archive"):
        load(path)


# ---- the real file (skipped unless SIMFL_DATA_DIR is set; CI sets it) --------------------------


def real_path() -> Path:
    directory = data_dir()
    assert directory is not None
    return directory / "femnist" / "femnist_writers.npz"


@requires_data
@pytest.mark.slow
def test_real_femnist_fifty_writers() -> None:
    data = load_data(
        DataConfig(dataset="femnist", min_samples_per_client=100, max_clients=50), Streams(3)
    )
    assert data.num_classes == 62 and data.input_shape == (1, 28, 28)
    assert data.train.num_clients == data.test.num_clients == 25
    assert not set(data.train.client_ids) & set(data.test.client_ids)
    for side in (data.train, data.test):
        assert side.num_samples.min() >= 100
        assert side.x.shape[0] == side.y.shape[0] == side.offsets[-1]
        assert int(side.y.min()) >= 0 and int(side.y.max()) < 62
    x = data.train.x
    assert abs(float(x.mean())) < 1e-4 and abs(float(x.std()) - 1) < 1e-4
    # MNIST polarity: the background (most pixels) is dark, i.e. the smallest value.
    background = float(x.min())
    assert float((x == background).double().mean()) > 0.5
    assert float(x.max()) > background + 3.0
    # And x is an increasing affine map of the raw inverted intensity (255 - v) / 255.
    with np.load(real_path()) as npz:
        rows = npz["writer"] == data.train.client_ids[0]
        raw = (255.0 - npz["images"][rows]) / 255.0
    assert raw.mean() < 0.3  # dark background
    first = x[: data.train.offsets[1]].double().numpy()
    assert np.corrcoef(raw.ravel(), first.ravel())[0, 1] > 0.99999


@requires_data
@pytest.mark.slow
def test_real_femnist_all_writers_with_100_samples() -> None:
    """The papers' FEMNIST filter over every writer (about 10-15 s and 3.4 GB here)."""
    writers = np.load(real_path())["writer"]
    names, counts = np.unique(writers, return_counts=True)
    assert len(names) == 3597 and counts.sum() == 817_851
    data = load_data(DataConfig(dataset="femnist", min_samples_per_client=100), Streams(0))
    kept = np.concatenate([data.train.client_ids, data.test.client_ids])
    assert len(kept) == len(set(kept)) == 3560 == (counts >= 100).sum()
    assert data.train.num_clients == data.test.num_clients == 1780
    assert int(data.train.offsets[-1] + data.test.offsets[-1]) == 815_370
    assert data.train.x.shape[1:] == (1, 28, 28) and data.test.y.shape[0] == data.test.offsets[-1]
    assert min(data.train.num_samples.min(), data.test.num_samples.min()) >= 100


@requires_data
@pytest.mark.slow
def test_the_paper_population_is_865_and_865_writers_drawn_from_the_seed(
        capsys: pytest.CaptureFixture[str]) -> None:
    """The papers (arXiv:2112.09429, App. C.1.1): writers with >= 100 images, a random half
    of them (1,730), split in equal halves. scenarios/paper/femnist_linear.toml says so."""
    from simfl.scenario import load_scenario

    scenario = load_scenario(Path(__file__).parents[2] / "scenarios/paper/femnist_linear.toml")
    assert scenario.data.max_clients == 1730 and scenario.data.min_samples_per_client == 100
    draws = [load_data(scenario.data, Streams(seed)) for seed in (0, 0, 1)]
    for data in draws:
        assert (data.train.num_clients, data.test.num_clients) == (865, 865)
        assert data.train.num_samples.min() >= 100 and data.test.num_samples.min() >= 100
    same, other = draws[1], draws[2]
    assert list(draws[0].train.client_ids) == list(same.train.client_ids)  # the seed decides
    assert list(draws[0].train.client_ids) != list(other.train.client_ids)
    # Table 1's median 179 samples per training device is a property of the population
    assert abs(float(np.median(draws[0].train.num_samples)) - 179) <= 3
    # what `python -m simfl` prints before a run starts
    line = draws[0].describe()
    assert line.startswith("femnist: 865 training devices (samples per device min ")
    assert "865 unseen test devices, 62 classes" in line


def with_sources(arrays: dict[str, np.ndarray], of_writer: dict[str, int]) -> dict[str, np.ndarray]:
    """``arrays`` with the file's provenance columns: each writer's samples from one copy."""
    names = np.array(["copy/a@1", "copy/b@2", "copy/c@3"])
    return {**arrays, "source_names": names,
            "source": np.array([of_writer[w] for w in arrays["writer"]], dtype=np.int8)}


def test_sources_keep_only_the_writers_of_the_named_copies(tmp_path: Path) -> None:
    arrays = with_sources(fixture_arrays(), {"w0": 0, "w1": 1, "w2": 0, "w3": 2})
    path = write_npz(tmp_path / "f.npz", **arrays)
    data = load(path, sources=("copy/a@1",))
    assert sorted([*data.train.client_ids, *data.test.client_ids]) == ["w0", "w2"]
    both = load(path, sources=("copy/a@1", "copy/c@3"))
    assert sorted([*both.train.client_ids, *both.test.client_ids]) == ["w0", "w2", "w3"]
    every = load(path)  # empty: every writer
    assert every.train.num_clients + every.test.num_clients == 4
    # the size filter applies to the writers of the named copies: w2 (4 samples) alone
    with pytest.raises(InputError, match="1 client"):
        load(path, sources=("copy/a@1",), min_samples_per_client=4)


def test_an_unknown_source_is_an_error_naming_the_key(tmp_path: Path) -> None:
    path = write_npz(tmp_path / "f.npz",
                     **with_sources(fixture_arrays(), {"w0": 0, "w1": 1, "w2": 0, "w3": 2}))
    with pytest.raises(InputError, match=r"data\.sources: no source 'copy/z@9' in the file"):
        load(path, sources=("copy/a@1", "copy/z@9"))
    plain = write_npz(tmp_path / "plain.npz", **fixture_arrays())  # no provenance columns
    with pytest.raises(InputError, match="missing key 'source_names'"):
        load(plain, sources=("copy/a@1",))


def test_sources_are_for_femnist_only() -> None:
    from simfl.scenario import from_dict

    with pytest.raises(InputError, match="'data.sources'.*'femnist'"):
        from_dict({"data": {"dataset": "synthetic", "sources": ["copy/a@1"]}}, source="s.toml")


MAIN_SOURCE = "zshuai8/FedGMM_ICML2023@5a626c8"


@requires_data
@pytest.mark.slow
def test_the_main_source_copy_has_3268_writers() -> None:
    """data.sources on the real file (../shared/data/femnist's manifest: 3,268 writers of
    the main copy, 3,235 of them with more than 100 samples); reads the provenance
    columns, and loads 40 of the writers to check the pipeline keeps only that copy's."""
    from simfl.data.femnist import _from_sources
    from simfl.data.split import group_rows

    with np.load(real_path()) as npz:
        groups = group_rows(npz["writer"])
        keep = _from_sources(npz, groups.order[groups.offsets[:-1]], (MAIN_SOURCE,), real_path())
        assert keep is not None and int(keep.sum()) == 3268
        assert int((keep & (np.diff(groups.offsets) >= 101)).sum()) == 3235
        source_of = dict(zip(groups.client_ids, npz["source"][groups.order[groups.offsets[:-1]]],
                             strict=True))
        main = list(npz["source_names"]).index(MAIN_SOURCE)
    data = load_data(DataConfig(dataset="femnist", sources=(MAIN_SOURCE,),
                                min_samples_per_client=101, max_clients=40), Streams(0))
    kept = [*data.train.client_ids, *data.test.client_ids]
    assert len(kept) == 40 and all(source_of[w] == main for w in kept)

"""One's own data: from arrays, from a folder of per-client files, and the Dirichlet
label-skew partition."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from simfl.data import dirichlet_partition, from_arrays, load_data
from simfl.errors import InputError
from simfl.rng import Streams
from simfl.scenario import DataConfig


def arrays(n: int = 300, clients: int = 10) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    x = rng.normal(3.0, 2.0, (n, 4))
    y = rng.integers(0, 3, n)
    return x, y, rng.integers(0, clients, n)


def test_arrays_become_writer_split_standardised_devices() -> None:
    x, y, ids = arrays()
    data = from_arrays(x, y, ids, DataConfig(test_client_fraction=0.3), Streams(1))
    assert (data.train.num_clients, data.test.num_clients, data.num_classes) == (7, 3, 3)
    assert sorted([*data.train.client_ids, *data.test.client_ids]) == sorted(map(str, range(10)))
    assert data.train.num_samples.sum() + data.test.num_samples.sum() == len(y)
    train_x = data.train.x.double()
    assert np.allclose(train_x.mean(0), 0, atol=1e-6) and np.allclose(train_x.std(0), 1, atol=1e-2)
    first = str(data.train.client_ids[0])
    rows = data.train.rows(np.array([0]))
    assert sorted(data.train.y[rows].tolist()) == sorted(y[ids == int(first)].tolist())
    again = from_arrays(x, y, ids, DataConfig(test_client_fraction=0.3), Streams(1))
    assert again.fingerprint() == data.fingerprint()


@pytest.mark.parametrize("change, message", [
    (lambda x, y, ids: (x[:, 0], y, ids), "x must be"),
    (lambda x, y, ids: (x, y[:-1], ids), "x must be"),
    (lambda x, y, ids: (x, y - 1, ids), "labels must be integers >= 0"),
    (lambda x, y, ids: (x, y.astype(float), ids), "labels must be integers"),
])
def test_inconsistent_arrays_are_input_errors(change: object, message: str) -> None:
    with pytest.raises(InputError, match=message):
        from_arrays(*change(*arrays()), DataConfig(), Streams(0))  # type: ignore[operator]


def test_a_folder_of_client_files(tmp_path: Path) -> None:
    x, y, ids = arrays()
    for k in range(10):
        np.savez(tmp_path / f"phone{k:02d}.npz", x=x[ids == k], y=y[ids == k])
    data = load_data(DataConfig(dataset="npz_folder", path=str(tmp_path)), Streams(0))
    assert data.train.num_clients + data.test.num_clients == 10
    assert set(data.train.client_ids) | set(data.test.client_ids) == {
        f"phone{k:02d}" for k in range(10)}
    (tmp_path / "broken.npz").write_text("no")
    with pytest.raises(InputError, match="broken.npz: not a client file"):
        load_data(DataConfig(dataset="npz_folder", path=str(tmp_path)), Streams(0))
    with pytest.raises(InputError, match="no such folder"):
        load_data(DataConfig(dataset="npz_folder", path=str(tmp_path / "no")), Streams(0))


def label_shares(clients: np.ndarray, labels: np.ndarray, k: int) -> np.ndarray:
    """(classes, k): the share of each class's samples on each client."""
    counts = np.stack([np.bincount(clients[labels == c], minlength=k)
                       for c in np.unique(labels)])
    return counts / counts.sum(axis=1, keepdims=True)


def test_dirichlet_label_skew_follows_alpha() -> None:
    labels = np.repeat(np.arange(5), 20_000)
    k = 10
    uniform = dirichlet_partition(labels, k, 1e4, np.random.default_rng(0))
    skewed = dirichlet_partition(labels, k, 0.05, np.random.default_rng(0))
    for clients in (uniform, skewed):
        assert clients.shape == labels.shape and clients.min() >= 0 and clients.max() < k
        assert np.bincount(clients, minlength=k).sum() == len(labels)
    assert np.abs(label_shares(uniform, labels, k) - 1 / k).max() < 0.01  # 5 sd of sampling
    top = np.sort(label_shares(skewed, labels, k), axis=1)[:, -2:].sum(axis=1)
    assert top.min() > 0.9  # each class sits almost wholly on two clients or fewer
    same = dirichlet_partition(labels, k, 0.05, np.random.default_rng(0))
    assert np.array_equal(same, skewed)
    assert not np.array_equal(dirichlet_partition(labels, k, 0.05, np.random.default_rng(1)),
                              skewed)
    with pytest.raises(ValueError, match="alpha > 0"):
        dirichlet_partition(labels, k, 0.0, np.random.default_rng(0))

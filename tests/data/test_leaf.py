"""LEAF json shards: both layouts, image and flat features, validation errors."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from simfl.data import load_data
from simfl.data.packed import FederatedData
from simfl.errors import InputError
from simfl.rng import Streams
from simfl.scenario import DataConfig

Users = dict[str, tuple[list[list[float]], list[int]]]


def write_shard(path: Path, users: Users) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    table = {
        "users": list(users),
        "num_samples": [len(y) for _, y in users.values()],
        "user_data": {u: {"x": x, "y": y} for u, (x, y) in users.items()},
    }
    path.write_text(json.dumps(table))
    return path


def flat_users(dim: int = 3) -> Users:
    """Four users with flat features; user k's samples are all (k, 10 k, ...) so stats are easy."""
    return {
        f"u{k}": ([[float(k) * 10**j for j in range(dim)]] * (k + 1), [k] * (k + 1))
        for k in range(4)
    }


def image(white_fraction: float) -> list[float]:
    """784 values in LEAF polarity: 1.0 is white background; pixel 0 is black ink."""
    return [0.0] + [white_fraction] * 783


def load(path: Path, seed: int = 0, **cfg: Any) -> FederatedData:
    return load_data(DataConfig(dataset="leaf", path=str(path), **cfg), Streams(seed))


def test_flat_features_are_standardised_per_feature_with_training_stats(tmp_path: Path) -> None:
    users = flat_users()
    write_shard(tmp_path / "a.json", {u: users[u] for u in ("u0", "u1")})
    write_shard(tmp_path / "b.json", {u: users[u] for u in ("u2", "u3")})
    data = load(tmp_path)
    assert data.name == "leaf" and data.num_classes == 4 and data.input_shape == (3,)
    assert data.train.num_clients == data.test.num_clients == 2
    train_x = np.concatenate([users[u][0] for u in data.train.client_ids])
    mean, std = train_x.mean(axis=0), train_x.std(axis=0)
    for side in (data.train, data.test):
        raw = np.concatenate([users[u][0] for u in side.client_ids])
        np.testing.assert_allclose(side.x.numpy(), (raw - mean) / std, rtol=1e-5, atol=1e-6)
        labels = np.concatenate([users[u][1] for u in side.client_ids])
        assert side.y.tolist() == labels.tolist()
    np.testing.assert_allclose(data.train.x.mean(0).numpy(), 0, atol=1e-6)


def test_authors_pixel_scaling_of_flat_features_is_an_input_error(tmp_path: Path) -> None:
    write_shard(tmp_path / "a.json", flat_users())
    with pytest.raises(InputError, match="'authors' is for 28x28 FEMNIST images"):
        load(tmp_path, standardise=False, pixel_scaling="authors")


def test_train_and_test_folders_are_merged_per_user(tmp_path: Path) -> None:
    users = flat_users()
    # LEAF's per-sample split: every user has samples in train/ and one in test/.
    write_shard(tmp_path / "train" / "t.json", users)
    write_shard(tmp_path / "test" / "t.json", {u: (x[:1], y[:1]) for u, (x, y) in users.items()})
    write_shard(tmp_path / "ignored.json", {"zz": ([[1.0, 2.0, 3.0]], [0])})  # not read
    data = load(tmp_path)
    counts = dict(zip(data.train.client_ids, data.train.num_samples, strict=True))
    counts.update(zip(data.test.client_ids, data.test.num_samples, strict=True))
    assert counts == {f"u{k}": k + 2 for k in range(4)}


def test_images_are_inverted_to_mnist_polarity(tmp_path: Path) -> None:
    users = {f"w{k}": ([image(1.0)] * 2 + [image(0.5)], [k, 61, 0]) for k in range(2)}
    write_shard(tmp_path / "f.json", users)
    data = load(tmp_path)
    assert data.num_classes == 62 and data.input_shape == (1, 28, 28)
    # Training pixels after inversion: per image one 1.0 (ink), 783 at 0 or 0.5.
    pixels = np.array([1.0] * 3 + [0.0] * 783 * 2 + [0.5] * 783)
    mean, std = pixels.mean(), pixels.std()
    for side in (data.train, data.test):
        x = side.x.numpy()
        np.testing.assert_allclose(x[:, 0, 0, 0], (1.0 - mean) / std, rtol=1e-5)  # ink bright
        np.testing.assert_allclose(x[:, 0, 9, 9], (np.array([0, 0, 0.5]) - mean) / std, rtol=1e-5)


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda t: t.pop("user_data"), "missing key 'user_data'"),
        (lambda t: t["num_samples"].pop(), "2 users but 1 entries in 'num_samples'"),
        (lambda t: t["num_samples"].__setitem__(0, 5), "num_samples says 5 but 'x'/'y' hold 1"),
        (lambda t: t["user_data"]["a"].update(x=[], y=[]), "user 'a': has no samples"),
        (lambda t: t["user_data"].pop("b"), "user 'b': missing from 'user_data'"),
        (lambda t: t["user_data"]["a"].update(y=[-1]), "labels must be non-negative integers"),
        (lambda t: t["user_data"]["a"].update(x=[[1.0]]), "has 2 features, earlier users have 1"),
    ],
)
def test_bad_shards_name_the_file(tmp_path: Path, mutate: Any, message: str) -> None:
    table = {
        "users": ["a", "b"],
        "num_samples": [1, 1],
        "user_data": {"a": {"x": [[1.0, 2.0]], "y": [0]}, "b": {"x": [[3.0, 4.0]], "y": [1]}},
    }
    mutate(table)
    (tmp_path / "bad_shard.json").write_text(json.dumps(table))
    with pytest.raises(InputError, match=rf"bad_shard\.json.*{message}"):
        load(tmp_path)


def test_unreadable_json_and_missing_directory(tmp_path: Path) -> None:
    (tmp_path / "broken.json").write_text('{"users": [')
    with pytest.raises(InputError, match=r"broken\.json: cannot read LEAF json"):
        load(tmp_path)
    with pytest.raises(InputError, match=r"nowhere: LEAF data directory not found"):
        load(tmp_path / "nowhere")
    (tmp_path / "empty").mkdir()
    with pytest.raises(InputError, match=r"empty: no LEAF \*\.json shards"):
        load(tmp_path / "empty")
    with pytest.raises(InputError, match=r"broken\.json: data\.path must be the directory"):
        load(tmp_path / "broken.json")
    with pytest.raises(InputError, match="data.path must name a directory"):
        load_data(DataConfig(dataset="leaf"), Streams(0))

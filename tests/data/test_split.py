"""Writer-level split: grouping rows by writer, filtering, fractions, seeding, standardisation."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch

from simfl.data.packed import ClientData, client_rows
from simfl.data.split import authors_pixels, group_rows, split_clients, standardise
from simfl.errors import InputError
from simfl.rng import Streams
from simfl.scenario import DataConfig


def test_group_rows_keeps_contiguous_runs_in_file_order() -> None:
    groups = group_rows(np.array(["b", "b", "a", "c", "c", "c"]))
    assert groups.client_ids.tolist() == ["b", "a", "c"]
    assert groups.offsets.tolist() == [0, 2, 3, 6]
    assert groups.order.tolist() == list(range(6))


def test_group_rows_sorts_stably_when_a_writer_is_split_across_runs() -> None:
    groups = group_rows(np.array(["b", "a", "b", "a", "c"]))
    assert groups.client_ids.tolist() == ["a", "b", "c"]
    assert groups.offsets.tolist() == [0, 2, 4, 5]
    assert groups.order.tolist() == [1, 3, 0, 2, 4]  # within a writer, file order is kept


def test_client_rows_concatenates_in_the_given_order() -> None:
    offsets = np.array([0, 2, 2, 5, 6])
    assert client_rows(offsets, np.array([3, 0, 1, 2])).tolist() == [5, 0, 1, 2, 3, 4]


def test_subset_equals_the_clients_blocks_stacked_in_the_given_order() -> None:
    rng = np.random.default_rng(0)
    offsets = np.array([0, 3, 3, 7, 12])
    clients = ClientData(torch.from_numpy(rng.normal(size=(12, 1, 2, 2)).astype(np.float32)),
                         torch.arange(12), offsets, np.array(["a", "b", "c", "d"]))
    order = np.array([3, 1, 0, 3])
    sub = clients.subset(order)
    expect = [slice(offsets[k], offsets[k + 1]) for k in order]
    assert torch.equal(sub.x, torch.cat([clients.x[s] for s in expect]))
    assert torch.equal(sub.y, torch.cat([clients.y[s] for s in expect]))
    assert sub.offsets.tolist() == [0, 5, 5, 8, 13]
    assert sub.client_ids.tolist() == ["d", "b", "a", "d"]
    sub.x.zero_()  # a copy: the source is untouched
    assert clients.x.abs().sum() > 0


def split(num_samples: list[int], seed: int = 0, **cfg: Any) -> tuple[list[int], list[int]]:
    train, test = split_clients(
        np.array(num_samples), DataConfig(**cfg), Streams(seed).numpy("data_split"), "src"
    )
    return train.tolist(), test.tolist()


def test_split_is_disjoint_sorted_and_honours_min_samples_and_fraction() -> None:
    sizes = [5, 100, 150, 99, 300, 100, 20, 400, 120, 101, 250]  # 7 with >= 100
    train, test = split(sizes, min_samples_per_client=100, test_client_fraction=0.3)
    assert not set(train) & set(test)
    assert sorted(train + test) == [k for k, n in enumerate(sizes) if n >= 100]
    assert len(test) == 2  # round(0.3 * 7)
    assert train == sorted(train) and test == sorted(test)


def test_split_keeps_at_least_one_client_on_each_side() -> None:
    assert [len(side) for side in split([10, 10, 10], test_client_fraction=0.1)] == [2, 1]
    assert [len(side) for side in split([10, 10, 10], test_client_fraction=0.9)] == [1, 2]


def test_split_subsamples_max_clients() -> None:
    train, test = split([50] * 40 + [5] * 10, min_samples_per_client=10, max_clients=8)
    assert len(train) == 4 and len(test) == 4
    assert all(k < 40 for k in train + test)


def test_same_seed_same_split_other_seed_other_split() -> None:
    sizes = [100] * 60
    assert split(sizes, seed=1, max_clients=20) == split(sizes, seed=1, max_clients=20)
    assert split(sizes, seed=1) != split(sizes, seed=2)
    assert split(sizes, seed=1, max_clients=20) != split(sizes, seed=2, max_clients=20)


def test_too_few_clients_is_an_input_error_naming_the_source() -> None:
    with pytest.raises(InputError, match="src:.*min_samples_per_client"):
        split([5, 200, 7], min_samples_per_client=100)


def test_standardise_uses_training_statistics_only() -> None:
    train = torch.tensor([[1.0, 10.0], [3.0, 10.0]])
    test = torch.tensor([[5.0, 12.0]])
    train_z, test_z = standardise(train, test, per_feature=True)
    # Column 0: mean 2, std 1. Column 1 is constant: centred, not scaled.
    assert train_z.tolist() == [[-1.0, 0.0], [1.0, 0.0]]
    assert test_z.tolist() == [[3.0, 2.0]]
    train_z, test_z = standardise(train, test, per_feature=False)
    mean, std = 6.0, float(np.std([1.0, 10.0, 3.0, 10.0]))
    assert torch.allclose(test_z, (test - mean) / std)
    assert train_z.dtype == test_z.dtype == torch.float32


def test_authors_pixels_by_hand_and_against_the_authors_formula() -> None:
    # Ink polarity: two training images of two pixels; pixel 1 is inked in every one.
    train = torch.tensor([[0.0, 1.0], [1.0, 1.0]])
    test = torch.tensor([[0.25, 0.0]])
    train_z, test_z = authors_pixels(train, test)
    # Mean ink (0.5, 1); LEAF-polarity mean mu = (0.5, 0), the second only centred.
    assert train_z.tolist() == [[1.0, 0.0], [-1.0, 0.0]]
    assert test_z.tolist() == [[0.5, 1.0]]
    # Their code: LEAF polarity v = 1 - x, then (v - mu_j) / mu_j with the training mean.
    rng = np.random.default_rng(0)
    x = torch.from_numpy(rng.random((50, 1, 28, 28)).astype(np.float32) ** 4)
    v = 1.0 - x[:40].double()
    mu = v.mean(dim=0)
    train_z, test_z = authors_pixels(x[:40], x[40:])
    torch.testing.assert_close(train_z.double(), (v - mu) / mu, rtol=0, atol=1e-6)
    torch.testing.assert_close(test_z.double(), ((1.0 - x[40:].double()) - mu) / mu,
                               rtol=0, atol=1e-6)
    assert train_z.mean(dim=0).abs().max() < 1e-5  # zero-mean per pixel on the training side

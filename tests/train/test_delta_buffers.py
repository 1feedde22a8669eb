"""DeltaBuffers: a buffer comes back only when no tensor, view or store entry holds it;
training writes its deltas there and gives the same updates."""

from __future__ import annotations

import numpy as np
import torch

from simfl.train.batched import TrainHParams, train_cohort
from simfl.train.models import initial_params
from simfl.train.updates import DeltaBuffers, UpdateStore
from tests.conftest import make_cohort


def test_a_released_buffer_is_reused_and_a_held_one_never() -> None:
    buffers, like = DeltaBuffers(keep=2), torch.zeros(1, dtype=torch.float64)
    first = buffers.empty(4, 5, like)
    address = first.data_ptr()
    del first
    again = buffers.empty(3, 5, like)  # smaller: a view of the same memory
    assert again.data_ptr() == address and again.shape == (3, 5)
    assert again.dtype == torch.float64
    again.fill_(3.0)
    row = again[1]  # a view alone holds the buffer
    del again
    other = buffers.empty(3, 5, like)
    assert other.data_ptr() != address
    other.fill_(7.0)
    assert torch.all(row == 3.0)


def test_a_buffer_in_the_update_store_is_not_handed_out_until_it_leaves() -> None:
    buffers, like, store = DeltaBuffers(), torch.zeros(1), UpdateStore()
    deltas = buffers.empty(3, 4, like)
    deltas.copy_(torch.arange(12.0).view(3, 4))
    address = deltas.data_ptr()
    store.put(0, np.array([5, 6, 7]), deltas, np.ones(3, dtype=bool))
    del deltas
    busy = buffers.empty(3, 4, like)
    assert busy.data_ptr() != address
    busy.fill_(-1.0)
    taken = store.take(np.array([0, 0]), np.array([5, 6]))
    assert taken.tolist() == [[0, 1, 2, 3], [4, 5, 6, 7]]  # the store's rows intact
    del taken, busy
    store.discard_version(0)
    assert buffers.empty(3, 4, like).data_ptr() == address


def test_free_buffers_too_small_are_freed_and_at_most_keep_are_kept() -> None:
    buffers, like = DeltaBuffers(keep=2), torch.zeros(1)
    small = buffers.empty(2, 2, like)
    del small
    big = buffers.empty(3, 3, like)
    assert len(buffers._buffers) == 1 and buffers._buffers[0][0].numel() == 9
    a = buffers.empty(3, 3, torch.zeros(1, dtype=torch.float64))  # big is held: a new one
    b = buffers.empty(1, 1, like)
    assert len({big.data_ptr(), a.data_ptr(), b.data_ptr()}) == 3
    assert len(buffers._buffers) == 2


def test_the_store_checkpoints_copies_of_its_rows_not_views_of_the_matrix() -> None:
    store, deltas = UpdateStore(), torch.arange(12.0).view(3, 4)
    store.put(2, np.array([0, 1, 2]), deltas, np.array([True, False, True]))
    state = store.state_dict()["deltas"]
    assert sorted(state) == [(2, 0), (2, 2)]
    assert state[(2, 2)].tolist() == [8.0, 9.0, 10.0, 11.0]
    assert state[(2, 2)].untyped_storage().nbytes() == 4 * 4  # its row alone


def test_training_writes_into_the_buffers_and_gives_the_same_updates() -> None:
    data = make_cohort([7, 16, 33], (20,), num_classes=5)
    model = torch.nn.Sequential(torch.nn.Linear(20, 8), torch.nn.ReLU(), torch.nn.Linear(8, 5))
    params = initial_params(model, seed=1, dtype=torch.float64)
    buffers = DeltaBuffers()
    for backend in ("batched", "loop"):
        hp = TrainHParams(1, 4, 0.3, backend=backend)
        plain = train_cohort(model, params, data, hp, [1, 2, 3]).deltas
        first = train_cohort(model, params, data, hp, [1, 2, 3], buffers=buffers).deltas
        assert torch.equal(first, plain)
        address = first.data_ptr()
        held = train_cohort(model, params, data, hp, [4, 5, 6], buffers=buffers).deltas
        assert held.data_ptr() != address and torch.equal(first, plain)  # first kept intact
        del first, held
        again = train_cohort(model, params, data, hp, [1, 2, 3], buffers=buffers).deltas
        assert again.data_ptr() in {b.data_ptr() for b, _ in buffers._buffers}
        assert torch.equal(again, plain)
        del again

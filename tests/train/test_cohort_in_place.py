"""A round's data and updates without copies: the cohort read in place (ClientData.view)
trains to the same bits as a packed copy; the updates' finiteness from one row sum
(finite_rows) equals the element-wise check; the store hands back training's matrix
when it can, and otherwise the rows torch.stack would give."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from simfl.train.batched import TrainHParams, train_cohort
from simfl.train.models import build_model, initial_params
from simfl.train.updates import UpdateStore, finite_rows
from tests.conftest import make_cohort

SIZES = [9, 40, 3, 17, 25, 64, 1, 33, 12, 20]  # ragged; one smaller than a batch
PICK = np.array([7, 2, 5, 0, 9, 3])  # a cohort out of order, with gaps


def test_view_reads_the_same_samples_without_copying() -> None:
    data = make_cohort(SIZES, (6,), num_classes=4)
    view, packed = data.view(PICK), data.subset(PICK)
    assert view.x is data.x and view.y is data.y  # nothing copied
    np.testing.assert_array_equal(view.offsets, packed.offsets)
    np.testing.assert_array_equal(view.client_ids, packed.client_ids)
    rows = view.rows(np.arange(len(PICK)))
    assert torch.equal(view.x[rows], packed.x) and torch.equal(view.y[rows], packed.y)
    # a view's subset is a view of the same rows; its chunks and packed() are packed
    sub = view.subset(np.array([4, 1]))
    assert sub.x is data.x and torch.equal(sub.x[sub.rows(np.arange(2))],
                                           data.subset(PICK[[4, 1]]).x)
    (chunk,) = view.chunks()
    for got in (chunk, view.packed()):
        assert got.starts is None and torch.equal(got.x, packed.x) and torch.equal(got.y, packed.y)
    assert data.cohort(PICK).x is data.x


# (not "auto": it picks loop or batched by timing, so two calls may pick differently;
# each of the two is covered here)
@pytest.mark.parametrize("backend, chunk", [("loop", 0), ("batched", 0), ("batched", 4)])
@pytest.mark.parametrize("model_name, shape", [("linear", (1, 6, 6)), ("convnet", (1, 28, 28))])
def test_a_cohort_read_in_place_trains_to_the_same_bits(backend: str, chunk: int,
                                                        model_name: str,
                                                        shape: tuple[int, ...]) -> None:
    data = make_cohort(SIZES, shape, num_classes=5, dtype=torch.float32)
    model = build_model(model_name, shape, 5)
    params = initial_params(model, seed=3, dtype=torch.float32)
    hp = TrainHParams(2, 8, 0.2, 1e-3, 0.1, backend, chunk=chunk)  # type: ignore[arg-type]
    seeds = [50 + k for k in PICK]
    view = train_cohort(model, params, data.view(PICK), hp, seeds)
    packed = train_cohort(model, params, data.subset(PICK), hp, seeds)
    assert torch.equal(view.deltas, packed.deltas)
    np.testing.assert_array_equal(view.train_losses, packed.train_losses)
    np.testing.assert_array_equal(view.num_examples, np.array(SIZES)[PICK])


def test_finite_rows_equals_the_elementwise_check() -> None:
    rng = np.random.default_rng(0)
    deltas = torch.from_numpy(rng.normal(size=(12, 300)).astype(np.float32))
    deltas[1, 7] = float("nan")
    deltas[4, 0] = float("inf")
    deltas[5, 3], deltas[5, 9] = float("inf"), float("-inf")  # their sum is NaN
    deltas[8, :2] = 3e38  # finite values whose float32 sum overflows: still finite
    want = torch.isfinite(deltas).all(dim=1).numpy()
    np.testing.assert_array_equal(finite_rows(deltas), want)
    assert want.tolist() == [True, False, True, True, False, False, True, True, True, True,
                             True, True]
    assert finite_rows(deltas.double()).tolist() == want.tolist()


def stack_reference(blocks: dict[int, torch.Tensor], versions: np.ndarray,
                    clients: np.ndarray, order: dict[int, list[int]]) -> torch.Tensor:
    return torch.stack([blocks[int(v)][order[int(v)].index(int(k))]
                        for v, k in zip(versions, clients, strict=True)])


def test_store_returns_trainings_matrix_or_gathers_like_stack() -> None:
    generator = torch.Generator().manual_seed(0)
    blocks = {v: torch.randn(5, 8, generator=generator) for v in (0, 1)}
    order = {0: [4, 2, 9, 1, 6], 1: [3, 2, 7, 8, 0]}
    keep = np.array([True, True, False, True, True])  # client 9's update of v0 dropped
    store = UpdateStore()
    for v, block in blocks.items():
        store.put(v, np.array(order[v]), block, keep if v == 0 else np.ones(5, bool))
    assert len(store) == 9
    # one cohort in training order: its matrix as it lies, no copy
    whole = store.take(np.ones(5, np.int64), np.array(order[1]))
    assert whole.data_ptr() == blocks[1].data_ptr() and torch.equal(whole, blocks[1])
    # the first two rows of v0, consecutive: a view too
    head = store.take(np.zeros(2, np.int64), np.array([4, 2]))
    assert head.data_ptr() == blocks[0].data_ptr()
    torch.testing.assert_close(head, blocks[0][:2], rtol=0, atol=0)
    store.put(1, np.array(order[1]), blocks[1], np.ones(5, bool))
    versions, clients = np.array([1, 0, 1, 0]), np.array([7, 6, 3, 1])
    mixed = store.take(versions, clients)  # two matrices: gathered
    assert torch.equal(mixed, stack_reference(blocks, versions, clients, order))
    assert mixed.data_ptr() not in (blocks[0].data_ptr(), blocks[1].data_ptr())
    shuffled = store.take(np.ones(2, np.int64), np.array([8, 2]))  # one matrix, out of order
    assert torch.equal(shuffled, torch.stack([blocks[1][3], blocks[1][1]]))
    assert len(store) == 1  # v1's client 0
    again = UpdateStore()
    again.load_state_dict(store.state_dict())
    assert torch.equal(again.take(np.array([1]), np.array([0])), blocks[1][4:5])


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_a_cohort_read_in_place_on_a_gpu_trains_to_the_same_bits() -> None:
    data = make_cohort(SIZES, (1, 6, 6), num_classes=5, dtype=torch.float32).to(
        torch.device("cuda"))
    model = build_model("linear", (1, 6, 6), 5).to("cuda")
    params = initial_params(model, seed=3, dtype=torch.float32).to("cuda")
    hp = TrainHParams(2, 8, 0.2, 1e-3, 0.1, "batched")
    seeds = [50 + k for k in PICK]
    view, packed = data.view(PICK), data.subset(PICK)
    assert view.x is data.x
    a = train_cohort(model, params, view, hp, seeds)
    b = train_cohort(model, params, packed, hp, seeds)
    assert torch.equal(a.deltas, b.deltas)
    np.testing.assert_array_equal(a.train_losses, b.train_losses)

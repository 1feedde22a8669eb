"""Local training: batched equals the loop, and both equal hand-written SGD."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch
from torch import nn

from simfl.data.packed import ClientData
from simfl.train import batched
from simfl.train.batched import (
    CPU_CHUNK_BYTES,
    TrainHParams,
    chunk_size,
    float32_precision,
    plan_batches,
    train_cohort,
)
from simfl.train.loop import LoopTrainer
from simfl.train.models import ParamLayout, build_model, initial_params
from tests.conftest import make_cohort

SIZES = [1, 7, 16, 33, 50, 5]  # ragged, one smaller than a batch, one a multiple of it
NO_GPU = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
DEVICES = [pytest.param("cpu"), pytest.param("cuda", marks=NO_GPU)]


def test_convnet_has_the_reference_parameter_count() -> None:
    assert ParamLayout.of(build_model("convnet", (1, 28, 28), 62)).numel == 115_646


def test_plan_visits_every_sample_once_per_epoch() -> None:
    plan = plan_batches(np.array(SIZES), epochs=3, batch_size=16, seeds=range(len(SIZES)))
    offsets = np.concatenate([[0], np.cumsum(SIZES)])
    for k, n in enumerate(SIZES):
        per_epoch = plan.num_steps[k] // 3
        assert per_epoch == -(-n // 16)
        for e in range(3):
            block = slice(e * per_epoch, (e + 1) * per_epoch)
            rows = plan.rows[k, block][plan.mask[k, block]].numpy()
            assert sorted(rows) == list(range(offsets[k], offsets[k] + n))
    again = plan_batches(np.array(SIZES), epochs=3, batch_size=16, seeds=range(len(SIZES)))
    assert torch.equal(plan.rows, again.rows)


@pytest.mark.parametrize("model_name, shape", [("linear", (1, 28, 28)), ("convnet", (1, 28, 28)),
                                               ("linear", (20,))])
@pytest.mark.parametrize("l2, mu", [(0.0, 0.0), (1e-2, 0.5)])
@pytest.mark.parametrize("device", DEVICES)
def test_batched_equals_loop_in_float64(model_name: str, shape: tuple[int, ...], l2: float,
                                        mu: float, device: str) -> None:
    data = make_cohort(SIZES, shape, num_classes=5).to(torch.device(device))
    model = build_model(model_name, shape, 5).to(device)
    params = initial_params(model, seed=1, dtype=torch.float64).to(device)
    seeds = [100 + k for k in range(len(SIZES))]
    results = {
        backend: train_cohort(model, params, data, TrainHParams(2, 16, 0.3, l2, mu, backend), seeds)
        for backend in ("batched", "loop")
    }
    a, b = results["batched"], results["loop"]
    rel = (a.deltas - b.deltas).norm(dim=1) / b.deltas.norm(dim=1)
    assert rel.max().item() <= 1e-12
    np.testing.assert_allclose(a.train_losses, b.train_losses, rtol=1e-12)
    np.testing.assert_array_equal(a.num_examples, SIZES)


def test_one_full_batch_step_is_hand_written_gradient_descent() -> None:
    """One client, batch = all samples, one epoch: w' = w - lr * ∇[CE + l2/2 |w|^2]."""
    data = make_cohort([12], (4,), num_classes=3)
    model = build_model("linear", (4,), 3)
    params = initial_params(model, seed=0, dtype=torch.float64)
    l2, lr = 0.1, 0.5
    for backend in ("batched", "loop"):
        result = train_cohort(model, params, data, TrainHParams(1, 12, lr, l2, 0.0, backend), [0])
        w, b = params[:12].view(3, 4), params[12:]
        probs = torch.softmax(data.x @ w.T + b, dim=1)
        residual = (probs - torch.nn.functional.one_hot(data.y, 3)) / 12  # (N, C)
        grad = torch.cat([(residual.T @ data.x).flatten(), residual.sum(0)]) + l2 * params
        torch.testing.assert_close(result.deltas[0], -lr * grad, rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("mu", [0.0, 0.5])
def test_linear_without_bias_batched_equals_loop_and_hand_written_step(mu: float) -> None:
    """The authors' linear model (scores x·Wᵀ, W = 0 at start): the closed-form batched step
    equals the autograd loop, and one full-batch step is w' = w − lr ∇[CE + l2/2 |w|²]."""
    data = make_cohort(SIZES, (20,), num_classes=5)
    model = build_model("linear", (20,), 5, bias=False)
    params = initial_params(model, seed=1, dtype=torch.float64, init="zeros")
    assert params.shape == (100,) and not params.any()
    seeds = [100 + k for k in range(len(SIZES))]
    hp = {b: TrainHParams(2, 16, 0.3, 1e-2, mu, b) for b in ("batched", "loop")}
    a, b = (train_cohort(model, params, data, hp[k], seeds) for k in ("batched", "loop"))
    assert ((a.deltas - b.deltas).norm(dim=1) / b.deltas.norm(dim=1)).max().item() <= 1e-12
    one = make_cohort([12], (4,), num_classes=3)
    small = build_model("linear", (4,), 3, bias=False)
    w0 = initial_params(small, seed=0, dtype=torch.float64)  # (12,): no bias entries
    result = train_cohort(small, w0, one, TrainHParams(1, 12, 0.5, 0.1, 0.0, "batched"), [0])
    probs = torch.softmax(one.x @ w0.view(3, 4).T, dim=1)
    residual = (probs - torch.nn.functional.one_hot(one.y, 3)) / 12
    grad = (residual.T @ one.x).flatten() + 0.1 * w0
    torch.testing.assert_close(result.deltas[0], -0.5 * grad, rtol=1e-12, atol=1e-14)


def test_prox_term_pulls_towards_the_global_model() -> None:
    data = make_cohort([40, 40], (10,), num_classes=4)
    model = build_model("linear", (10,), 4)
    params = initial_params(model, seed=0, dtype=torch.float64)
    free = train_cohort(model, params, data, TrainHParams(5, 8, 0.2, backend="loop"), [1, 2])
    prox = train_cohort(model, params, data, TrainHParams(5, 8, 0.2, prox_mu=1.0,
                                                          backend="loop"), [1, 2])
    assert (prox.deltas.norm(dim=1) < free.deltas.norm(dim=1)).all()


def test_shuffle_seeds_change_the_result() -> None:
    data = make_cohort([40], (10,), num_classes=4)
    model = build_model("linear", (10,), 4)
    params = initial_params(model, seed=0, dtype=torch.float64)
    hp = TrainHParams(1, 8, 0.2, backend="loop")
    one = train_cohort(model, params, data, hp, [1]).deltas
    assert torch.equal(one, train_cohort(model, params, data, hp, [1]).deltas)
    assert not torch.equal(one, train_cohort(model, params, data, hp, [2]).deltas)


def test_chunk_size_keeps_a_chunks_parameters_in_the_cpu_budget() -> None:
    """On a CPU, as many clients as have their parameters in CPU_CHUNK_BYTES (at least
    one, at most the cohort); on a GPU the whole cohort; ``chunk`` overrides both."""
    hp = TrainHParams(1, 16, 0.1)
    conv = initial_params(build_model("convnet", (1, 28, 28), 62), 0, torch.float32)
    assert chunk_size(hp, conv, 100) == CPU_CHUNK_BYTES // (115_646 * 4) == 18
    assert chunk_size(hp, conv.double(), 100) == 9
    assert chunk_size(hp, conv, 7) == 7
    assert chunk_size(hp, torch.zeros(3 * CPU_CHUNK_BYTES // 4), 100) == 1
    assert chunk_size(hp, conv.to("meta"), 100) == 100  # not a CPU
    assert chunk_size(dataclasses.replace(hp, chunk=5), conv.to("meta"), 100) == 5
    assert chunk_size(dataclasses.replace(hp, chunk=5), conv, 3) == 3


@pytest.mark.parametrize("device", DEVICES)
def test_chunked_cohort_equals_the_whole_cohort(device: str) -> None:
    """A cohort trained in chunks (what a GPU out-of-memory error falls back to) gives
    every client the update it gets when the cohort is trained at once."""
    data = make_cohort(SIZES, (1, 28, 28), num_classes=5).to(torch.device(device))
    model = build_model("convnet", (1, 28, 28), 5).to(device)
    params = initial_params(model, seed=3, dtype=torch.float64).to(device)
    seeds = list(range(len(SIZES)))
    whole = train_cohort(model, params, data, TrainHParams(1, 16, 0.3, backend="batched"), seeds)
    for chunk in (1, 4):
        hp = TrainHParams(1, 16, 0.3, backend="batched", chunk=chunk)
        part = train_cohort(model, params, data, hp, seeds)
        rel = (part.deltas - whole.deltas).norm(dim=1) / whole.deltas.norm(dim=1)
        assert rel.max().item() <= 1e-12
        np.testing.assert_allclose(part.train_losses, whole.train_losses, rtol=1e-12)


def test_slot_steps_is_the_makespan_of_longest_first_list_scheduling() -> None:
    """Steps 5, 3, 3, 2, 2, 1 in 2 slots, longest first into the slot that frees first:
    slot A 5, then 2 (7), then 1 (8); slot B 3, 3 (6), then 2 (8): 8 steps."""
    steps = np.array([2, 3, 1, 5, 3, 2])
    assert batched.slot_steps(steps, 2) == 8
    assert batched.slot_steps(steps, 1) == 16 and batched.slot_steps(steps, 6) == 5
    assert batched.slot_steps(steps, 10) == 5 and batched.slot_steps(np.array([0, 4]), 3) == 4


@pytest.mark.parametrize("width", [1, 2, 3, 5, 7])
def test_slots_take_the_next_client_and_equal_the_loop(width: int,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """Clients of 0 to 33 samples in fewer slots than clients: a finished client's slot
    takes the next one (or the last running slot, once none is left); every client's
    update and loss are the loop's, in slot_steps steps of the slots."""
    sizes = [7, 0, 33, 16, 1, 0, 21, 5]
    data = make_cohort(sizes, (6,), num_classes=4)
    model = nn.Sequential(nn.Flatten(), nn.Linear(6, 5), nn.Tanh(), nn.Linear(5, 4))
    params = initial_params(model, seed=4, dtype=torch.float64)
    seeds = list(range(len(sizes)))
    counted: list[int] = []
    step = batched._Batched.step
    monkeypatch.setattr(batched._Batched, "step",
                        lambda self, m: counted.append(m) or step(self, m))
    hp = TrainHParams(2, 4, 0.2, 1e-2, 0.1, "batched", chunk=width)
    got = train_cohort(model, params, data, hp, seeds)
    want = train_cohort(model, params, data, dataclasses.replace(hp, backend="loop"), seeds)
    num_steps = 2 * -(-np.array(sizes) // 4)
    assert len(counted) == batched.slot_steps(num_steps, width)
    assert max(counted) == min(width, 6)  # 6 clients have samples
    assert sum(counted) == num_steps.sum()  # every client-step once, none for padding
    assert torch.equal(got.deltas[[1, 5]], torch.zeros(2, params.numel()))
    rel = (got.deltas - want.deltas).norm(dim=1) / want.deltas.norm(dim=1).clamp(min=1e-300)
    assert rel.max().item() <= 1e-10
    np.testing.assert_allclose(got.train_losses, want.train_losses, rtol=1e-10)


class ViewsItsImages(nn.Module):
    """A plug-in that ``view``s a convolution's output, as if it were contiguous."""

    def __init__(self) -> None:
        super().__init__()
        self.conv, self.fc = nn.Conv2d(1, 2, 3), nn.Linear(2 * 4 * 4, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.conv(x)
        return self.fc(y.view(y.shape[0], -1))


def test_the_loop_takes_channels_last_only_for_layers_it_knows() -> None:
    """simfl's ConvNets and known Sequentials train channels-last in the loop (equal to
    the batched kernels: test_batched_equals_loop_in_float64); a plug-in's own module
    keeps contiguous images, so its ``view`` still works."""
    data = make_cohort([5, 9], (1, 6, 6), num_classes=3)
    plan = plan_batches(data.num_samples, 1, 4, [0, 1])
    for model, expected in ((build_model("cnn", (1, 6, 6), 3), True),
                            (nn.Sequential(nn.Conv2d(1, 2, 3), nn.Flatten(),
                                           nn.Linear(32, 3)), True),
                            (nn.Sequential(nn.Flatten(), nn.Linear(36, 3)), False),
                            (ViewsItsImages(), False)):
        params = initial_params(model, seed=0, dtype=torch.float64)
        trainer = LoopTrainer(model, params, data, TrainHParams(1, 4, 0.1), plan)
        assert trainer.channels_last == expected
        assert trainer.run()[0].abs().sum() > 0


def test_precision_context_sets_and_restores_the_float32_modes() -> None:
    matmul, conv = torch.backends.cuda.matmul, torch.backends.cudnn.conv
    before = matmul.fp32_precision, conv.fp32_precision
    with float32_precision("tf32", torch.device("cuda")):
        assert (matmul.fp32_precision, conv.fp32_precision) == ("tf32", "tf32")
    with float32_precision("fp32", torch.device("cuda")):
        assert (matmul.fp32_precision, conv.fp32_precision) == ("ieee", "ieee")
    with float32_precision("tf32", torch.device("cpu")):  # no effect off a GPU
        assert (matmul.fp32_precision, conv.fp32_precision) == before
    assert (matmul.fp32_precision, conv.fp32_precision) == before


@pytest.mark.parametrize("device", DEVICES)
def test_bf16_autocast_changes_the_update_only_by_rounding(device: str) -> None:
    data = make_cohort(SIZES, (1, 28, 28), num_classes=5).to(torch.device(device))
    model = build_model("convnet", (1, 28, 28), 5).to(device)
    params = initial_params(model, seed=3, dtype=torch.float32).to(device)
    seeds = list(range(len(SIZES)))
    exact, bf16 = (train_cohort(model, params, data,
                                TrainHParams(1, 16, 0.1, backend="batched", precision=p), seeds)
                   for p in ("fp32", "bf16"))
    rel = ((bf16.deltas - exact.deltas).norm(dim=1) / exact.deltas.norm(dim=1)).max().item()
    assert 0 < rel < 0.1  # bf16 keeps ~3 significant digits per product


def char_cohort(sizes: list[int], window: int, num_classes: int) -> ClientData:
    """make_cohort with character indices (as floats, the way cohorts are trained) for x."""
    data = make_cohort(sizes, (window,), num_classes)
    x = torch.randint(0, num_classes, (sum(sizes), window), generator=torch.Generator()
                      .manual_seed(1)).to(torch.float64)
    return ClientData(x, data.y, data.offsets, data.client_ids)


@pytest.mark.parametrize("l2, mu", [(0.0, 0.0), (1e-2, 0.5)])
def test_gru_batched_equals_loop_in_float64(l2: float, mu: float) -> None:
    """vmap batches the GRU's time steps across clients: the same updates as the loop."""
    data = char_cohort(SIZES, window=6, num_classes=5)
    model = build_model("gru", (6,), 5)
    params = initial_params(model, seed=1, dtype=torch.float64)
    seeds = [100 + k for k in range(len(SIZES))]
    a, b = (train_cohort(model, params, data, TrainHParams(1, 16, 0.3, l2, mu, backend),
                         seeds) for backend in ("batched", "loop"))
    rel = (a.deltas - b.deltas).norm(dim=1) / b.deltas.norm(dim=1)
    assert rel.max().item() <= 1e-12
    np.testing.assert_allclose(a.train_losses, b.train_losses, rtol=1e-12)


def test_gru_is_pytorchs_gru_on_one_hot_inputs() -> None:
    model = build_model("gru", (9,), 7).double()
    reference = torch.nn.GRU(7, 128, batch_first=True).double()
    with torch.no_grad():
        for name in ("weight_ih", "weight_hh", "bias_ih", "bias_hh"):
            getattr(reference, f"{name}_l0").copy_(getattr(model, name))
    x = torch.randint(0, 7, (5, 9), generator=torch.Generator().manual_seed(0))
    _, h = reference(torch.nn.functional.one_hot(x, 7).double())
    torch.testing.assert_close(model(x.double()), model.fc(h[0]), rtol=0, atol=1e-12)


@pytest.mark.parametrize("backend", ["auto", "batched", "loop"])
def test_an_empty_cohort_trains_nothing(backend: str) -> None:
    data = make_cohort([3, 4], (5,), num_classes=3).subset(np.zeros(0, dtype=np.int64))
    model = build_model("linear", (5,), 3)
    params = initial_params(model, seed=0, dtype=torch.float64)
    result = train_cohort(model, params, data, TrainHParams(1, 4, 0.1, backend=backend), [])
    assert result.deltas.shape == (0, 18) and result.train_losses.shape == (0,)

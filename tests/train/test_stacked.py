"""The stacked kernels train every client exactly as the per-client loop does.

Random models (layer sizes, activations, image sizes, channels, kernels, strides,
paddings, dilations, groups), ragged clients and random batch sizes, with ℓ2 and
FedProx, in float64: the parameters after local training agree with the loop's to
1e-10 relative (sums in another order differ in the last bits only). A module the
kernels do not know is detected and trained through vmap, equal to the loop too.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from simfl.data.packed import ClientData
from simfl.train.batched import TrainHParams, train_cohort
from simfl.train.models import CharGRU, build_model, initial_params
from simfl.train.stacked import relu_mlp, stacked_program
from simfl.train.steps import batched_step
from tests.conftest import make_cohort

ACTIVATIONS = (nn.ReLU, nn.Tanh, nn.Sigmoid, nn.GELU, nn.LeakyReLU, nn.ELU, nn.SiLU,
               nn.Identity)


def ragged(rng: np.random.Generator, shape: tuple[int, ...], classes: int,
           vocab: int = 0) -> ClientData:
    """3 to 6 clients of 1 to 40 samples (vocab > 0: integer inputs below it)."""
    sizes = rng.integers(1, 41, rng.integers(3, 7)).tolist()
    data = make_cohort(sizes, shape, classes, seed=int(rng.integers(1 << 30)))
    if vocab:
        x = torch.from_numpy(rng.integers(0, vocab, (sum(sizes), *shape)))
        return ClientData(x, data.y, data.offsets, data.client_ids)
    return data


def assert_trains_as_the_loop(model: nn.Module, data: ClientData, rng: np.random.Generator,
                              kernel: str = "stacked") -> None:
    """batched (through ``kernel``) and loop: the same deltas and training losses."""
    l2, mu = ((0.0, 0.0), (1e-2, 0.5))[int(rng.integers(2))]
    epochs, batch, lr = int(rng.integers(1, 3)), int(rng.integers(1, 17)), rng.uniform(0.05, 0.3)
    hp = {b: TrainHParams(epochs, batch, float(lr), l2, mu, b) for b in ("batched", "loop")}
    assert batched_step(model, hp["batched"])[1] == kernel
    params = initial_params(model, seed=int(rng.integers(1 << 30)), dtype=torch.float64)
    seeds = rng.integers(0, 1 << 30, data.num_clients).tolist()
    a, b = (train_cohort(model, params, data, hp[k], seeds) for k in ("batched", "loop"))
    assert b.deltas.norm(dim=1).min() > 0
    rel = (a.deltas - b.deltas).norm(dim=1) / b.deltas.norm(dim=1)
    assert rel.max().item() <= 1e-10
    np.testing.assert_allclose(a.train_losses, b.train_losses, rtol=1e-10)


@pytest.mark.parametrize("seed", range(6))
def test_random_mlps(seed: int) -> None:
    """Flatten, then 1-3 linear layers of random widths, with or without bias, between
    random activations and eval-mode dropout (identity)."""
    rng = np.random.default_rng(seed)
    shape = tuple(int(n) for n in rng.integers(1, 5, rng.integers(1, 4)))
    layers: list[nn.Module] = [nn.Flatten()]
    width = int(np.prod(shape))
    for _ in range(rng.integers(1, 4)):
        out = int(rng.integers(2, 20))
        layers += [nn.Linear(width, out, bias=bool(rng.integers(2))),
                   ACTIVATIONS[rng.integers(len(ACTIVATIONS))](), nn.Dropout(0.3).eval()]
        width = out
    classes = int(rng.integers(2, 7))
    model = nn.Sequential(*layers, nn.Sequential(nn.Linear(width, classes)))  # nested too
    only_relu = all(type(m) is nn.ReLU for m in layers[2::3])
    assert_trains_as_the_loop(model, ragged(rng, shape, classes), rng,
                              "mlp" if only_relu else "stacked")


@pytest.mark.parametrize("seed", range(6))
def test_random_relu_mlps_by_hand(seed: int) -> None:
    """ReLU MLPs (1-4 linear layers of random widths, with or without bias, eval-mode
    dropout and identities between, nested Sequentials) take the hand-written backward
    pass, equal to the loop's autograd."""
    rng = np.random.default_rng(500 + seed)
    shape = tuple(int(n) for n in rng.integers(1, 5, rng.integers(1, 4)))
    width, classes = int(np.prod(shape)), int(rng.integers(2, 7))
    layers: list[nn.Module] = [nn.Flatten()]
    for i in range(int(rng.integers(0, 4))):
        out = int(rng.integers(2, 20))
        block = [nn.Linear(width, out, bias=bool(rng.integers(2))), nn.ReLU(inplace=i == 1),
                 (nn.Dropout(0.3).eval(), nn.Identity(), nn.Dropout(0.0))[rng.integers(3)]]
        layers += block if rng.integers(2) else [nn.Sequential(*block)]
        width = out
    model = nn.Sequential(*layers, nn.Linear(width, classes, bias=bool(rng.integers(2))))
    assert relu_mlp(model) is not None
    assert_trains_as_the_loop(model, ragged(rng, shape, classes), rng, kernel="mlp")


def test_what_is_not_a_relu_mlp_is_detected() -> None:
    """The hand-written backward pass takes Flatten(1, -1), then Linear layers with one
    ReLU between each two, nothing else."""
    linear = nn.Linear(4, 4)
    assert relu_mlp(nn.Sequential(nn.Flatten(), nn.Linear(4, 3, bias=False), nn.ReLU(),
                                  nn.Linear(3, 2))) == [("1.weight", None),
                                                        ("3.weight", "3.bias")]
    others = [nn.Sequential(nn.Linear(4, 2)),  # no Flatten
              nn.Sequential(nn.Flatten(2), nn.Linear(4, 2)),
              nn.Sequential(nn.Flatten(), nn.Linear(4, 2), nn.ReLU()),  # ReLU logits
              nn.Sequential(nn.Flatten(), nn.Linear(4, 4), nn.Tanh(), nn.Linear(4, 2)),
              nn.Sequential(nn.Flatten(), nn.Linear(4, 4), nn.ReLU(), nn.ReLU(),
                            nn.Linear(4, 2)),
              nn.Sequential(nn.Flatten(), linear, nn.ReLU(), linear),  # listed twice
              nn.Sequential(nn.Flatten(), nn.Linear(4, 4), nn.Dropout(0.5), nn.Linear(4, 2)),
              MySequential(nn.Flatten(), nn.Linear(4, 2)),
              build_model("linear", (4,), 2)]
    assert all(relu_mlp(m) is None for m in others)
    hp = TrainHParams(1, 4, 0.1, precision="bf16")  # an autocast of the forward pass
    assert batched_step(nn.Sequential(nn.Flatten(), nn.Linear(4, 2)), hp)[1] == "stacked"


def random_conv_stack(rng: np.random.Generator, channels: int, height: int, width: int,
                      classes: int) -> nn.Sequential:
    """1-2 convolutions (random out channels, kernel, stride, padding, dilation, groups,
    bias), each with an activation and maybe a 2×2 max or average pool, then an adaptive
    average pool, flatten and a linear layer."""
    layers: list[nn.Module] = []
    for _ in range(rng.integers(1, 3)):
        groups = int(rng.choice([g for g in (1, 2, 3) if channels % g == 0]))
        out = groups * int(rng.integers(1, 4))
        dilation, padding = int(rng.integers(1, 3)), int(rng.integers(0, 2))
        kernel = int(rng.integers(1, 4))
        while (min(height, width) + 2 * padding - dilation * (kernel - 1)) < 1:
            kernel -= 1  # keeps an output pixel at least
        stride = int(rng.integers(1, 3))
        layers += [nn.Conv2d(channels, out, kernel, stride, padding, dilation, groups,
                             bias=bool(rng.integers(2))),
                   ACTIVATIONS[rng.integers(len(ACTIVATIONS))]()]
        height, width = ((side + 2 * padding - dilation * (kernel - 1) - 1) // stride + 1
                         for side in (height, width))
        channels = out
        if min(height, width) >= 2 and rng.integers(2):
            layers.append((nn.MaxPool2d, nn.AvgPool2d)[rng.integers(2)](2))
            height, width = height // 2, width // 2
    side = int(rng.integers(1, 3))
    return nn.Sequential(*layers, nn.AdaptiveAvgPool2d(side), nn.Flatten(),
                         nn.Linear(channels * side * side, classes))


@pytest.mark.parametrize("seed", range(6))
def test_random_convolution_stacks(seed: int) -> None:
    rng = np.random.default_rng(100 + seed)
    shape = (int(rng.integers(1, 4)), int(rng.integers(3, 10)), int(rng.integers(3, 10)))
    classes = int(rng.integers(2, 6))
    model = random_conv_stack(rng, *shape, classes)
    assert_trains_as_the_loop(model, ragged(rng, shape, classes), rng)


@pytest.mark.parametrize("seed", range(3))
def test_the_cnn_on_random_image_sizes(seed: int) -> None:
    """SmallCNN: 3×3 convolutions, pools skipped below 2 pixels, average-pool to 2×2."""
    rng = np.random.default_rng(200 + seed)
    shape = (int(rng.integers(1, 4)), int(rng.integers(1, 9)), int(rng.integers(1, 9)))
    model = build_model("cnn", shape, 4)
    assert_trains_as_the_loop(model, ragged(rng, shape, 4), rng)


def test_the_papers_convnet() -> None:
    rng = np.random.default_rng(3)
    data = make_cohort([3, 12, 7], (1, 28, 28), 5)
    assert_trains_as_the_loop(build_model("convnet", (1, 28, 28), 5), data, rng)


@pytest.mark.parametrize("seed", range(3))
def test_the_gru_on_random_windows(seed: int) -> None:
    rng = np.random.default_rng(300 + seed)
    window, classes = int(rng.integers(1, 8)), int(rng.integers(2, 9))
    model = CharGRU((window,), classes, hidden=int(rng.integers(2, 12)))
    data = ragged(rng, (window,), classes, vocab=classes)
    data = ClientData(data.x.double(), data.y, data.offsets, data.client_ids)  # as stored
    assert_trains_as_the_loop(model, data, rng)


@pytest.mark.parametrize("seed", range(3))
def test_an_embedding_then_linear_layers(seed: int) -> None:
    """Integer inputs stay integers for an embedding: client k's indices + k·V."""
    rng = np.random.default_rng(400 + seed)
    vocab, dim, window = (int(n) for n in rng.integers(2, 7, 3))
    model = nn.Sequential(nn.Embedding(vocab, dim), nn.Tanh(), nn.Flatten(),
                          nn.Linear(window * dim, 3))
    assert_trains_as_the_loop(model, ragged(rng, (window,), 3, vocab=vocab), rng)


class Scaled(nn.Module):
    """A module the kernels do not know: a linear layer times a learned scale."""

    def __init__(self) -> None:
        super().__init__()
        self.fc, self.scale = nn.Linear(6, 3), nn.Parameter(torch.ones(1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.scale * self.fc(x)


class MySequential(nn.Sequential):
    pass


def test_what_the_kernels_do_not_know_is_detected() -> None:
    """Exact types and settings: a subclass, a custom module, a reflect-padded
    convolution, a training-mode dropout, a module listed twice, a batch norm or a
    flatten of the batch axis give no program; eval-mode or p = 0 dropout do."""
    linear = nn.Linear(4, 4)
    unknown = [Scaled(), MySequential(nn.Linear(4, 2)),
               nn.Sequential(nn.Conv2d(1, 2, 3, padding=1, padding_mode="reflect")),
               nn.Sequential(nn.Linear(4, 4), nn.Dropout(0.5)),
               nn.Sequential(linear, nn.ReLU(), linear),
               nn.Sequential(nn.Linear(4, 4), nn.BatchNorm1d(4)),
               nn.Sequential(nn.Flatten(0), nn.Linear(4, 2)),
               nn.Sequential(nn.MaxPool2d(2, return_indices=True))]
    assert all(stacked_program(m) is None for m in unknown)
    known = [nn.Sequential(nn.Linear(4, 4), nn.Dropout(0.5).eval()),
             nn.Sequential(nn.Linear(4, 4), nn.Dropout(0.0))]
    assert all(stacked_program(m) is not None for m in known)


def test_an_unknown_module_falls_back_to_vmap() -> None:
    rng = np.random.default_rng(5)
    assert_trains_as_the_loop(Scaled(), ragged(rng, (6,), 3), rng, kernel="vmap")


@pytest.mark.parametrize("model", ["mlp", "linear"])
def test_bf16_autocast_changes_a_linear_layers_update_only_by_rounding(model: str) -> None:
    """Under bf16 the linear model leaves its closed form for the stacked kernels; their
    fused weight update takes the layer's bf16 input and output gradient."""
    net = (nn.Sequential(nn.Flatten(), nn.Linear(20, 16), nn.ReLU(), nn.Linear(16, 5))
           if model == "mlp" else build_model("linear", (20,), 5))
    data = make_cohort([7, 16, 30], (20,), 5, dtype=torch.float32)
    params = initial_params(net, seed=2, dtype=torch.float32)
    exact, bf16 = (train_cohort(net, params, data, TrainHParams(1, 8, 0.1, backend="batched",
                                                                precision=p), [1, 2, 3])
                   for p in ("fp32", "bf16"))
    assert batched_step(net, TrainHParams(1, 8, 0.1, precision="bf16"))[1] == "stacked"
    rel = ((bf16.deltas - exact.deltas).norm(dim=1) / exact.deltas.norm(dim=1)).max().item()
    assert 0 < rel < 0.05  # bf16 keeps ~3 significant digits per product

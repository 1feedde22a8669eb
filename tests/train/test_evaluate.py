"""Batched evaluation equals a per-client computation."""

from __future__ import annotations

import numpy as np
import torch

from simfl.train.evaluate import evaluate_cohort
from simfl.train.models import build_model, initial_params, relu_max_pool
from tests.conftest import make_cohort


def test_per_client_loss_and_error_match_a_loop() -> None:
    sizes = [3, 0, 10, 25]  # an empty client included
    data = make_cohort(sizes, (1, 28, 28), num_classes=62)
    model = build_model("convnet", (1, 28, 28), 62).double()
    params = initial_params(model, seed=3, dtype=torch.float64)
    result = evaluate_cohort(model, params, data, batch_size=7)  # chunks cross clients
    named = dict(zip([n for n, _ in model.named_parameters()],
                     torch.split(params, [p.numel() for p in model.parameters()]), strict=True))
    for k, n in enumerate(sizes):
        if n == 0:
            assert result.losses[k] == 0 and result.errors[k] == 0
            continue
        rows = slice(data.offsets[k], data.offsets[k + 1])
        logits = torch.func.functional_call(
            model, {name: t.view_as(p) for (name, t), p in
                    zip(named.items(), model.parameters(), strict=True)}, (data.x[rows],))
        loss = torch.nn.functional.cross_entropy(logits, data.y[rows]).item()
        error = (logits.argmax(1) != data.y[rows]).double().mean().item()
        np.testing.assert_allclose(result.losses[k], loss, rtol=1e-12)
        np.testing.assert_allclose(result.errors[k], error, rtol=1e-12)
    np.testing.assert_array_equal(result.num_samples, sizes)


def test_the_evaluation_pooling_gives_max_pool2d_s_values_exactly() -> None:
    """Without autograd on a CPU, relu_max_pool takes a strided maximum instead of
    max_pool2d (faster); its values are the same to the bit, ties, zeros and all-negative
    windows included, and so are the ConvNet's logits."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(6, 32, 24, 24, generator=g).round(decimals=1)  # many ties
    x[0], x[1] = 0.0, -1.0  # all-zero and all-negative maps
    x[2, :, 1::2] = x[2, :, ::2]  # every window's rows tie
    with torch.no_grad():
        assert torch.equal(relu_max_pool(x), torch.max_pool2d(torch.relu(x), 2))
    model = build_model("convnet", (1, 28, 28), 62)
    images = torch.rand(40, 1, 28, 28, generator=g)
    with torch.no_grad():
        fast = model(images)
    assert torch.equal(fast, model(images).detach())  # autograd on: max_pool2d itself

"""Batched evaluation equals a per-client computation."""

from __future__ import annotations

import numpy as np
import torch

from simfl.train.evaluate import evaluate_cohort
from simfl.train.models import build_model, initial_params
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

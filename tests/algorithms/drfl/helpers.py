"""Small federated instances for the DRFL tests."""

from __future__ import annotations

import numpy as np

from simfl.algorithms.drfl.problem import ClientData

TRUE_W = np.array([1.0, -1.0, 0.5])


def classification_clients(label_noise: float, num_samples: int = 15, seed: int = 0
                           ) -> tuple[ClientData, ...]:
    """Three clients with shifted features and labels sign(x'w + noise)."""
    rng = np.random.default_rng(seed)
    clients = []
    for s in range(3):
        x = rng.normal(size=(num_samples, 3)) + 0.5 * s
        y = np.sign(x @ TRUE_W + label_noise * rng.normal(size=num_samples))
        clients.append(ClientData(x, y))
    return tuple(clients)


def regression_clients(num_samples: int = 15, seed: int = 0) -> tuple[ClientData, ...]:
    rng = np.random.default_rng(seed)
    clients = []
    for s in range(3):
        x = rng.normal(size=(num_samples, 3)) + 0.5 * s
        clients.append(ClientData(x, x @ TRUE_W + rng.normal(size=num_samples)))
    return tuple(clients)

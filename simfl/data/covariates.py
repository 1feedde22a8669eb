"""Per-client covariates, for assigning clients to regions in a correlated way.

``digit_share``: the share of a writer's samples that are digits (FEMNIST
labels 0-9) rather than letters; ``writer_group``: the numeric suffix of a LEAF
writer id (``f0000_14`` -> 14, NIST's collection partition) or of a synthetic
id; ``num_samples``: the client's number of samples.
"""

from __future__ import annotations

import numpy as np

from simfl.data.packed import ClientData, Clients

NUM_DIGITS = 10


def client_covariate(clients: Clients, name: str) -> np.ndarray:
    """(K,) float covariate of each client (digit_share of generated clients: one pass
    that makes their labels, a chunk at a time)."""
    counts = clients.num_samples
    if name == "num_samples":
        return counts.astype(np.float64)
    if name == "digit_share":
        digits = np.concatenate([_digits(chunk) for chunk in clients.chunks()])
        return digits / np.maximum(counts, 1)
    if name == "writer_group":
        return np.array([float(cid.rsplit("_", 1)[-1]) if cid.rsplit("_", 1)[-1].isdigit()
                         else 0.0 for cid in clients.client_ids])
    raise ValueError(f"unknown covariate {name!r}")


def _digits(clients: ClientData) -> np.ndarray:
    """(K,) samples of each client whose label is a digit."""
    owner = np.repeat(np.arange(clients.num_clients), clients.num_samples)
    return np.bincount(owner, (clients.y.cpu().numpy() < NUM_DIGITS).astype(np.float64),
                       minlength=clients.num_clients)

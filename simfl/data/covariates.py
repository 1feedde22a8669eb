"""Per-client covariates, for assigning clients to regions in a correlated way.

``digit_share``: the share of a writer's samples that are digits (FEMNIST
labels 0-9) rather than letters; ``label_share``: the share of a device's samples
whose label is in the lower half of the classes (label < C // 2: of any data set, e.g.
synthetic data, whose devices differ in which labels they hold as their models do);
``writer_group``: the numeric suffix of a LEAF
writer id (``f0000_14`` -> 14, NIST's collection partition) or of a synthetic
id; ``num_samples``: the client's number of samples.
"""

from __future__ import annotations

import numpy as np

from simfl.data.packed import ClientData, Clients

NUM_DIGITS = 10


def client_covariate(clients: Clients, name: str, num_classes: int) -> np.ndarray:
    """(K,) float covariate of each client (a label share of generated clients: one pass
    that makes their labels, a chunk at a time)."""
    counts = clients.num_samples
    if name == "num_samples":
        return counts.astype(np.float64)
    if name in ("digit_share", "label_share"):
        below = NUM_DIGITS if name == "digit_share" else num_classes // 2
        share = np.concatenate([_labels_below(chunk, below) for chunk in clients.chunks()])
        return share / np.maximum(counts, 1)
    if name == "writer_group":
        return np.array([float(cid.rsplit("_", 1)[-1]) if cid.rsplit("_", 1)[-1].isdigit()
                         else 0.0 for cid in clients.client_ids])
    raise ValueError(f"unknown covariate {name!r}")


def _labels_below(clients: ClientData, below: int) -> np.ndarray:
    """(K,) samples of each client whose label is below ``below``."""
    owner = np.repeat(np.arange(clients.num_clients), clients.num_samples)
    return np.bincount(owner, (clients.y.cpu().numpy() < below).astype(np.float64),
                       minlength=clients.num_clients)

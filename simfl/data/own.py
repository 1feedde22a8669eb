"""One's own federated data: from numpy arrays, from a folder of per-client ``.npz`` files
(``data.dataset = "npz_folder"``), and a Dirichlet label-skew partition of a centralised
data set over clients.

Either way the clients go through the writer-level split of every simfl data set
(:func:`simfl.data.split.federate`: unseen test devices, ``data.min_samples_per_client``,
``data.max_clients``, standardisation with the training devices' statistics). A data set
plug-in (simfl.plugins) is a function ``(cfg: DataConfig, streams: Streams, ...) ->
FederatedData`` that typically ends with :func:`from_arrays`.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from simfl.data.packed import ClientData, FederatedData
from simfl.data.split import federate, group_rows
from simfl.errors import InputError
from simfl.rng import Streams
from simfl.scenario import DataConfig


def from_arrays(x: np.ndarray, y: np.ndarray, client_ids: np.ndarray, cfg: DataConfig,
                streams: Streams, name: str = "arrays",
                num_classes: int | None = None) -> FederatedData:
    """A federated data set from samples ``x`` (N, D) or (N, C, H, W), integer labels
    ``y`` (N,) in [0, num_classes) and the client of each sample ``client_ids`` (N,), split
    and standardised as ``cfg`` says (its ``test_client_fraction`` and the rest). Clients
    keep their file order if each one's rows are contiguous, else come sorted by id.
    ``num_classes`` defaults to the largest label + 1. InputError on inconsistent arrays."""
    x, y, ids = np.asarray(x), np.asarray(y), np.asarray(client_ids)
    if x.ndim < 2 or y.ndim != 1 or ids.ndim != 1 or not len(x) == len(y) == len(ids):
        raise InputError(f"{name}: x must be (N, ...) with N >= 1 and y, client_ids (N,); "
                         f"got shapes {x.shape}, {y.shape}, {ids.shape}")
    if not len(y) or not np.issubdtype(y.dtype, np.integer) or y.min() < 0:
        raise InputError(f"{name}: labels must be integers >= 0 (got {y.dtype})")
    classes = int(y.max()) + 1 if num_classes is None else num_classes
    if y.max() >= classes:
        raise InputError(f"{name}: label {int(y.max())} is not below num_classes = {classes}")
    groups = group_rows(ids)
    clients = ClientData(x=torch.from_numpy(x[groups.order].astype(np.float32)),
                         y=torch.from_numpy(y[groups.order].astype(np.int64)),
                         offsets=groups.offsets, client_ids=groups.client_ids.astype(str))
    return federate(name, clients, cfg, streams, classes, x.ndim == 2, name)


def load_npz_folder(cfg: DataConfig, streams: Streams) -> FederatedData:
    """The clients of folder ``cfg.path``: one ``<client id>.npz`` each, holding arrays
    ``x`` (n, ...) and ``y`` (n,), read in name order (data.dataset = "npz_folder")."""
    folder = Path(cfg.path)
    if not folder.is_dir():
        raise InputError(f"'data.path' = {cfg.path!r}: no such folder (data.dataset = "
                         f"'npz_folder' reads one <client>.npz per device from it)")
    files = sorted(folder.glob("*.npz"))
    if not files:
        raise InputError(f"{folder}: holds no .npz file (one <client>.npz per device)")
    xs, ys = [], []
    for file in files:
        try:
            with np.load(file) as arrays:
                xs.append(arrays["x"])
                ys.append(arrays["y"])
        except (OSError, ValueError, KeyError) as e:
            raise InputError(f"{file}: not a client file with arrays x and y ({e})") from None
    ids = np.repeat([f.stem for f in files], [len(y) for y in ys])
    return from_arrays(np.concatenate(xs), np.concatenate(ys), ids, cfg, streams,
                       name=f"npz_folder {folder.name}")


def dirichlet_partition(labels: np.ndarray, num_clients: int, alpha: float,
                        rng: np.random.Generator) -> np.ndarray:
    """The client (0 .. num_clients - 1) of each sample of a centralised data set, with
    label skew: each class's samples are dealt to the clients in shares drawn from
    Dirichlet(alpha, ..., alpha) (Hsu, Qi, Brown, "Measuring the effects of non-identical
    data distribution for federated visual classification", 2019). Large ``alpha``: every
    client gets about 1 / num_clients of every class; small: each class sits on few
    clients. Some clients may get no sample; the result depends only on ``rng``."""
    labels = np.asarray(labels)
    if num_clients < 1 or not alpha > 0 or not np.isfinite(alpha):
        raise ValueError(f"need num_clients >= 1 and a finite alpha > 0, got {num_clients}, "
                         f"{alpha}")
    clients = np.empty(len(labels), dtype=np.int64)
    for label in np.unique(labels):
        rows = rng.permutation(np.flatnonzero(labels == label))
        shares = rng.dirichlet(np.full(num_clients, float(alpha)))
        counts = rng.multinomial(len(rows), shares / shares.sum())
        clients[rows] = np.repeat(np.arange(num_clients), counts)
    return clients

"""Federated datasets: FEMNIST (npz or LEAF json), Shakespeare (by role or LEAF json) and
LEAF's synthetic(alpha, beta).

``load_data(cfg, streams)`` returns a :class:`FederatedData`: training devices
and unseen test devices, split by writer (:mod:`simfl.data.split`), inputs
standardised with the training devices' statistics.
"""

from __future__ import annotations

from collections.abc import Callable

from simfl.data.femnist import load_femnist
from simfl.data.leaf import load_leaf
from simfl.data.packed import ClientData, FederatedData
from simfl.data.shakespeare import load_shakespeare
from simfl.data.synthetic import load_synthetic
from simfl.rng import Streams
from simfl.scenario import DataConfig

LOADERS: dict[str, Callable[[DataConfig, Streams], FederatedData]] = {
    "femnist": load_femnist,
    "leaf": load_leaf,
    "shakespeare": load_shakespeare,
    "synthetic": load_synthetic,
}


def load_data(cfg: DataConfig, streams: Streams) -> FederatedData:
    """The federated dataset named by ``cfg.dataset``; raises InputError on bad input."""
    return LOADERS[cfg.dataset](cfg, streams)


__all__ = ["LOADERS", "ClientData", "FederatedData", "load_data"]

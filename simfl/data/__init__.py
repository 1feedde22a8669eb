"""Federated datasets: FEMNIST (npz or LEAF json), Shakespeare (by role or LEAF json) and
LEAF's synthetic(alpha, beta).

``load_data(cfg, streams)`` returns a :class:`FederatedData`: training devices
and unseen test devices, split by writer (:mod:`simfl.data.split`), inputs
standardised with the training devices' statistics.
"""

from __future__ import annotations

from collections.abc import Callable

from simfl.data import femnist, leaf, shakespeare, synthetic
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

# Each loader's peak memory, estimated before loading (simfl.memory): (bytes, key, what).
MEMORY_TERMS: dict[str, Callable[[DataConfig], list[tuple[float, str, str]]]] = {
    "femnist": femnist.memory_terms,
    "leaf": leaf.memory_terms,
    "shakespeare": shakespeare.memory_terms,
    "synthetic": synthetic.memory_terms,
}
# A sample's shape and the classes, known before loading (a LEAF directory's are
# FEMNIST's images at most).
INPUT_SHAPES: dict[str, Callable[[DataConfig], tuple[tuple[int, ...], int]]] = {
    "femnist": lambda cfg: ((1, *femnist.IMAGE_SHAPE), femnist.NUM_CLASSES),
    "leaf": lambda cfg: ((1, *leaf.IMAGE_SHAPE), leaf.IMAGE_NUM_CLASSES),
    "shakespeare": lambda cfg: ((shakespeare.WINDOW,), shakespeare.NUM_CLASSES),
    "synthetic": lambda cfg: ((cfg.synthetic.dim,), cfg.synthetic.num_classes),
}


def load_data(cfg: DataConfig, streams: Streams) -> FederatedData:
    """The federated dataset named by ``cfg.dataset``; raises InputError on bad input."""
    return LOADERS[cfg.dataset](cfg, streams)


__all__ = ["INPUT_SHAPES", "LOADERS", "MEMORY_TERMS", "ClientData", "FederatedData", "load_data"]

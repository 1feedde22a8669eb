"""Federated datasets: FEMNIST (npz or LEAF json), Shakespeare (by role or LEAF json),
LEAF's synthetic(alpha, beta), a folder of per-client .npz files, one's own arrays
(:func:`from_arrays`, with :func:`dirichlet_partition` for label skew), and plug-ins
(simfl.plugins).

``load_data(cfg, streams)`` returns a :class:`FederatedData`: training devices
and unseen test devices, split by writer (:mod:`simfl.data.split`), inputs
standardised with the training devices' statistics.
"""

from __future__ import annotations

from collections.abc import Callable

from simfl.data import femnist, leaf, shakespeare, synthetic
from simfl.data.own import dirichlet_partition, from_arrays, load_npz_folder
from simfl.data.packed import ClientData, FederatedData
from simfl.plugins import DATASETS, build
from simfl.rng import Streams
from simfl.scenario import DataConfig

# Each loader's peak memory, estimated before loading (simfl.runs.memory): (bytes, key, what).
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
    """The federated dataset named by ``cfg.dataset`` (simfl.plugins.DATASETS); raises
    InputError on bad input."""
    plugin = DATASETS.lookup(cfg.dataset, "data.dataset")
    data: FederatedData = build(plugin, "data.dataset", cfg, cfg, streams, expect=FederatedData)
    return data


__all__ = ["INPUT_SHAPES", "MEMORY_TERMS", "ClientData", "FederatedData", "dirichlet_partition",
           "from_arrays", "load_data", "load_npz_folder"]

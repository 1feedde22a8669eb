"""Federated datasets: FEMNIST (npz or LEAF json), Shakespeare (by role or LEAF json),
LEAF's synthetic(alpha, beta), a folder of per-client .npz files, one's own arrays
(:func:`from_arrays`, with :func:`dirichlet_partition` for label skew), and plug-ins
(simfl.plugins).

``load_data(cfg, streams)`` returns a :class:`FederatedData`: training devices
and unseen test devices, split by writer (:mod:`simfl.data.split`), inputs
standardised with the training devices' statistics.
"""

from __future__ import annotations

from simfl.data.own import dirichlet_partition, from_arrays, load_npz_folder
from simfl.data.packed import ClientData, FederatedData
from simfl.plugins import DATASETS, build
from simfl.rng import Streams
from simfl.scenario import DataConfig


def load_data(cfg: DataConfig, streams: Streams) -> FederatedData:
    """The federated dataset named by ``cfg.dataset`` (simfl.plugins.DATASETS); raises
    InputError on bad input."""
    plugin = DATASETS.lookup(cfg.dataset, "data.dataset")
    data: FederatedData = build(plugin, "data.dataset", cfg, cfg, streams, expect=FederatedData)
    return data


__all__ = ["ClientData", "FederatedData", "dirichlet_partition",
           "from_arrays", "load_data", "load_npz_folder"]

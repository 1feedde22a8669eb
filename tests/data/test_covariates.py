"""Per-client covariates: hand-counted label shares, and the same values from devices
made on demand, read a chunk at a time, as from the same devices held in memory."""

from __future__ import annotations

import dataclasses

import numpy as np
import torch

from simfl.data import load_data
from simfl.data.covariates import client_covariate
from simfl.data.packed import ClientData, GeneratedClients
from simfl.rng import Streams
from simfl.scenario import DataConfig, SyntheticConfig


def two_clients() -> ClientData:
    y = torch.tensor([0, 7, 3, 9, 2, 12])
    return ClientData(torch.zeros(6, 1), y, np.array([0, 3, 6]), np.array(["a", "b"]))


def test_label_shares_by_hand() -> None:
    clients = two_clients()
    # labels below 10 // 2 = 5: {0, 3} of (0, 7, 3) and {2} of (9, 2, 12)
    assert np.allclose(client_covariate(clients, "label_share", 10), [2 / 3, 1 / 3])
    # digits (below 10) whatever the classes: 3 of 3 and 2 of 3
    assert np.allclose(client_covariate(clients, "digit_share", 62), [1.0, 2 / 3])
    assert np.allclose(client_covariate(clients, "num_samples", 62), [3.0, 3.0])


def test_generated_clients_read_in_small_chunks_give_the_covariate_held_data_gives() -> None:
    cfg = DataConfig(synthetic=SyntheticConfig(num_clients=60, tail_share=0.3,
                                               tail_shift=5.0, on_demand=True))
    train = load_data(cfg, Streams(4)).train
    assert isinstance(train, GeneratedClients)
    small = dataclasses.replace(train, chunk_bytes=4 * cfg.synthetic.dim * 50)  # ~50 samples
    assert sum(1 for _ in small.chunks()) > 5
    held = train.subset(np.arange(train.num_clients))
    share = client_covariate(small, "label_share", cfg.synthetic.num_classes)
    assert np.array_equal(share, client_covariate(held, "label_share",
                                                  cfg.synthetic.num_classes))
    assert share.std() > 0.1  # devices differ in the labels they hold

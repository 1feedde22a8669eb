"""``[data]``: the federated data set (simfl/data/) and LEAF's synthetic generator's keys."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from simfl.scenario.fields import FRACTION_OPEN, NON_NEGATIVE, POSITIVE, opt, params_table


@dataclass(frozen=True)
class SyntheticConfig:
    """LEAF's synthetic(alpha, beta) generator (Li et al., FedProx, 2020)."""

    num_clients: int = opt(100, POSITIVE)
    alpha: float = opt(1.0, NON_NEGATIVE)  # model heterogeneity across clients (a std)
    beta: float = opt(1.0, NON_NEGATIVE)  # feature heterogeneity across clients (a std)
    # Std of a model W_0 shared by every client and added to each W_k. simfl's default 3
    # departs from LEAF so that unseen test devices are learnable (simfl/data/synthetic.py
    # says why); 0 is LEAF's generator, where clients share no model and an unseen
    # client is unpredictable (errors at chance).
    shared_model: float = opt(3.0, NON_NEGATIVE)
    dim: int = opt(60, POSITIVE)
    num_classes: int = opt(10, (lambda v: v >= 2, "must be >= 2"))
    min_samples: int = opt(50, POSITIVE)  # per client; LEAF adds 50 to a lognormal draw
    # A minority of clients with shifted data (simfl's extension, see simfl/data/synthetic.py):
    # each client joins it with probability tail_share; its labels follow the shared model
    # plus a second one of std tail_shift, so one global model cannot serve both groups.
    tail_share: float = opt(0.0, (lambda v: 0 <= v < 1, "must be in [0, 1)"))
    tail_shift: float = opt(0.0, NON_NEGATIVE)
    # Make each device's samples (float32) from its own stream whenever they are needed,
    # never holding the population's: for populations whose features do not fit in
    # memory. Standardised with the generator's own moments (simfl/data/synthetic.py);
    # other draws than the in-memory generator's, of the same distribution.
    on_demand: bool = False


@dataclass(frozen=True)
class DataConfig:
    # synthetic, femnist, leaf, shakespeare, npz_folder (one <client>.npz per device under
    # path), or a plug-in (simfl.plugins: a registered name or "package.module:function")
    dataset: str = "synthetic"
    # femnist: the .npz file; npz_folder: the folder; leaf: a directory of LEAF json
    # shards; shakespeare: the by-role .jsonl(.gz) corpus or a LEAF-format directory.
    # Empty = the default location
    # under $SIMFL_DATA_DIR (femnist/femnist_writers.npz, shakespeare/shakespeare_by_role.jsonl.gz).
    path: str = ""
    min_samples_per_client: int = opt(0, NON_NEGATIVE)  # the papers keep writers with >= 100
    test_client_fraction: float = opt(0.5, FRACTION_OPEN)  # writer-level split: unseen test devices
    max_clients: int = opt(0, NON_NEGATIVE)  # subsample this many writers (0 = all)
    # femnist only: keep the writers whose samples come from these copies (the .npz's
    # `source_names`, e.g. "zshuai8/FedGMM_ICML2023@5a626c8"), before every other
    # filter; empty = every writer. A name the file lacks is an error naming this key.
    sources: tuple[str, ...] = ()
    # Tuning (python -m simfl tune): > 0 sets the unseen test writers aside and evaluates
    # this share of the *training* writers as the "test" side instead (held out, never
    # trained on), so a criterion on it never looks at the test devices.
    validation_fraction: float = opt(0.0, (lambda v: 0 <= v < 1, "must be in [0, 1)"))
    # Standardise inputs with the training devices' mean and std. Off: images stay in
    # [0, 1] (MNIST polarity), the scale the papers' learning rates were tuned for.
    # Shakespeare's character indices are never standardised.
    standardise: bool = True
    # FEMNIST images (femnist, leaf): "authors" feeds them as the Δ-FL authors' code does
    # (krishnap25/simplicial-fl, models/main.py): LEAF polarity (background 1) over each
    # pixel's mean, (v - mu_j) / mu_j, zero-mean per pixel, ink -1 (split.authors_pixels).
    # "ink": 1 - v, ink 1 and background 0. "authors" needs standardise = false.
    pixel_scaling: Literal["ink", "authors"] = "ink"
    synthetic: SyntheticConfig = opt(SyntheticConfig)
    params: dict[str, Any] = params_table()



"""What a data set's keys say before it is loaded: the hooks a data set's row of
simfl.plugins.DATASETS names beside its loader (``input_shape``, ``memory_terms`` and
``sizes``, simfl.plugins.HOOKS), read by the memory guard (simfl.runs.memory) and by the
checks a run makes before loading (simfl.runs.build)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class KeySizes:
    """The devices and samples a data set's keys fix before it is loaded (a ``sizes``
    hook's answer; synthetic data's, simfl.data.synthetic.sizes)."""

    train: int  # training devices, at most (the keys' filters can only drop some)
    devices: int  # every device, training and unseen test, at most
    clients: int  # the clients the data set makes before any is dropped or subsampled
    key: str  # the key that sets them, as "'key' = value"
    most_samples: float  # the most samples one client can have
    total_samples: float  # the samples of every client, expected
    # the keys that fix a sample's shape and the classes, " with 'key' = value" each
    # ("" where no key does)
    shape_keys: str
    # whether every device counted is kept (no filter or validation split drops any), so
    # that ``train`` is the exact count
    exact: bool

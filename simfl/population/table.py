"""The device table's type: one row per training device, columns as numpy arrays.

Its own module so that ``devices`` (which builds it) and ``network`` (which reads the
access links from it) do not import each other.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields

import numpy as np


@dataclass(frozen=True)
class DeviceTable:
    """One row per device; every array has shape (N,)."""

    client_idx: np.ndarray  # int64: the training client this device holds
    region_idx: np.ndarray  # int32: index into region_names
    utc_offset_s: np.ndarray  # float64: local time = UTC + offset
    speed_rel: np.ndarray  # float64: training speed relative to the median phone
    train_s_per_sample: np.ndarray  # float64: seconds per training sample of the model
    down_bytes_per_s: np.ndarray  # float64: access-link downlink
    up_bytes_per_s: np.ndarray  # float64: access-link uplink
    latency_s: np.ndarray  # float64: access-link latency (round trip)
    failure_rate_per_h: np.ndarray  # float64: failure hazard per hour of participation
    region_names: tuple[str, ...] = ()
    # Where the speeds came from, which ``speed_source = "auto"`` decides by whether
    # $SIMFL_DATA_DIR/devices exists: {"speeds": "benchmark" | "lognormal",
    # "lenet_reference": "measured" | "built-in"} (compute.speed_origin).
    speed_origin: dict[str, str] = field(default_factory=dict)

    @property
    def num_devices(self) -> int:
        return int(self.client_idx.shape[0])

    def columns(self) -> dict[str, np.ndarray]:
        """The per-device columns by name (for a devices table in Parquet)."""
        return {f.name: getattr(self, f.name) for f in fields(self)
                if f.name not in ("region_names", "speed_origin")}

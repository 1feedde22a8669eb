"""What a quantile protocol costs on the wire: messages per device, after Bonawitz et al.

Bonawitz, Ivanov, Kreuter, Marcedone, McMahan, Patel, Ramage, Segal, Seth,
"Practical Secure Aggregation for Privacy-Preserving Machine Learning", CCS 2017.
One secure sum of an m-vector over n devices (the honest-but-curious protocol,
without the consistency-check round of the malicious variant) is four exchanges;
every device sends its share and receives the server's answer:

========  ==========================================  ============================================
exchange  up, per device                              down, per device
========  ==========================================  ============================================
keys      2 public keys (2 x 32 B)                    the n devices' public keys (n x 64 B)
shares    n - 1 encrypted shares of (s_u, b_u)        the n - 1 shares addressed to it
          (2 x 32 B + 28 B AES-GCM nonce/tag each)
masked    m masked values of 4 B (a 32-bit ring)      the list of surviving devices (n x 4 B)
unmask    n - 1 key shares of 32 B                    the sum (m x 4 B)
========  ==========================================  ============================================

Each sum runs the whole protocol with fresh keys: reusing the masks of an
earlier sum would leak, and amortising the key set-up over several sums
(Bell et al., CCS 2020) is a refinement this model leaves out, so protocols
that take many sums are charged in full. Values are fixed-point numbers in the
32-bit ring; a plain broadcast of one threshold is one 4-byte message down.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

KEY_BYTES = 32  # an X25519 public key or a Shamir share of a 32-byte secret
CIPHERTEXT_OVERHEAD_BYTES = 28  # AES-GCM: 12 B nonce + 16 B tag
VALUE_BYTES = 4  # one element of the 32-bit ring
DEVICE_ID_BYTES = 4


@dataclass(frozen=True)
class Exchange:
    """One step of a protocol: every participating device uploads, then downloads."""

    up_bytes: int
    down_bytes: int
    kind: str  # "loss", "secagg" or "quantile_protocol" (comm.parquet's kind column)


LOSS_REPORT = Exchange(4, 0, "loss")  # F_k(w_t) in the clear: one float32 up, nothing back


@lru_cache(maxsize=1024)  # the same few (n, m) every round: build their exchanges once
def secure_sum(num_devices: int, num_values: int) -> tuple[Exchange, ...]:
    """The four exchanges of one secure sum of ``num_values`` values over ``num_devices``."""
    n, m = num_devices, num_values
    share = 2 * KEY_BYTES + CIPHERTEXT_OVERHEAD_BYTES
    return (
        Exchange(2 * KEY_BYTES, n * 2 * KEY_BYTES, "secagg"),
        Exchange((n - 1) * share, (n - 1) * share, "secagg"),
        Exchange(m * VALUE_BYTES, n * DEVICE_ID_BYTES, "secagg"),
        Exchange((n - 1) * KEY_BYTES, m * VALUE_BYTES, "secagg"),
    )


def broadcast_threshold() -> Exchange:
    """The server sends the threshold η to every device (which then filters itself)."""
    return Exchange(0, VALUE_BYTES, "quantile_protocol")

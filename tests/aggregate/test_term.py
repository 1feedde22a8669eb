"""TERM: a hand-computed case and the limits of the tilt."""

from __future__ import annotations

import math

import torch

from simfl.aggregate import fedavg, term
from tests.aggregate.helpers import DELTAS, GLOBAL, close, inputs


def test_term_hand_case() -> None:
    # t = ln 2: exp(t F) = 2, 8, 4; α exp(t F) ∝ 1·2, 1·8, 2·4 = 2, 8, 8 → π = 1/9, 4/9, 4/9.
    # w = (1, 1) + (1/9 − 4/9, 8/9 − 4/9) = (2/3, 13/9).
    new = term(math.log(2.0)).combine(GLOBAL, inputs(), None).params
    close(new, [2 / 3, 13 / 9])


def test_term_tilt_to_zero_is_fedavg_and_large_tilts_pick_one_client() -> None:
    expected = fedavg().combine(GLOBAL, inputs(), None).params
    torch.testing.assert_close(term(0.0).combine(GLOBAL, inputs(), None).params, expected,
                               rtol=0, atol=0)
    torch.testing.assert_close(term(1e-9).combine(GLOBAL, inputs(), None).params, expected)
    # t → +∞: the worst client (1); t → −∞: the best (0). The shift by max keeps exp finite.
    close(term(1e4).combine(GLOBAL, inputs(), None).params, (GLOBAL + DELTAS[1]).tolist())
    close(term(-1e4).combine(GLOBAL, inputs(), None).params, (GLOBAL + DELTAS[0]).tolist())

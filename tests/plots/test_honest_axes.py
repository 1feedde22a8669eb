"""A value axis never blows a difference of a thousandth up to the whole frame
(simfl.plots.honest_ylim): a tiny spread is widened and said, any other left alone."""

from __future__ import annotations

import pytest

from simfl.plots import honest_ylim, new_axes
from simfl.plots.runs import plot_p90_vs_bytes
from tests.test_plots import make_eval, make_rounds


def drawn(*ys: float) -> tuple[object, object]:
    fig, ax = new_axes()
    ax.plot(range(len(ys)), ys)
    return fig, ax


def test_errors_between_0_9991_and_1_are_drawn_on_a_tenth_and_said() -> None:
    _, ax = drawn(0.9991, 0.9995, 1.0)
    assert honest_ylim([ax])
    assert ax.get_ylim() == pytest.approx((0.9, 1.0))  # 10 % of 1, moved inside [0, 1]
    (note,) = ax.texts
    assert note.get_text().startswith("every value within 0.9991–1: the axis is widened")


def test_a_spread_that_shows_at_its_scale_is_left_as_drawn() -> None:
    _, ax = drawn(0.2, 0.5, 0.8)
    before = ax.get_ylim()
    assert not honest_ylim([ax])
    assert ax.get_ylim() == before and not ax.texts


def test_small_values_near_zero_stay_inside_the_bounds() -> None:
    _, ax = drawn(0.0101, 0.0100)  # a spread of 1 % of 0.0101: widened to 0.00101 wide
    assert honest_ylim([ax])
    low, high = ax.get_ylim()
    assert low >= 0.0 and high - low == pytest.approx(0.00101)
    assert honest_ylim([drawn(-5.0001, -5.0)[1]], bounds=None)  # no bounds: any sign
    assert not honest_ylim([drawn(0.0, 0.0)[1]])  # all zero: nothing to scale by


def test_shared_panels_are_widened_together() -> None:
    _, left = drawn(0.9991, 0.9995)
    _, right = drawn(0.9993, 1.0)
    assert honest_ylim([left, right])
    assert left.get_ylim() == right.get_ylim() == pytest.approx((0.9, 1.0))
    assert len(left.texts) == 1 and not right.texts


def test_a_runs_tail_error_near_one_is_not_blown_up() -> None:
    ev = make_eval({0: [1.0] * 10, 1: [0.999] + [1.0] * 9, 2: [0.9991] * 10})
    ax = plot_p90_vs_bytes(ev, make_rounds([10, 10], [5, 5])).axes[0]
    low, high = ax.get_ylim()
    assert high - low >= 0.1 - 1e-9 and high <= 1.0

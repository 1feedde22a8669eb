"""simfl.runs.loop.frozen_heap: the rounds run with the objects built before them frozen
out of the cyclic garbage collector's reach, and everything is put back after."""

from __future__ import annotations

import gc
import weakref
from pathlib import Path

import pytest

import simfl
import simfl.runs.loop as loop
from tests.runs.test_progress_bar import SCENARIO


class _Cycle:
    def __init__(self) -> None:
        self.me = self


def test_objects_made_inside_are_collected_and_the_freeze_is_undone() -> None:
    before = _Cycle()
    gc.collect()
    assert gc.get_freeze_count() == 0
    with loop.frozen_heap():
        assert gc.get_freeze_count() > 0
        inside = _Cycle()
        dead = weakref.ref(inside)
        del inside
        gc.collect()  # a cycle made during the rounds is still collected
        assert dead() is None
        frozen = weakref.ref(before)
        del before
        gc.collect()  # one made before is not, while frozen...
        assert frozen() is not None
    assert gc.get_freeze_count() == 0
    gc.collect()  # ...and is once the rounds are over
    assert frozen() is None


def test_young_collections_are_rarer_inside_and_as_before_after() -> None:
    threshold = gc.get_threshold()
    with loop.frozen_heap():
        assert gc.get_threshold() == (max(threshold[0], loop.ROUND_GC_THRESHOLD),
                                      *threshold[1:])
        before = gc.get_stats()[0]["collections"]
        for _ in range(loop.ROUND_GC_THRESHOLD // 2):
            _Cycle()  # unreachable cycles: counted, kept until a collection
        assert gc.get_stats()[0]["collections"] == before
    assert gc.get_threshold() == threshold


def test_a_run_simulates_its_rounds_inside_it(tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    counts: list[int] = []
    real_run = loop.simpy.Environment.run

    def run(env: loop.simpy.Environment, *args: object) -> None:
        counts.append(gc.get_freeze_count())
        real_run(env, *args)

    monkeypatch.setattr(loop.simpy.Environment, "run", run)
    path = tmp_path / "s.toml"
    path.write_text(SCENARIO)
    simfl.simulate(path, tmp_path / "run")
    assert len(counts) == 1 and counts[0] > 1000
    assert gc.get_freeze_count() == 0

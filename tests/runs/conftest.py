"""Fixtures shared by the resume tests: from a module's ``scenario`` fixture, its
uninterrupted run, the run stopped in round 3 and a fresh copy of it to resume (a module
may define its own in their place)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.runs.test_resume import run, stopped_in_round_3


@pytest.fixture(scope="module")
def baseline(scenario: Path) -> Path:
    """The uninterrupted run."""
    out = scenario.parent / "baseline"
    assert run(scenario, out) == 0
    return out


@pytest.fixture(scope="module")
def stopped(scenario: Path) -> Path:
    """The run stopped by SIGINT in round 3, with a checkpoint after round 4."""
    return stopped_in_round_3(scenario, scenario.parent / "stopped")


@pytest.fixture
def out(stopped: Path, tmp_path: Path) -> Path:
    """A copy of the stopped run to resume."""
    return Path(shutil.copytree(stopped, tmp_path / "run"))

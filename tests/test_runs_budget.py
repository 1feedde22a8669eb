"""docs/runs/ is in every clone: its kept runs stay within a size budget, each run lean.
Raising the budget is a decision a commit states, not a side effect of archiving."""

from __future__ import annotations

from pathlib import Path

RUNS = Path(__file__).parent.parent / "docs" / "runs"
# 195.4 MiB kept when the budget was set at 200; raised to 210 for the drive on the
# heavy-tailed phones (docs/drive.md: 40 lean runs and the theory check's inputs, about
# 4 MiB when complete) and the estimators' sweep on the same population (about 1 MiB)
BUDGET_MIB = 210.0
RUN_BUDGET_MIB = 1.5  # the largest kept run folder: 1.27 MiB (a paper run's whole eval)


def _size(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def test_the_kept_runs_fit_their_budget() -> None:
    assert _size(RUNS) / 2**20 <= BUDGET_MIB


def test_every_kept_run_is_lean() -> None:
    heavy = {str(m.parent.relative_to(RUNS)): round(_size(m.parent) / 2**20, 2)
             for m in RUNS.rglob("manifest.json") if _size(m.parent) > RUN_BUDGET_MIB * 2**20}
    assert heavy == {}

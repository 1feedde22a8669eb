"""docs/dose_response.md's tables are what simfl.study.dose computes from the kept runs."""

from __future__ import annotations

import re
from pathlib import Path

from simfl.study.dose import read_runs, report

ROOT = Path(__file__).parent.parent
KEPT = [ROOT / "docs" / "runs" / name
        for name in ("dose_theta05", "dose_theta01", "dose_theta01_failed")]


def test_the_pages_tables_are_recomputed_from_the_kept_runs() -> None:
    page = (ROOT / "docs" / "dose_response.md").read_text()
    block = re.search(r"<!-- dose tables: begin -->\n(.*?)\n<!-- dose tables: end -->", page,
                      re.S)
    assert block is not None
    assert block.group(1) == "\n".join(report(read_runs(KEPT)))


def test_the_level_shift_tables_are_recomputed_from_the_kept_runs() -> None:
    page = (ROOT / "docs" / "dose_response.md").read_text()
    block = re.search(r"<!-- level tables: begin -->\n(.*?)\n<!-- level tables: end -->", page,
                      re.S)
    assert block is not None
    runs = read_runs([ROOT / "docs" / "runs" / "dose_theta05",
                      ROOT / "docs" / "runs" / "dose_level05"])
    assert len(runs) == 45  # 25 offsets' runs and 20 level shifts' (4 x 5 seeds)
    assert block.group(1) == "\n".join(report(runs))


def test_every_registered_cell_is_kept() -> None:
    runs = read_runs(KEPT)
    assert len(runs) == 50  # 2 θ x 5 offsets x 5 seeds, complete or stopped
    assert sorted(runs.filter(runs["status"] == "failed")["run"].to_list()) == [
        f"offset_nats=0.3,seed={s}" for s in range(5)]
    assert set(runs["run"].str.extract(r"seed=(\d)").to_list()) == {"0", "1", "2", "3", "4"}

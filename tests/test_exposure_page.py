"""docs/exposure.md's table is what simfl.study.exposure computes from the kept runs."""

from __future__ import annotations

import re
from pathlib import Path

from simfl.study.exposure import across_seeds

ROOT = Path(__file__).parent.parent


def test_the_pages_table_is_recomputed_from_the_kept_runs() -> None:
    page = (ROOT / "docs" / "exposure.md").read_text()
    block = re.search(r"<!-- exposure table: begin -->\n(.*?)\n<!-- exposure table: end -->",
                      page, re.S)
    assert block is not None
    assert block.group(1) == "\n".join(across_seeds(ROOT / "docs" / "runs" / "exposure"))

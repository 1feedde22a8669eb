"""simfl.study.ipw_rates: docs/bias/ipw.md's table of IPW's online rates is what the
command prints (no training, so a seed prints the same table on every machine), and the
joined table is the per-seed tables' cells."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from simfl.study.ipw_rates import doc_table
from tests.conftest import requires_data

ROOT = Path(__file__).parents[1]


def day(tv: float, ratio: float) -> dict[str, dict[str, float]]:
    return {"tv": {n: tv for n in ("unweighted", "known", "ipw", "earlier_days")},
            "gap": {}, "ratio": {"ipw": ratio, "earlier_days": ratio / 2}}


def test_the_joined_table_puts_each_seeds_value_in_its_place() -> None:
    table = doc_table([[day(0.1234, 3.0)], [day(0.2, 1.254)]])
    assert table.splitlines()[2] == ("| 1 | 0.123 / 0.200 | 0.123 / 0.200 | 0.123 / 0.200 | "
                                     "0.123 / 0.200 | 3.00 / 1.25 | 1.50 / 0.63 |")


@requires_data
@pytest.mark.slow
def test_the_table_in_the_ipw_page_is_what_the_command_prints() -> None:
    """The page's ``ipw rates`` block is the joined table the command prints last."""
    out = subprocess.run([sys.executable, "-m", "simfl.study.ipw_rates", "--days", "7",
                          "--strength", "1", "--seeds", "0", "1", "2"], cwd=ROOT, check=True,
                         capture_output=True, text=True).stdout
    joined = out.split("seeds 0 / 1 / 2:\n")[1].strip()
    assert len(joined.splitlines()) == 2 + 7
    page = (ROOT / "docs" / "bias" / "ipw.md").read_text()
    block = re.search(r"<!-- ipw rates: begin -->\n(.*?)\n<!-- ipw rates: end -->", page, re.S)
    assert block is not None
    assert block.group(1) == joined

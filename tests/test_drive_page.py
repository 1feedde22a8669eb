"""docs/drive.md: the drive's sweep uses the gallery's phones population, key for key, and its
results are what the registered analysis prints from the kept runs."""

from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _flat(table: dict, prefix: str = "") -> dict[str, object]:
    out: dict[str, object] = {}
    for key, value in table.items():
        if isinstance(value, dict):
            out |= _flat(value, f"{prefix}{key}.")
        else:
            out[f"{prefix}{key}"] = value
    return out


def test_the_drive_runs_on_the_galleries_phones_population() -> None:
    phones = _flat(tomllib.loads((ROOT / "scenarios/populations/phones.toml").read_text())
                   ["population"]["availability"], "population.availability.")
    phones.pop("population.availability.horizon_s")  # the sweep keeps diurnal_emnist's
    sweep = tomllib.loads((ROOT / "scenarios/study/drive_phones.sweep.toml").read_text())["set"]
    drawn = {k: v for k, v in sweep.items() if k.startswith("population.availability.")}
    drawn.pop("population.availability.habits.covariate_correlation")  # the data coupling
    assert drawn == phones


def test_the_results_block_is_what_the_registered_analysis_prints_from_the_kept_runs() -> None:
    from simfl.study.drive import read_runs, report

    page = (ROOT / "docs" / "drive.md").read_text()
    block = page.split("## Results", 1)[1].split("```\n", 2)[1]
    assert "\n".join(report(read_runs(ROOT / "docs" / "runs" / "drive_phones"))) + "\n" == block

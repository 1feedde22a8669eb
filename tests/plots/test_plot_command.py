"""What ``plot`` draws (simfl.plots.command.plot_runs): a comparison alone unless every
run's figures are asked for; a retired figure is removed when a run is redrawn."""

from __future__ import annotations

from pathlib import Path

from simfl.plots.command import plot_runs
from simfl.plots.runs import RETIRED_FIGURES, plot_run
from tests.test_plots import synthetic_run


def test_a_comparison_alone_draws_no_runs_figures(tmp_path: Path) -> None:
    runs = [synthetic_run(tmp_path / f"run{k}", seed=k) for k in range(2)]
    written = plot_runs(runs, compare=tmp_path / "cmp.png")
    assert written == [tmp_path / "cmp.png"]
    assert not any((run / "plots").exists() for run in runs)


def test_every_run_draws_the_runs_figures_then_the_comparisons(tmp_path: Path) -> None:
    runs = [synthetic_run(tmp_path / f"run{k}", seed=k) for k in range(2)]
    written = plot_runs(runs, compare=tmp_path / "cmp.png",
                        compare_time=tmp_path / "time.png", every_run=True)
    assert written[-2:] == [tmp_path / "cmp.png", tmp_path / "time.png"]
    assert {p.parent for p in written[:-2]} == {run / "plots" for run in runs}
    assert "p90_vs_bytes.png" in {p.name for p in written if p.parent == runs[0] / "plots"}


def test_without_a_comparison_each_runs_figures_are_drawn(tmp_path: Path) -> None:
    run = synthetic_run(tmp_path / "run")
    lines: list[str] = []
    written = plot_runs([run], report=lines.append)
    assert written and all(p.parent == run / "plots" for p in written)
    assert lines == [f"simfl: plot {run}: skipped availability.png: availability.parquet is "
                     "missing or empty (it is written when a run completes)"]


def test_redrawing_a_run_removes_its_retired_figures(tmp_path: Path) -> None:
    run = synthetic_run(tmp_path / "run")
    (run / "plots").mkdir()
    stale = [run / "plots" / name for name in RETIRED_FIGURES]
    stale += [s.with_suffix(".pdf") for s in stale]
    for path in stale:
        path.write_bytes(b"an earlier simfl's figure")
    (run / "plots" / "notes.txt").write_text("mine")
    plot_run(run, report=None)
    assert not any(path.exists() for path in stale)
    assert (run / "plots" / "notes.txt").read_text() == "mine"

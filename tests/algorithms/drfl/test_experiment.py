"""The breast-cancer study: its config checks, the paper's §6 split (balanced and §6.2's
imbalanced) on the real rows, cross-validation's choice and a tiny end-to-end run."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from simfl.algorithms.drfl.experiment import (
    METHODS,
    ExperimentConfig,
    choose,
    load_breast_cancer_split,
    load_experiment,
    markdown_table,
    run_experiment,
    summary_table,
    wisconsin_original,
)
from simfl.cli import main
from simfl.errors import InputError
from simfl.plots.drfl import write_figures
from simfl.rng import Streams

DOCS = Path(__file__).parents[3] / "docs"
STUDY = DOCS / "drfl_breast_cancer.toml"

TINY = """
[experiment]
seeds = [3]
tune_seeds = []
grid_rho = [0.05]
grid_kappa = [1.0]
grid_theta = [0.1, 0.5]
cv_folds = 2
admm_iters = 30
drfa_rounds = 5
noise_draws = 1
sweep_mean_levels = [0.0, 2.0]
sweep_sd_levels = [0.0, 2.0]
sweep_ratio_sd_levels = [0.0, 1.0]
"""


def test_study_file_is_the_default_study() -> None:
    assert load_experiment(STUDY) == ExperimentConfig()
    assert ExperimentConfig().population.availability.mode == "diurnal"


@pytest.mark.parametrize(("text", "message"), [
    ("[experiment]\nseed = [1]", "unknown key 'experiment.seed' (did you mean 'experiment.seeds'"),
    ("[experiment]\ntrain_share = 1.5", "'experiment.train_share' = 1.5 must be in (0, 1)"),
    ("[experiment]\nloss = 'huber'", "'experiment.loss'"),
    ("[experiment]\ndataset = 'iris'", "'experiment.dataset' = 'iris' must be"),
    ("[experiment]\nminority_keep = [0.5]", "'experiment.minority_keep' = (0.5,) must be"),
    ("[experiment]\nloss = 'logistic'", "'experiment.loss' = 'logistic' must be 'hinge'"),
    ("[experiment]\ngrid_rho = [2.0]", "'experiment.grid_rho' = (2.0,) needs a value below"),
    ("[population.availability]\nmode = 'never'", "'population.availability.mode'"),
    ("[drfl]\nx = 1", "unknown table 'drfl'"),
])
def test_bad_input_names_the_key(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "bad.toml"
    path.write_text(text)
    with pytest.raises(InputError, match=message.replace("(", r"\(").replace(")", r"\)")):
        load_experiment(path)
    assert main(["drfl", str(path)]) == 2


def _balanced_rows(seed: int) -> list[np.ndarray]:
    """The protocol's client rows, recomputed by hand: the seed's permutation, the first
    60% for training, three consecutive near-equal parts."""
    order = Streams(seed).numpy("drfl.split").permutation(683)
    return np.array_split(order[:410], 3)


def test_split_follows_the_protocol_on_the_real_rows() -> None:
    x, y = wisconsin_original()
    split = load_breast_cancer_split(load_experiment(STUDY), Streams(0))
    rows = _balanced_rows(0)
    assert [c.num_samples for c in split.clients] == [137, 137, 136]
    assert split.y_test.size == 683 - 410 and np.abs(split.x_test).max() <= 1.0
    for client, idx in zip(split.clients[1:], rows[1:], strict=True):  # clean: the rows
        np.testing.assert_array_equal(client.x, x[idx])
        np.testing.assert_array_equal(client.y, y[idx])
    noise = split.clients[0].x - x[rows[0]]  # client 1 only: N(0.5, 0.5) on every feature
    np.testing.assert_array_equal(split.clients[0].y, y[rows[0]])
    assert noise.mean() == pytest.approx(0.5, abs=0.03)
    assert noise.std() == pytest.approx(0.5, abs=0.03)
    assert np.abs(split.clients[0].x).max() > 1.0  # the noise leaves the box


def test_imbalanced_split_keeps_half_the_minority_of_clients_1_and_2() -> None:
    """§6.2 on the real rows: each client's minority class (malignant, -1, in all three
    for seed 0) keeps round(0.5·n) random rows in clients 1 and 2 and all of them in 3;
    the majority rows, the test set and client 1's noise are as in the balanced split."""
    x, y = wisconsin_original()
    cfg = load_experiment(DOCS / "drfl_breast_cancer_imbalanced.toml")
    assert cfg.minority_keep == (0.5, 0.5, 1.0)
    split = load_breast_cancer_split(cfg, Streams(0))
    balanced = load_breast_cancer_split(load_experiment(STUDY), Streams(0))
    np.testing.assert_array_equal(split.x_test, balanced.x_test)
    for s, (client, idx) in enumerate(zip(split.clients, _balanced_rows(0), strict=True)):
        malignant, benign = (y[idx] == -1).sum(), (y[idx] == 1).sum()
        assert malignant < benign  # the minority class
        expected = malignant if s == 2 else int(round(0.5 * malignant))
        assert ((client.y == -1).sum(), (client.y == 1).sum()) == (expected, benign)
        if s > 0:  # clean clients: all their benign rows, and malignant rows among theirs
            np.testing.assert_array_equal(client.x[client.y == 1], x[idx][y[idx] == 1])
            theirs = x[idx][y[idx] == -1]
            assert all((theirs == row).all(axis=1).any() for row in client.x[client.y == -1])
    first, idx = split.clients[0], _balanced_rows(0)[0]
    noise = first.x[first.y == 1] - x[idx][y[idx] == 1]  # client 1's benign rows, noisy
    assert (noise.mean(), noise.std()) == (pytest.approx(0.5, abs=0.05),
                                           pytest.approx(0.5, abs=0.05))
    np.testing.assert_array_equal(split.clients[2].x, balanced.clients[2].x)


def test_the_diagnostic_alternative_is_standardised() -> None:
    cfg = load_experiment(DOCS / "drfl_breast_cancer_diagnostic.toml")
    assert cfg.dataset == "wisconsin_diagnostic"
    assert replace(cfg, dataset="wisconsin_original") == load_experiment(STUDY)
    split = load_breast_cancer_split(cfg, Streams(0))
    sizes = [c.num_samples for c in split.clients]
    assert sum(sizes) == 341 and split.y_test.size == 569 - 341 and max(sizes) - min(sizes) <= 1
    pooled = np.vstack([c.x for c in split.clients[1:]])  # clean clients: standardised
    assert abs(pooled.mean()) < 0.1
    assert split.clients[0].x.mean() == pytest.approx(0.5, abs=0.15)  # noisy client 1


def test_cross_validation_choice_averages_the_tuning_seeds_and_breaks_ties_in_grid_order(
) -> None:
    cv = pl.DataFrame({
        "method": ["drfl"] * 4 + ["wafl"] * 2,
        "rho": [0.1, 0.2, 0.1, 0.2, 0.1, 0.2], "kappa": [1.0] * 6,
        "theta": [0.5, 0.5, 0.5, 0.5, float("nan"), float("nan")],
        "cv_accuracy": [0.9, 0.8, 0.7, 0.9, 0.6, 0.6],  # drfl: 0.8 vs 0.85 over two seeds
        "seed": [0, 0, 1, 1, 0, 0]})
    chosen = choose(cv)
    assert (chosen["drfl"]["rho"], chosen["drfl"]["cv_accuracy"]) == (0.2, pytest.approx(0.85))
    assert chosen["wafl"]["rho"] == 0.1  # a tie: the first in grid order


@pytest.mark.slow
def test_tiny_study_end_to_end(tmp_path: Path) -> None:
    path = tmp_path / "tiny.toml"
    path.write_text(TINY)
    tables = run_experiment(load_experiment(path), tmp_path / "out")
    acc = pl.read_parquet(tmp_path / "out" / "accuracy.parquet")
    assert acc.height == 3 * 2 * len(METHODS) and acc["accuracy"].is_between(0, 1).all()
    clean = acc.filter((pl.col("sweep") == "sd") & (pl.col("level") == 0.0))
    assert clean["accuracy"].min() > 0.85  # every method learns the clean test set
    iters = tables["iterations"]
    assert iters["iteration"].to_list() == list(range(1, 31))
    assert (iters["t_end_s"] > iters["t_start_s"]).all() and (iters["bytes_up"] > 0).all()
    assert summary_table(acc).height == 3 * 2 * len(METHODS)
    assert summary_table(acc)["num_seeds"].to_list() == [1] * (3 * 2 * len(METHODS))
    table = markdown_table(acc, "sd").splitlines()
    assert table[0] == "| level | DRFL | ERM | AFL | DRFA | WAFL |" and len(table) == 2 + 2 + 2
    assert table[2].startswith("| 0 | ") and table[-1] == "(mean ± std over 1 seeds)"
    assert all(p.stat().st_size > 0 for p in write_figures(tables, tmp_path / "fig"))


def test_the_papers_breast_cancer_set_is_wisconsin_original_scaled_to_the_box() -> None:
    x, y = wisconsin_original()
    assert x.shape == (683, 9)  # 699 rows, 16 with a missing bare-nuclei value dropped
    np.testing.assert_array_equal(x.min(axis=0), -1.0)
    np.testing.assert_array_equal(x.max(axis=0), 1.0)
    assert ((y == 1).sum(), (y == -1).sum()) == (444, 239)  # benign, malignant
    np.testing.assert_allclose((x + 1) / 2 * 9 + 1, np.round((x + 1) / 2 * 9 + 1))  # 1..10


@pytest.mark.slow
def test_drfl_out_replaces_only_the_studys_files_and_only_with_overwrite(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """--out: a file, a folder with the user's files (even named as the study's), or with
    --overwrite one holding anything else, is refused before any work (exit 2, one line,
    nothing written); a study's own folder is replaced with --overwrite."""
    study = tmp_path / "tiny.toml"
    study.write_text(TINY)
    out = tmp_path / "out"
    out.mkdir()
    (out / "accuracy.parquet").write_bytes(b"mine")
    (out / "drfl_noise.png").write_bytes(b"my figure")
    (tmp_path / "afile").write_text("mine")

    def refused(args: list[str], message: str) -> None:
        before = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
        assert main(["drfl", str(study), *args]) == 2
        err = capsys.readouterr().err.splitlines()
        assert len(err) == 1 and message in err[0]
        assert {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()} == before

    refused(["--out", str(out)], f"{out}: exists and is not empty (use --overwrite")
    refused(["--out", str(tmp_path / "afile")], f"{tmp_path / 'afile'}: exists and is not a")
    refused(["--out", str(tmp_path / "afile" / "sub")], f"{tmp_path / 'afile'} is a file")
    (out / "notes.txt").write_text("mine")
    refused(["--out", str(out), "--overwrite"], f"{out}: holds 'notes.txt', which the DRFL")
    (out / "notes.txt").unlink()
    fresh = tmp_path / "fresh"
    assert main(["drfl", str(study), "--out", str(fresh)]) == 0
    written = sorted(p.name for p in fresh.iterdir())
    refused(["--out", str(fresh)], f"{fresh}: exists and is not empty")
    assert main(["drfl", str(study), "--out", str(fresh), "--overwrite"]) == 0
    assert sorted(p.name for p in fresh.iterdir()) == written and len(written) == 6

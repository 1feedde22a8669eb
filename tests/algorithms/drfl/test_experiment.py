"""The breast-cancer study: its config checks and a tiny end-to-end run."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import polars as pl
import pytest

from simfl.algorithms.drfl.experiment import (
    METHODS,
    ExperimentConfig,
    load_breast_cancer_split,
    load_experiment,
    run_experiment,
    summary_table,
    wisconsin_original,
)
from simfl.cli import main
from simfl.errors import InputError
from simfl.plots.drfl import write_figures
from simfl.rng import Streams

STUDY = Path(__file__).parents[3] / "docs" / "drfl_breast_cancer.toml"

TINY = """
[experiment]
seeds = [3]
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
    ("[population.availability]\nmode = 'never'", "'population.availability.mode'"),
    ("[drfl]\nx = 1", "unknown table 'drfl'"),
])
def test_bad_input_names_the_key(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "bad.toml"
    path.write_text(text)
    with pytest.raises(InputError, match=message.replace("(", r"\(").replace(")", r"\)")):
        load_experiment(path)
    assert main(["drfl", str(path)]) == 2


def test_split_follows_the_protocol() -> None:
    cfg = load_experiment(STUDY)
    split = load_breast_cancer_split(cfg, Streams(0))
    sizes = [c.num_samples for c in split.clients]
    assert sum(sizes) == 341 and split.y_test.size == 569 - 341 and max(sizes) - min(sizes) <= 1
    pooled = np.vstack([c.x for c in split.clients[1:]])  # clean clients: standardised
    assert abs(pooled.mean()) < 0.1
    assert split.clients[0].x.mean() == pytest.approx(0.5, abs=0.15)  # noisy client 1


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
    assert summary_table(acc).height == 3 * len(METHODS)
    assert all(p.stat().st_size > 0 for p in write_figures(tables, tmp_path / "fig"))


def test_the_papers_breast_cancer_set_is_wisconsin_original_scaled_to_the_box() -> None:
    x, y = wisconsin_original()
    assert x.shape == (683, 9)  # 699 rows, 16 with a missing bare-nuclei value dropped
    np.testing.assert_array_equal(x.min(axis=0), -1.0)
    np.testing.assert_array_equal(x.max(axis=0), 1.0)
    assert ((y == 1).sum(), (y == -1).sum()) == (444, 239)  # benign, malignant
    np.testing.assert_allclose((x + 1) / 2 * 9 + 1, np.round((x + 1) / 2 * 9 + 1))  # 1..10
    split = load_breast_cancer_split(ExperimentConfig(dataset="wisconsin_original"), Streams(0))
    assert sum(c.num_samples for c in split.clients) == round(0.6 * 683)
    assert np.abs(split.x_test).max() <= 1.0  # not standardised: still in the box

"""The cnn model fits images of any C×H×W; a model that does not fit the data is
refused in one line (exit 2) before any training, whichever model it is."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import polars as pl
import pytest
import torch

from simfl.cli import main
from simfl.errors import InputError
from simfl.train.models import SmallCNN, check_fits

SCENARIO = """
seed = 2
[data]
dataset = "npz_folder"
path = "{path}"
test_client_fraction = 0.25
[model]
name = "{model}"
[train]
lr = 0.1
batch_size = 10
[aggregator]
name = "fedavg"
[server]
num_rounds = 25
clients_per_round = 8
[eval]
every = 25
"""


def _images(folder: Path, shape: tuple[int, int, int] = (3, 8, 8)) -> Path:
    """24 clients of 30 CIFAR-like images; the class is which channel is brightest."""
    rng = np.random.default_rng(0)
    folder.mkdir()
    for c in range(24):
        y = rng.integers(0, shape[0], 30)
        x = rng.normal(0, 1, (30, *shape)).astype(np.float32)
        x[np.arange(30), y] += 1.5
        np.savez(folder / f"client{c:02d}.npz", x=x, y=y)
    return folder


def _scenario(tmp_path: Path, model: str) -> Path:
    path = tmp_path / f"{model}.toml"
    path.write_text(SCENARIO.format(path=_images(tmp_path / f"data_{model}"), model=model))
    return path


@pytest.mark.parametrize(("shape", "classes"), [((3, 32, 32), 10), ((1, 28, 28), 62),
                                                 ((1, 1, 1), 3), ((2, 3, 5), 4)])
def test_the_cnn_takes_any_image_shape(shape: tuple[int, int, int], classes: int) -> None:
    model = SmallCNN(shape, classes)
    assert model(torch.zeros(5, *shape)).shape == (5, classes)
    check_fits(model, torch.zeros(1, *shape), classes, "cnn")


def test_a_model_that_does_not_fit_is_refused_in_one_line() -> None:
    with pytest.raises(InputError, match=r"'model.name' = 'mine' does not fit the data's "
                                         r"inputs \(shape \(3, 8, 8\), float32\)"):
        check_fits(torch.nn.Linear(10, 3), torch.zeros(1, 3, 8, 8), 3, "mine")
    with pytest.raises(InputError, match=r"maps one input of the data to \(1, 4\), not "
                                         r"\(1, 3\) logits"):
        check_fits(torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(192, 4)),
                   torch.zeros(1, 3, 8, 8), 3, "mine")


def test_convnet_on_cifar_like_images_exits_2_before_training(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    capsys.readouterr()
    assert main([str(_scenario(tmp_path, "convnet")), "--out", str(tmp_path / "run"),
                 "--quiet"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert "'model.name' = 'convnet'" in err and "(3, 8, 8)" in err and "cnn" in err
    assert not (tmp_path / "run").exists()


@pytest.mark.slow
def test_the_cnn_learns_cifar_like_images(tmp_path: Path) -> None:
    assert main([str(_scenario(tmp_path, "cnn")), "--out", str(tmp_path / "run"),
                 "--quiet"]) == 0
    errors = (pl.read_parquet(tmp_path / "run" / "eval.parquet")
              .filter(pl.col("split") == "test").group_by("round")
              .agg(pl.col("error").mean()).sort("round")["error"].to_list())
    assert errors[0] > 0.5 and errors[-1] < 0.25, errors  # chance is 2/3


def test_the_training_cost_is_counted_from_the_module_as_the_hand_counts() -> None:
    from simfl.population.compute import CONVNET_FORWARD_FLOPS, GRU_FORWARD_FLOPS, linear_macs
    from simfl.scenario import ModelConfig
    from simfl.train.models import forward_macs

    assert forward_macs(ModelConfig("convnet"), (1, 28, 28), 62, torch.float32) == \
        CONVNET_FORWARD_FLOPS
    assert forward_macs(ModelConfig("linear"), (1, 28, 28), 62, torch.float32) == \
        linear_macs(784, 62)
    # the GRU's one-hot input is a row lookup (embedding: no multiply), which the hand
    # count prices as a dense product
    gru = forward_macs(ModelConfig("gru"), (20,), 53, torch.uint8)
    assert gru == GRU_FORWARD_FLOPS - 20 * linear_macs(53, 3 * 128)
    # the cnn on 3×8×8: conv 3->32 3x3 on 8x8, conv 32->64 3x3 on 4x4, 256 -> 3
    assert forward_macs(ModelConfig("cnn"), (3, 8, 8), 3, torch.float32) == \
        8 * 8 * 32 * 3 * 9 + 4 * 4 * 64 * 32 * 9 + 256 * 3

"""Shakespeare: the character map, LEAF's role text, windows, both file formats, bad files,
and the real corpus."""

from __future__ import annotations

import gzip
import json
import tarfile
from pathlib import Path

import numpy as np
import pytest

from simfl.data import load_data
from simfl.data.shakespeare import WINDOW, char_classes, role_text, windows
from simfl.errors import InputError
from simfl.rng import Streams
from simfl.scenario import DataConfig
from tests.conftest import data_dir, requires_data

ROLES = [  # play, role, lines
    ("Play A", "KING", ["Now is the winter of our discontent", "Made glorious summer  by this"]),
    ("Play A", "QUEEN", ["Short."]),  # 6 characters: no window
    ("Play B", "FOOL", ["A fool thinks himself to be wise, but a wise man knows himself",
                        "to be a fool! 1, 2, 3."]),
]


def write_by_role(path: Path, roles: list[tuple[str, str, list[str]]] = ROLES) -> Path:
    with gzip.open(path, "wt", encoding="utf-8") as f:
        for play, role, lines in roles:
            f.write(json.dumps({"play": play, "role": role, "lines": lines}) + "\n")
    return path


def load(path: Path, min_samples: int = 0, test_fraction: float = 0.5):  # noqa: ANN201
    return load_data(DataConfig(dataset="shakespeare", path=str(path),
                                min_samples_per_client=min_samples,
                                test_client_fraction=test_fraction), Streams(0))


def test_characters_map_to_the_papers_53_classes() -> None:
    np.testing.assert_array_equal(char_classes("azAZ !é\n"), [0, 25, 26, 51, 52, 52, 52, 52])


def test_role_text_joins_lines_with_one_space_as_leaf() -> None:
    assert role_text(["To be,", "or not  to   be"]) == "To be, or not to be"


def test_windows_are_every_run_of_20_characters_and_the_next() -> None:
    classes = np.arange(23, dtype=np.uint8)
    x, y = windows(classes)
    assert x.shape == (3, WINDOW)
    np.testing.assert_array_equal(x[2], np.arange(2, 22))
    np.testing.assert_array_equal(y, [20, 21, 22])
    assert windows(np.arange(20, dtype=np.uint8))[0].shape == (0, WINDOW)


def test_by_role_corpus_gives_one_device_per_role(tmp_path: Path) -> None:
    data = load(write_by_role(tmp_path / "roles.jsonl.gz"), min_samples=1, test_fraction=0.5)
    devices = {**dict(zip(data.train.client_ids, data.train.num_samples, strict=True)),
               **dict(zip(data.test.client_ids, data.test.num_samples, strict=True))}
    texts = {f"{p}/{r}": role_text(lines) for p, r, lines in ROLES}
    assert devices == {k: len(t) - WINDOW for k, t in texts.items() if len(t) > WINDOW}
    assert data.num_classes == 53 and data.input_shape == (WINDOW,)
    for side in (data.train, data.test):  # indices, not standardised values
        assert side.x.dtype.is_floating_point is False and int(side.x.max()) < 53
        first = texts[str(side.client_ids[0])]
        np.testing.assert_array_equal(side.x[0].numpy(), char_classes(first[:WINDOW]))
        assert int(side.y[0]) == char_classes(first[WINDOW])[0]


def test_leaf_format_windows_are_the_by_role_windows(tmp_path: Path) -> None:
    """LEAF stores 80-character windows; their last 20 characters and the next one are the
    by-role samples from the 61st on."""
    text = role_text(ROLES[2][2]) * 3
    leaf_x = [text[i:i + 80] for i in range(len(text) - 80)]
    leaf_y = [text[i + 80] for i in range(len(text) - 80)]
    half = len(leaf_x) // 2
    for split, part in (("train", slice(0, half)), ("test", slice(half, None))):
        (tmp_path / split).mkdir()
        (tmp_path / split / "s.json").write_text(json.dumps({
            "users": ["FOOL", "KING"], "num_samples": [len(leaf_x[part]), 1],
            "user_data": {"FOOL": {"x": leaf_x[part], "y": leaf_y[part]},
                          "KING": {"x": [text[:80]], "y": ["w"]}}}))
    data = load(tmp_path, min_samples=2, test_fraction=0.5)
    side = data.train if "FOOL" in data.train.client_ids else data.test
    x_ref, y_ref = windows(char_classes(text))
    np.testing.assert_array_equal(side.x.numpy(), x_ref[60:])
    np.testing.assert_array_equal(side.y.numpy(), y_ref[60:])


@pytest.mark.parametrize("content, message", [
    ('{"play": "P", "role": "R", "lines": ["x"]}\nnot json\n', "line 2: not json"),
    ('{"play": "P", "lines": ["x"]}\n', "line 1: needs 'play', 'role' and 'lines'"),
    ('{"play": "P", "role": "R", "lines": "one string"}\n', "line 1: needs"),
])
def test_bad_by_role_files_name_the_file_and_line(tmp_path: Path, content: str,
                                                  message: str) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text(content)
    with pytest.raises(InputError, match=message) as info:
        load(path)
    assert str(path) in str(info.value)


def test_a_role_twice_and_a_missing_file_are_input_errors(tmp_path: Path) -> None:
    path = write_by_role(tmp_path / "twice.jsonl.gz", [ROLES[0], ROLES[0], ROLES[2]])
    with pytest.raises(InputError, match="listed twice"):
        load(path)
    with pytest.raises(InputError, match="not found"):
        load(tmp_path / "none.jsonl.gz")


def test_bad_leaf_windows_name_the_shard(tmp_path: Path) -> None:
    (tmp_path / "s.json").write_text(json.dumps({
        "users": ["U"], "num_samples": [1], "user_data": {"U": {"x": ["too short"], "y": ["a"]}}}))
    with pytest.raises(InputError, match="s.json: user 'U'"):
        load(tmp_path)


@requires_data
def test_the_real_corpus_has_the_papers_task_sizes() -> None:
    path = data_dir() / "shakespeare" / "shakespeare_by_role.jsonl.gz"  # type: ignore[operator]
    data = load(path, min_samples=101)
    sizes = np.concatenate([data.train.num_samples, data.test.num_samples])
    # 1,298 roles, 1,064 with >= 101 windows (the data's README); the papers have 544 + 545
    # devices from LEAF's raw split (long paper, Table 1), which attributes some roles wrongly.
    assert (data.train.num_clients, data.test.num_clients) == (532, 532)
    assert sizes.min() >= 101 and int(np.median(data.train.num_samples)) > 1000


@requires_data
def test_leafs_own_shakespeare_sample_loads(tmp_path: Path) -> None:
    archive = data_dir() / "shakespeare" / "leaf_format_sample.tar.gz"  # type: ignore[operator]
    with tarfile.open(archive) as tar:
        tar.extractall(tmp_path, filter="data")
    data = load(tmp_path / "data" / "shakespeare" / "data")
    assert data.train.num_clients + data.test.num_clients == 10
    assert int(data.train.x.max()) < 53 and data.train.x.shape[1] == WINDOW

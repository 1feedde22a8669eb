"""A user plug-in's code changed under a stopped run (issue 70): the manifest records the
sha256 of each user plug-in's module file, and ``resume`` refuses other code (exit 2,
one line naming the plug-in); the same code resumes to the uninterrupted files, and a
manifest from before the record resumes unchecked."""

from __future__ import annotations

import hashlib
import json
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from simfl.plugins import source_sha256
from tests.runs.test_resume import (
    assert_same_files,
    manifest,
    resume,
    resume_refused,
    write_scenario,
)

MODULE_NAME = "changing_rule"
RULE = f"{MODULE_NAME}:scaled"
MODULE = '''
from simfl.aggregate.base import Aggregator, keep_all, weighted_mean


def scaled(scale=0.5):
    """FedAvg with its step scaled by ``scale`` (a test rule)."""
    def combine(global_params, inputs, state):
        new = weighted_mean(global_params, inputs, state)
        return type(new)(global_params + scale * (new.params - global_params), state)
    return Aggregator("scaled", False, keep_all, combine)
'''


@pytest.fixture(scope="module")
def module(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The plug-in's module file, importable as ``changing_rule``."""
    folder = tmp_path_factory.mktemp("plugin")
    path = folder / f"{MODULE_NAME}.py"
    path.write_text(MODULE)
    with pytest.MonkeyPatch.context() as patch:
        patch.syspath_prepend(str(folder))
        yield path
    sys.modules.pop(MODULE_NAME, None)


@pytest.fixture(scope="module")
def scenario(module: Path) -> Path:
    written = write_scenario(module.parent, aggregator=RULE)
    return written.rename(written.with_name("plugin.toml"))  # a plain run name, no ':'





@pytest.fixture
def edit(module: Path) -> Iterator[Path]:
    """The module, put back as it was after the test."""
    yield module
    module.write_text(MODULE)


def test_the_manifest_records_the_sha256_of_each_user_plugins_module(
        stopped: Path, module: Path) -> None:
    sha = hashlib.sha256(module.read_bytes()).hexdigest()
    assert manifest(stopped)["plugin_sha256"] == {"aggregator.name": sha}  # simfl's: none
    assert source_sha256(RULE) == sha


def test_a_resume_with_the_plugin_edited_is_refused_naming_it(
        out: Path, edit: Path, capsys: pytest.CaptureFixture[str]) -> None:
    edit.write_text(MODULE.replace("scale=0.5", "scale=0.9"))
    resume_refused(out, capsys, "plug-in 'aggregator.name'", RULE, "changed since the run")


def test_a_resume_with_the_plugin_unchanged_gives_the_uninterrupted_files(
        out: Path, baseline: Path, module: Path, capsys: pytest.CaptureFixture[str]) -> None:
    capsys.readouterr()
    assert resume(out) == 0
    assert_same_files(out, baseline)
    # it says where the plug-in's code comes from before importing it
    assert f"plug-in 'aggregator.name' = '{RULE}' from {module.resolve()}" in \
        capsys.readouterr().out


def test_a_manifest_from_before_the_record_resumes_unchecked(out: Path, edit: Path) -> None:
    info = manifest(out)
    del info["plugin_sha256"]
    (out / "manifest.json").write_text(json.dumps(info))
    edit.write_text(MODULE + "# a comment\n")
    assert resume(out) == 0
    assert manifest(out)["status"] == "complete"


def test_a_module_with_no_file_to_read_has_no_sha256() -> None:
    assert source_sha256("sys:exit") is None  # built into Python
    assert source_sha256("no_such_module_here:f") is None

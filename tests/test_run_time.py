"""bench/run_time.py splits a run's profile by (file, function): each must still exist,
or its share would read 0 s without an error."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.bench_scripts import bench_module

SIMFL = Path(__file__).parents[1] / "simfl"


def test_every_profiled_part_names_a_function_of_its_file() -> None:
    for suffix, function in bench_module("run_time").PARTS:
        tree = ast.parse((SIMFL / suffix).read_text())
        defined = {node.name for node in ast.walk(tree)
                   if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)}
        assert function in defined, f"simfl/{suffix} defines no {function}()"

"""The code's shape: per module its lines, largest class, largest function and longest
parameter list, then everything over the project's limits (a class over 120 lines, a
function over 50, more than 6 parameters; ``self``/``cls`` not counted).

    python bench/code_shape.py [simfl]
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

LIMITS = {"class": 120, "function": 50, "parameters": 6}
Functions = (ast.FunctionDef, ast.AsyncFunctionDef)


def _span(node: ast.stmt) -> int:
    return (node.end_lineno or node.lineno) - node.lineno + 1


def _params(node: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    a = node.args
    names = [x.arg for x in a.posonlyargs + a.args + a.kwonlyargs]
    names += [x.arg for x in (a.vararg, a.kwarg) if x is not None]
    return len([n for n in names if n not in ("self", "cls")])


def main() -> None:
    root = Path(sys.argv[1] if len(sys.argv) > 1 else "simfl")
    over: dict[str, list[tuple[int, str]]] = {kind: [] for kind in LIMITS}
    total = 0
    print(f"{'module':45s} {'lines':>5s}  largest class | largest function | longest params")
    for path in sorted(root.rglob("*.py")):
        source = path.read_text()
        total += len(source.splitlines())
        nodes = list(ast.walk(ast.parse(source)))
        measures: dict[str, list[tuple[int, str]]] = {
            "class": [(_span(n), n.name) for n in nodes if isinstance(n, ast.ClassDef)],
            "function": [(_span(n), n.name) for n in nodes if isinstance(n, Functions)],
            "parameters": [(_params(n), n.name) for n in nodes if isinstance(n, Functions)]}
        cells = []
        for kind, values in measures.items():
            size, name = max(values, default=(0, "-"))
            cells.append(f"{name} {size}")
            over[kind] += [(v, f"{path}:{n}") for v, n in values if v > LIMITS[kind]]
        print(f"{str(path):45s} {len(source.splitlines()):5d}  {' | '.join(cells)}")
    print(f"total lines: {total}")
    for kind, items in over.items():
        print(f"\n{kind} over {LIMITS[kind]}: {len(items)}")
        for value, name in sorted(items, reverse=True):
            print(f"  {value:4d}  {name}")


if __name__ == "__main__":
    main()

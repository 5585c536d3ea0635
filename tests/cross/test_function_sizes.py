"""Functions stay short enough to hold in mind: at most 80 lines in analysis/, 150 anywhere in src/."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "src" / "qkenergy"
LIMITS = {"analysis": 80, "": 150}  # folder under the package ("" = all of it) -> most lines of a function


def _lengths() -> list[tuple[int, str]]:
    """(lines from ``def`` to the function's last line, where) of every function and method."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                where = f"{path.relative_to(PACKAGE).as_posix()}:{node.lineno} {node.name}"
                found.append((int(node.end_lineno or node.lineno) - node.lineno + 1, where))
    return found


def test_no_function_is_too_long() -> None:
    lengths = _lengths()
    assert len(lengths) > 1000  # the walk saw the package
    for folder, limit in LIMITS.items():
        long = sorted((size, where) for size, where in lengths if where.startswith(folder) and size > limit)
        assert not long, f"functions over {limit} lines in {folder or 'src'}/: {long}"

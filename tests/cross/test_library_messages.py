"""Library messages name Python parameters, never command-line flags (the CLI puts its flags in).

Every string literal of a module outside ``qkenergy.cli`` that a ``raise`` builds, or that names
a parameter to a check (``check_integer(x, "--samples")``), is scanned for one of the command
line's own flags; docstrings, notes and help texts are not messages and are not scanned.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import click

from qkenergy.cli.main import cli

PACKAGE = Path(__file__).resolve().parents[2] / "src" / "qkenergy"

# Messages of other modules that still name a flag, each with the module it is in: the test
# fails when one is gone (remove it here) as well as when a new one appears. None today.
KNOWN: set[tuple[str, str]] = set()


def _flags() -> set[str]:
    """Every long option of every qkenergy command."""
    flags: set[str] = set()
    for command in [cli, *cli.commands.values()]:
        for param in command.params:
            if isinstance(param, click.Option):
                flags.update(o for o in (*param.opts, *param.secondary_opts) if o.startswith("--"))
    return flags - {"--help", "--version"}


def _messages(tree: ast.AST) -> list[ast.Constant]:
    """String constants inside raise statements and the name arguments of the shared checks."""
    found: list[ast.Constant] = []
    for node in ast.walk(tree):
        parts: list[ast.AST] = []
        if isinstance(node, ast.Raise) and node.exc is not None:
            parts = [node.exc]
        elif isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", "")) in (
            "check_integer",
            "check_positive",
            "resolve_threads",
        ):
            parts = node.args[1:2]
        for part in parts:
            found += [c for c in ast.walk(part) if isinstance(c, ast.Constant) and isinstance(c.value, str)]
    # module-level message constants raised elsewhere (e.g. a hint appended to several messages)
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant)):
            continue
        named = any(isinstance(t, ast.Name) and t.id.startswith("_") and t.id.isupper() for t in node.targets)
        if named and isinstance(node.value.value, str):
            found.append(node.value)
    return found


def test_no_library_message_names_a_flag() -> None:
    flags = _flags()
    assert {"--samples", "--null", "--scheduler", "--static", "--baseline", "--model-type"} <= flags
    pattern = re.compile(r"(?<![\w-])(--[a-z][a-z0-9-]*)")
    seen: set[tuple[str, str]] = set()
    for path in sorted(PACKAGE.rglob("*.py")):
        module = path.relative_to(PACKAGE).as_posix()
        if module.startswith("cli/"):
            continue
        for constant in _messages(ast.parse(path.read_text(encoding="utf-8"))):
            for flag in pattern.findall(constant.value):
                if flag in flags:
                    seen.add((module, flag))
    assert seen == KNOWN, sorted(seen ^ KNOWN)

"""The examples in the package's docstrings run as shown (doctest; the API's on the embedded MiniLM).

The modules are found, not listed: every module of the package whose source holds an example
(a ``>>>`` line) is collected.
"""

from __future__ import annotations

import doctest
import importlib
from pathlib import Path

import pytest

import qkenergy

PACKAGE = Path(qkenergy.__file__).resolve().parent


def modules_with_examples() -> list[str]:
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if any(line.lstrip().startswith(">>> ") for line in path.read_text(encoding="utf-8").splitlines()):
            parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
            found.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return found


MODULES = modules_with_examples()


def test_the_collection_finds_the_examples() -> None:
    assert {
        "qkenergy.api.model",
        "qkenergy.api.head",
        "qkenergy.api.results",
        "qkenergy.math.laws",
        "qkenergy.analysis.nullspec",
        "qkenergy.analysis.type_rule",
    } <= set(MODULES)


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name: str) -> None:
    module = importlib.import_module(name)
    failed, attempted = doctest.testmod(module, optionflags=doctest.NORMALIZE_WHITESPACE, report=True)
    assert attempted > 0, f"{name} has no examples"
    assert failed == 0

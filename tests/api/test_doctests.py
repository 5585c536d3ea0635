"""The examples in the public API's docstrings run as shown (doctest, on the embedded MiniLM)."""

from __future__ import annotations

import doctest
import importlib

import pytest

MODULES = [
    "qkenergy.api.model",
    "qkenergy.api.head",
    "qkenergy.api.results",
    "qkenergy.math.laws",
    "qkenergy.analysis.nullspec",
    "qkenergy.analysis.type_rule",
]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name: str) -> None:
    module = importlib.import_module(name)
    failed, attempted = doctest.testmod(module, optionflags=doctest.NORMALIZE_WHITESPACE, report=True)
    assert attempted > 0, f"{name} has no examples"
    assert failed == 0

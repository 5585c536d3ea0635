"""TypeRule: the head-type rule and its tolerances travel together, checked once."""

from __future__ import annotations

import dataclasses

import pytest

from qkenergy.analysis.analyze import analyze_model
from qkenergy.analysis.type_rule import TypeRule
from qkenergy.base.errors import QKEnergyError


def test_defaults_and_keywords() -> None:
    rule = TypeRule()
    assert rule.keywords() == {
        "radius": 0.02,
        "type_rule": "imbalance",
        "imbalance_cut": 0.2,
        "edge_cut": 0.01,
    }
    with pytest.raises(dataclasses.FrozenInstanceError):
        rule.rule = "radius"  # type: ignore[misc]


@pytest.mark.parametrize(
    ("args", "parameter"),
    [(("nope",), "type_rule"), (("imbalance", 1.5), "imbalance_cut"), (("radius", 0.2, -1), "edge_cut")],
)
def test_bad_values_name_the_parameter(args: tuple, parameter: str) -> None:
    with pytest.raises(QKEnergyError, match=f"^{parameter} must be") as caught:
        TypeRule(*args)
    assert caught.value.parameter == parameter


def test_analyze_takes_the_rule_as_one_object() -> None:
    loose = analyze_model(layers=[0], null=False, type_rule="radius", imbalance_cut=0.3)
    bundled = analyze_model(layers=[0], null=False, type_rule=TypeRule("radius", 0.3))
    assert list(loose.heads["head_type"]) == list(bundled.heads["head_type"])
    assert {k: bundled.settings[k] for k in TypeRule().keywords()} == TypeRule("radius", 0.3).keywords()

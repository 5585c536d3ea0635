"""captions: what a figure states about the run comes from the run's recorded settings."""

from __future__ import annotations

import pytest

from qkenergy.figures.captions import recorded_type_rule, report_type_rules, type_rule_text


def test_the_rule_is_the_recorded_one() -> None:
    imbalance = {"type_rule": "imbalance", "imbalance_cut": 0.3, "edge_cut": 0.02, "radius": 0.02}
    text = type_rule_text(imbalance)
    assert text is not None and text.startswith("Imbalance rule:")
    assert "c + d <= 0.02" in text and "|c - d|/(c + d) <= 0.3" in text and "radius" not in text
    radius = type_rule_text({"type_rule": "radius", "radius": 0.05})
    assert radius is not None and radius.startswith("Radius rule:") and "c_sym + d_sym <= 0.05" in radius
    # a table from before the imbalance rule records a radius and no rule: the radius rule
    old = recorded_type_rule({"radius": 0.03})
    assert old is not None and old[0].rule == "radius" and old[1] == pytest.approx(0.03)
    assert type_rule_text({"samples": 300}) is None and type_rule_text(None) is None


def test_a_report_states_its_tables_rules() -> None:
    imbalance = {"type_rule": "imbalance", "imbalance_cut": 0.2, "edge_cut": 0.01}
    assert report_type_rules({"survey": "OUT", "settings": imbalance}) == type_rule_text(imbalance)
    same = report_type_rules({"tables": {"a.csv": imbalance, "b.csv": dict(imbalance)}})
    assert same == type_rule_text(imbalance)
    mixed = report_type_rules({"tables": {"a.csv": imbalance, "b.csv": {"radius": 0.02}}})
    assert mixed is not None and mixed.startswith("The tables record different rules.")
    assert "a.csv: Imbalance rule" in mixed and "b.csv: Radius rule" in mixed
    # a table that records no rule: no sentence claims one for its models
    assert report_type_rules({"tables": {"a.csv": imbalance, "b.csv": {}}}) is None

"""The record of a run: what analyze and a survey write into their settings is read back, by one reader."""

from __future__ import annotations

import pytest

from qkenergy.analysis.analyze import analyze_model
from qkenergy.analysis.nullspec import NullSpec
from qkenergy.analysis.record import RecordedRun, recorded_run, survey_settings
from qkenergy.analysis.type_rule import TypeRule


@pytest.mark.parametrize(
    ("null", "types"),
    [
        (
            NullSpec(samples=300, seed=4, kind="both", rotation_samples=60),
            TypeRule("radius", 0.3, 0.02, 0.05),
        ),
        (NullSpec(samples=50, seed=1), TypeRule()),
    ],
)
def test_a_survey_records_what_is_read_back(null: NullSpec, types: TypeRule) -> None:
    settings = survey_settings(null, types, null=True, per_layer=False)
    assert recorded_run(settings) == RecordedRun(null, types)
    assert recorded_run(survey_settings(null, types, null=False, per_layer=False)).null is None


def test_an_analysis_records_what_is_read_back() -> None:
    null, types = (
        NullSpec(samples=40, seed=3, kind="both", rotation_samples=20),
        TypeRule("radius", radius=0.1),
    )
    result = analyze_model(layers=[0], heads=[0], null=null, type_rule=types)
    assert recorded_run(result.settings) == RecordedRun(null, types)
    assert recorded_run(analyze_model(layers=[0], heads=[0], null=False).settings).null is None
    # a run of the rotation null alone records no Gaussian draws: its samples read back as the default
    rotation = NullSpec(seed=2, kind="rotation", rotation_samples=20)
    assert recorded_run(analyze_model(layers=[0], heads=[0], null=rotation).settings).null == rotation


def test_older_tables_read_with_their_rule() -> None:
    # before the imbalance rule, tables recorded a radius and no type_rule: theirs was the radius rule
    assert recorded_run({"radius": 0.05}).types == TypeRule("radius", radius=0.05)
    assert recorded_run({}) == RecordedRun(
        None, TypeRule()
    )  # nothing recorded: no null law, the default rule

"""Figures of the comparison report at sizes the other suites do not reach."""

from __future__ import annotations

import pandas as pd

from qkenergy.analysis.analyze import analyze_model
from qkenergy.figures.survey_figures import _simplex


def test_the_simplex_grid_takes_a_survey_of_many_checkpoints() -> None:
    # 52 checkpoints (the survey of examples/encoder_vs_decoder.py): 18 rows of ternary panels,
    # beyond the vertical spacing plotly allows for a fixed 0.067 (it raised ValueError)
    heads = analyze_model(None, null=False, layers=[0]).heads
    models = [f"run-step-{i:03d}" for i in range(52)]
    many = pd.concat([heads.assign(model=m, relative_depth=0.0) for m in models], ignore_index=True)
    figure = _simplex(many, models)
    assert figure.name == "symmetric_profiles"
    assert len(figure.figure.layout.annotations) >= 52  # one title per model

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


def _figures(survey_frames, settings=None):
    from qkenergy.analysis.comparison import model_summary
    from qkenergy.figures.survey_figures import report_figures

    heads, layers, models = survey_frames
    figures = report_figures(heads, model_summary(heads, layers, models), models=models, settings=settings)
    return {f.name: f for f in figures}


def test_model_colours_differ_from_the_null_band(survey_frames) -> None:
    from qkenergy.figures.survey_figures import _BAND_EDGE, _PALETTE, _RESERVED

    fig = _figures(survey_frames)["symmetric_energy_by_model"].figure
    colours = [t.marker.color for t in fig.data if t.type == "box"]
    assert len(set(colours)) == len(colours) and not set(colours) & _RESERVED
    band = next(t for t in fig.data if t.name == "null law: mean ± 2 sd")
    assert band.marker.line.color == _BAND_EDGE and "#FF7F0E" not in _PALETTE


def test_head_types_caption_states_the_recorded_rule(survey_frames) -> None:
    imbalance = {"type_rule": "imbalance", "imbalance_cut": 0.2, "edge_cut": 0.01, "radius": 0.02}
    caption = _figures(survey_frames, {"settings": imbalance})["head_types"].caption
    assert caption.startswith("Imbalance rule: Type II when c + d <= 0.01") and "radius" not in caption
    caption = _figures(survey_frames, {"settings": {"type_rule": "radius", "radius": 0.04}})[
        "head_types"
    ].caption
    assert caption.startswith("Radius rule: Type II (paired lobes) when c_sym + d_sym <= 0.04")
    assert "record no head-type rule" in _figures(survey_frames)["head_types"].caption


def test_moments_legend_sits_above_the_panel_titles(survey_frames) -> None:
    figure = _figures(survey_frames)["moments_O_E"]
    layout = figure.figure.layout
    # in the figure's own coordinates, in the top margin; the panel titles sit on the plot area
    assert layout.legend.yref == "container" and layout.legend.yanchor == "top"
    assert layout.margin.t >= 90


def test_difference_panels_keep_their_titles_clear(survey_frames) -> None:
    from qkenergy.analysis.comparison import baseline_comparison, model_summary
    from qkenergy.figures.survey_figures import report_figures

    heads, layers, models = survey_frames
    comparison = baseline_comparison(heads, "toy-llama@0", models)
    figures = report_figures(
        heads, model_summary(heads, layers, models), models=models, comparison=comparison
    )
    difference = next(f.figure for f in figures if f.name == "baseline_difference")
    titles = [axis.title.text for axis in difference.select_xaxes()]
    # one "head" under the last panel: above the others it ran into the next panel's title
    assert titles[-1] == "head" and not any(titles[:-1])
    profiles = next(f.figure for f in figures if f.name == "symmetric_profiles")
    named = [t.name for t in profiles.data if t.showlegend]
    assert named == ["accumulation limit (2ρ, (1-ρ)₊², (ρ-1)₊²)/(1+ρ²)"]

"""The O-E figure: in `qkenergy plot` (matplotlib) and in the comparison report (plotly)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from qkenergy.analysis.analyze import analyze_model
from qkenergy.analysis.nullspec import NullSpec


def test_o_e_figures(tmp_path: Path) -> None:
    from qkenergy.analysis.comparison import model_summary
    from qkenergy.figures.plots import moment_scatter, plot_results
    from qkenergy.figures.survey_figures import report_figures

    df: pd.DataFrame = analyze_model(samples=200, cache_dir=tmp_path).heads
    fig = moment_scatter(df, null=NullSpec(samples=200), cache_dir=tmp_path, population="MiniLM heads")
    ax = fig.axes[0]
    labels = [c.get_label() for c in ax.collections]
    assert labels == [
        "null, Gaussian head n=32, N=384 (200 samples)",
        "MiniLM heads, Type I+ (43)",
        "MiniLM heads, Type I- (20)",
        "MiniLM heads, Type II (9)",
    ]
    assert [len(c.get_offsets()) for c in ax.collections] == [200, 43, 20, 9]
    paths = plot_results(
        df, tmp_path / "figs", null=NullSpec(samples=200), cache_dir=tmp_path, formats=("png",)
    )
    assert (tmp_path / "figs" / "moments_O_E.png") in paths
    assert (tmp_path / "figs" / "moments_O_E.png").read_bytes().startswith(b"\x89PNG")
    report = report_figures(df, model_summary(df))
    moments_figure = next(f for f in report if f.name == "moments_O_E").figure
    assert [t.name for t in moments_figure.data] == [
        "null, Gaussian head n=32, N=384",
        "Type II",
        "Type I+",
        "Type I-",
    ]
    assert len(moments_figure.data[0].x) == 500 and sum(len(t.x) for t in moments_figure.data[1:]) == 72


def test_a_csv_table_of_all_the_columns_is_not_fragmented(tmp_path: Path) -> None:
    """Over 100 columns from read_csv are one block each: assign (plot, report) then warned on every call."""
    import warnings

    from qkenergy.formats.tables import read_table, write_table

    result = analyze_model(layers=[0], null=False)
    path = write_table(result.head_table(), tmp_path / "heads.csv", settings=result.settings)
    df = read_table(path)
    assert len(df.columns) > 100
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        df.assign(row=df["layer"])

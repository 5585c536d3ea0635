"""The report on a machine without Chrome or Chromium: the page, and its PNG / SVG figures from matplotlib.

The CI machine installs Chromium (tests/cross/test_report_browser.py renders with kaleido there), so
the machine without one is simulated: the browser lookup finds nothing.
"""

from __future__ import annotations

import io
import os
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import plotly.graph_objects as go
import pytest
from matplotlib.collections import PathCollection
from matplotlib.patches import Rectangle

from qkenergy.analysis.comparison import baseline_comparison, model_summary
from qkenergy.base.errors import QKEnergyError
from qkenergy.figures import static
from qkenergy.figures.survey_figures import WIDTH, ReportFigure, report_figures
from qkenergy.report import page
from qkenergy.report.page import build_report, files_directory

MIN_PIXEL_SD = 5.0  # a blank or one-colour image has 0


def _pixel_sd(png: bytes) -> float:
    from PIL import Image

    with Image.open(io.BytesIO(png)) as image:
        return float(np.asarray(image.convert("L"), dtype=np.float64).std())


@pytest.fixture()
def no_browser(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(page, "browser_path", lambda: None)


@pytest.fixture()
def two_toys(survey_frames):
    """Heads of two checkpoints of the toy run: a small report, quick to draw."""
    heads, _, models = survey_frames
    keep = heads["model"].isin(["toy-llama@0", "toy-llama@100"])
    return heads[keep].reset_index(drop=True), models


@pytest.fixture()
def figures(survey_frames) -> list[ReportFigure]:
    heads, layers, models = survey_frames
    summary = model_summary(heads, layers, models)
    comparison = baseline_comparison(heads, "toy-llama@0", models)
    return report_figures(heads, summary, models=models, comparison=comparison)


def test_report_without_a_browser_draws_every_figure_with_matplotlib(
    survey_frames, no_browser, tmp_path: Path
) -> None:
    heads, layers, models = survey_frames
    out = tmp_path / "report.html"
    with pytest.warns(UserWarning, match=r"no Chrome or Chromium found: .* drawn with matplotlib") as caught:
        report = build_report(heads, layers, out, baseline="toy-llama@0", models=models)
    assert len(caught) == 1 and "apt-get install chromium" in str(caught[0].message)
    assert report.renderer == "matplotlib"
    html = out.read_text(encoding="utf-8")
    for name in report.figures:
        png = (report.directory / f"{name}.png").read_bytes()
        assert png.startswith(b"\x89PNG"), name
        assert _pixel_sd(png) > MIN_PIXEL_SD, f"{name}.png is blank"
        svg = ET.parse(report.directory / f"{name}.svg").getroot()
        assert svg.tag.endswith("svg") and len(list(svg.iter())) > 50, f"{name}.svg is empty"
        assert f'href="report_files/{name}.png"' in html
    assert {p.name for p in report.files} == {
        "models.csv",
        "baseline_difference.csv",
        *(f"{n}.{fmt}" for n in report.figures for fmt in ("png", "svg")),
    }


def test_the_matplotlib_figures_show_the_same_data(figures) -> None:
    by_name = {f.name: f for f in figures}
    # One point per head, at the heads' s, in the by-model figure.
    fig = by_name["symmetric_energy_by_model"]
    drawn = static.draw(fig.figure, width=WIDTH, height=fig.height)
    points = np.concatenate(
        [c.get_offsets()[:, 1] for ax in drawn.axes for c in ax.collections if isinstance(c, PathCollection)]
    )
    points = points[np.isfinite(points)]  # the legend's sample marker has no place
    plotted = np.concatenate([np.asarray(t.y, dtype=np.float64) for t in fig.figure.data if t.type == "box"])
    np.testing.assert_allclose(np.sort(points), np.sort(plotted[np.isfinite(plotted)]), rtol=1e-12)
    # The stacked bars of the head types reach the shares plotly stacks, and 100 % in all.
    fig = by_name["head_types"]
    drawn = static.draw(fig.figure, width=WIDTH, height=fig.height)
    bars = [p for p in drawn.axes[0].patches if isinstance(p, Rectangle)]
    tops = {}
    for bar in bars:
        x = round(bar.get_x() + bar.get_width() / 2)
        tops[x] = max(tops.get(x, 0.0), bar.get_y() + bar.get_height())
    assert list(tops.values()) == pytest.approx([1.0] * len(tops))
    assert sum(bar.get_height() for bar in bars) == pytest.approx(
        sum(float(np.nansum(np.asarray(t.y, dtype=np.float64))) for t in fig.figure.data)
    )
    # Every figure of the report can be drawn, with its legend entries and axis titles.
    for fig in figures:
        assert static.unsupported(fig.figure) == [], fig.name
        drawn = static.draw(fig.figure, width=WIDTH, height=fig.height)
        titles = {ax.get_xlabel() for ax in drawn.axes} | {ax.get_ylabel() for ax in drawn.axes}
        for axis in ("xaxis", "yaxis"):
            title = fig.figure.layout[axis].title.text
            if title:
                assert title in titles, (fig.name, title)


def test_static_true_requires_every_figure(
    two_toys, no_browser, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    heads, models = two_toys
    layers = None
    pie = ReportFigure("pie", "A pie", "", go.Figure(go.Pie(values=[1, 2])), 300)

    def with_a_pie(*args, **kwargs):
        return [*report_figures(*args, **kwargs), pie]

    monkeypatch.setattr(page, "report_figures", with_a_pie)
    out = tmp_path / "report.html"
    with pytest.raises(QKEnergyError, match=r"^static: no Chrome or Chromium found, .* pie \(pie traces\)"):
        build_report(heads, layers, out, models=models, static=True)
    assert not out.exists() and not files_directory(out).exists()
    # By default the figure matplotlib cannot draw is left out, and the warning names it.
    with pytest.warns(UserWarning, match=r"left out pie \(pie traces\)"):
        report = build_report(heads, layers, out, models=models)
    assert not (report.directory / "pie.png").exists()
    assert (report.directory / "head_types.png").is_file()
    assert 'href="report_files/pie.png"' not in out.read_text(encoding="utf-8")


def test_no_static_writes_the_page_and_tables_only(two_toys, tmp_path: Path) -> None:
    heads, models = two_toys
    report = build_report(heads, None, tmp_path / "r.html", models=models, static=False)
    assert report.renderer is None
    assert [p.name for p in report.files] == ["models.csv"]


def test_browser_lookup(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # BROWSER_PATH is where kaleido looks first; a path that is no program means no browser.
    monkeypatch.setenv("BROWSER_PATH", str(tmp_path / "no-such-chromium"))
    assert page.browser_path() is None
    fake = tmp_path / "chromium"
    fake.write_text("#!/bin/sh\n")
    monkeypatch.setenv("BROWSER_PATH", str(fake))
    assert page.browser_path() is None  # not executable
    os.chmod(fake, 0o755)
    assert page.browser_path() == str(fake)


def test_cli_report_without_a_browser(capsys, two_toys, tmp_path: Path, monkeypatch) -> None:
    from qkenergy import cli
    from qkenergy.formats.tables import write_table

    heads, _ = two_toys
    table = tmp_path / "heads.parquet"
    write_table(heads, table)
    monkeypatch.setenv("BROWSER_PATH", str(tmp_path / "no-such-chromium"))
    out = tmp_path / "r.html"
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["report", str(table), "-o", str(out)])
    stdout, stderr = capsys.readouterr()
    assert exit_info.value.code == 0, stderr
    assert stderr.count("\n") == 1 and stderr.startswith("qkenergy: warning: no Chrome or Chromium found")
    assert f"wrote {out} (2 models, 9 figures)" in stdout
    assert (files_directory(out) / "symmetric_energy_by_model.svg").is_file()


def test_type_figures_of_the_report(figures, survey_frames) -> None:
    heads = survey_frames[0]
    by_name = {f.name: f.figure for f in figures}
    # One heatmap per model; each layer's shares of the three types add up to 1, counts in the cells.
    shares = by_name["head_types_per_layer"]
    assert [t.type for t in shares.data] == ["heatmap"] * 5
    minilm = shares.data[0]
    np.testing.assert_allclose(np.asarray(minilm.z).sum(axis=0), 1.0)
    assert list(minilm.y) == ["Type II", "Type I+", "Type I-"] and list(minilm.x) == [
        str(i) for i in range(6)
    ]
    mine = heads[heads["model"] == heads["model"].iloc[0]]
    layer0 = mine[mine["layer"] == 0]["head_type"]
    assert [row[0] for row in minilm.text] == [f"{(layer0 == t).sum()}/12" for t in ("II", "I+", "I-")]
    # The spectra: per type, each model's mean lobes, the positive one up and the negative one down.
    spectra = by_name["type_spectra"]
    lines = [t for t in spectra.data if t.type == "scatter"]
    assert all(np.all(np.asarray(t.y) >= 0) or np.all(np.asarray(t.y) <= 0) for t in lines)
    assert {t.name for t in lines if t.showlegend} == set(heads["model"])

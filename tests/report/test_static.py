"""The report's PNG / SVG figures on a machine without Chrome or Chromium: none, and one line saying so.

The figure files are plotly's own export (kaleido in a headless browser; tests/cross/test_report_browser.py
renders them in the CI's Chromium). The machine without one is simulated: the browser lookup finds nothing.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from qkenergy.analysis.comparison import baseline_comparison, model_summary
from qkenergy.base.errors import QKEnergyError
from qkenergy.figures.survey_figures import ReportFigure, report_figures
from qkenergy.report import page
from qkenergy.report.page import build_report, files_directory


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


def test_report_without_a_browser_writes_the_page_and_says_what_to_install(
    two_toys, no_browser, tmp_path: Path
) -> None:
    heads, models = two_toys
    out = tmp_path / "report.html"
    with pytest.warns(
        UserWarning, match=r"^no Chrome or Chromium found: no PNG / SVG figures written"
    ) as caught:
        report = build_report(heads, None, out, baseline="toy-llama@0", models=models)
    message = str(caught[0].message)
    assert len(caught) == 1 and "\n" not in message
    assert "apt-get install chromium" in message and "BROWSER_PATH" in message
    assert report.renderer is None
    assert [p.name for p in report.files] == ["models.csv", "baseline_difference.csv"]
    assert sorted(p.name for p in report.directory.iterdir()) == ["baseline_difference.csv", "models.csv"]
    html = out.read_text(encoding="utf-8")
    # every figure is in the page, and no link points to a file that is not there
    assert all(f'id="figure-{name}"' in html for name in report.figures)
    assert "Static:" not in html and 'href="report_files/' not in html


def test_static_true_requires_a_browser(two_toys, no_browser, tmp_path: Path) -> None:
    heads, models = two_toys
    out = tmp_path / "report.html"
    with pytest.raises(
        QKEnergyError, match=r"^static: no Chrome or Chromium found, .*apt-get install chromium"
    ):
        build_report(heads, None, out, models=models, static=True)
    assert not out.exists() and not files_directory(out).exists()


def test_a_failing_kaleido_leaves_no_partial_figure(
    two_toys, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    heads, models = two_toys
    monkeypatch.setattr(page, "browser_path", lambda: "/usr/bin/chromium")

    def half_done(figures, directory: Path, formats, **_: object) -> list[Path]:
        (directory / f"{figures[0].name}.png").write_bytes(b"\x89PNG partial")
        raise QKEnergyError("kaleido could not render the figures (the browser closed)")

    monkeypatch.setattr(page, "_kaleido_export", half_done)
    out = tmp_path / "report.html"
    with pytest.warns(UserWarning, match=r"^kaleido could not render the figures \(the browser closed\)"):
        report = build_report(heads, None, out, models=models)
    assert [p.name for p in report.directory.iterdir()] == ["models.csv"]
    with pytest.raises(QKEnergyError, match=r"^static: kaleido could not render"):
        build_report(heads, None, tmp_path / "other.html", models=models, static=True)


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
    assert "apt-get install chromium" in stderr
    assert f"wrote {out} (2 models, 9 figures)" in stdout
    assert [p.name for p in files_directory(out).iterdir()] == ["models.csv"]


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

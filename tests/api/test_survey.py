"""qk.survey / qk.open_survey / qk.write_report: a survey as one object, on a tiny survey of two models."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pandas as pd
import pytest

import qkenergy as qk
from qkenergy.surveys.dataset import load_survey
from tests.survey_checkpoints import thread_cluster, two_model_manifest

SPEC = qk.NullSpec(samples=50, seed=3)


@pytest.fixture(scope="module")
def scheduler() -> Iterator[str]:
    with thread_cluster() as address:
        yield address


@pytest.fixture(scope="module")
def manifest(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return two_model_manifest(tmp_path_factory.mktemp("api-survey"))


@pytest.fixture(scope="module")
def done(manifest: Path, scheduler: str, tmp_path_factory: pytest.TempPathFactory) -> qk.Survey:
    out = tmp_path_factory.mktemp("run") / "out"
    return qk.survey(manifest, out, null=SPEC, types=qk.TypeRule("radius"), scheduler=scheduler)


def test_a_survey_is_its_dataset_settings_and_run(done: qk.Survey) -> None:
    assert isinstance(done, qk.Survey) and done.ok and done.last_run is not None
    assert (done.last_run.units, done.last_run.computed) == (4, 4)
    heads, layers = load_survey(done.out)
    pd.testing.assert_frame_equal(done.heads, heads)
    assert layers is None and done.layers is None
    assert done.null == SPEC and done.types == qk.TypeRule("radius")
    assert done.settings["samples"] == 50 and done.settings["type_rule"] == "radius"
    assert set(done.heads["model"]) == {"a", "b"} and "2 models, done" in repr(done)


def test_summary_figures_and_html(done: qk.Survey) -> None:
    text = done.summary()
    assert "Survey: symmetric energy per model" in text and "4 units: 4 computed" in text
    # opened again from OUT: the same summary, counts from survey.json and the ledger
    again = qk.open_survey(done.out)
    assert again.last_run is None and again.ok and again.summary() == text
    assert done.figures and all(isinstance(name, str) for name in done.figures)
    figure = done.figure(done.figures[0])
    assert figure.data  # a plotly Figure with traces
    with pytest.raises(qk.QKEnergyError, match="^name: no figure 'nope'") as caught:
        done.figure("nope")
    assert caught.value.parameter == "name"
    assert (
        "<strong>Survey" in done._repr_html_() and "gaussian null, 50 samples, seed 3" in done._repr_html_()
    )


def test_report_from_the_object_and_from_the_folder(done: qk.Survey, tmp_path: Path) -> None:
    first = done.report(tmp_path / "one.html", static=False)
    second = qk.write_report(done.out, tmp_path / "two.html", static=False)
    assert first.figures == second.figures == done.figures
    assert first.html.is_file() and second.html.is_file()
    pd.testing.assert_frame_equal(first.summary, second.summary)
    with pytest.raises(qk.QKEnergyError, match="no survey.json; not the folder of a survey"):
        qk.open_survey(tmp_path)


def test_no_null_keeps_the_spec_it_records(manifest: Path, scheduler: str, tmp_path: Path) -> None:
    """null=False draws nothing; the spec given as null_spec is what the settings record (the rule its radius)."""
    spec = qk.NullSpec(samples=40, seed=2)
    result = qk.survey(
        manifest,
        tmp_path / "out",
        null=False,
        null_spec=spec,
        types=qk.TypeRule(radius=0.1),
        scheduler=scheduler,
    )
    assert result.null is None and result.settings["radius"] == 0.1 and result.settings["seed"] == 2
    assert result.heads["symmetric_energy_p"].isna().all()
    with pytest.raises(qk.QKEnergyError, match="^null must be a NullSpec, True or False"):
        qk.survey(manifest, tmp_path / "other", null="yes")  # type: ignore[arg-type]
    with pytest.raises(qk.QKEnergyError, match="^types must be a TypeRule"):
        qk.survey(manifest, tmp_path / "other", types="radius")  # type: ignore[arg-type]
    assert not (tmp_path / "other").exists()  # refused before anything is written

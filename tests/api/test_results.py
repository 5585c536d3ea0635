"""qk.analyze -> Analysis: tables, null laws, summary, figures, files; qk.read gives it back exactly."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest
from matplotlib.figure import Figure

import qkenergy as qk
from qkenergy.analysis.nullspec import NullSpec
from qkenergy.base.formatting import json_safe
from qkenergy.figures.plots import FIGURES
from qkenergy.math.nulls import NULL_STATISTICS

SAMPLES = 200


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return tmp_path_factory.mktemp("null-cache")


@pytest.fixture(scope="module")
def result(cache) -> qk.Analysis:
    return qk.analyze(None, layers=[1, 2], samples=SAMPLES, cache_dir=cache)


def test_tables_settings_and_the_null_laws_used(result) -> None:
    assert result.model == "sentence-transformers/all-MiniLM-L6-v2"
    assert len(result.heads) == 24 and result.layers is None
    assert result.null == qk.NullSpec(samples=SAMPLES)
    (law,) = result.null_laws.values()
    assert set(result.null_laws) == {(32, 384)} and law.size == SAMPLES
    # the laws the heads were judged against: the table's p are theirs
    s = result.heads["symmetric_energy"].to_numpy()
    heads = result.heads
    np.testing.assert_array_equal(
        law["symmetric_energy"].pvalue(s, tail="empirical"), heads["symmetric_energy_p"]
    )
    np.testing.assert_array_equal(law["symmetric_energy"].p_tail(s), heads["symmetric_energy_p_tail"])
    # the law's default p, BH-adjusted over the heads, is the table's p_bh (one truth: issue 39)
    from qkenergy.analysis.significance import bh

    np.testing.assert_array_equal(bh(law["symmetric_energy"].pvalue(s)), heads["symmetric_energy_p_bh"])
    assert set(law.names) == set(NULL_STATISTICS)


def test_model_analyze_and_qk_analyze_are_the_same(result, cache) -> None:
    again = qk.open().analyze(layers=[1, 2], samples=SAMPLES, cache_dir=cache)
    columns = [c for c in result.heads.columns if c not in ("alpha", "beta")]
    pd.testing.assert_frame_equal(again.heads[columns], result.heads[columns], check_exact=True)
    spec = qk.NullSpec(samples=SAMPLES, seed=0)
    by_spec = qk.analyze(None, layers=[1, 2], null=spec, cache_dir=cache)
    pd.testing.assert_frame_equal(by_spec.heads[columns], result.heads[columns], check_exact=True)
    without = qk.analyze(None, layers=[2], null=False)
    assert without.null is None and without.null_laws == {}


def test_top_gives_the_most_symmetric_then_the_most_skew(result) -> None:
    top = result.top(3)
    heads = result.heads
    s = heads["symmetric_energy"].sort_values()
    baseline = ((heads["N"] + 1) / (2 * heads["N"])).reindex(s.index)
    # the most symmetric among the heads above the random baseline, the most skew among those below it
    expected = [*s[s > baseline].iloc[::-1][:3], *s[s < baseline][:3]]
    assert top["symmetric_energy"].tolist() == expected
    # a readable default (113 columns before: issue 39), every column or a choice on request
    assert list(top.columns) == [
        "layer",
        "head",
        "symmetric_energy",
        "symmetric_energy_z",
        "symmetric_energy_p",
        "symmetric_energy_p_tail",
        "symmetric_energy_p_bh",
        "head_type",
    ]
    assert list(result.top(3, columns="all").columns) == list(heads.columns)
    assert list(result.top(1, columns=["head", "layer"]).columns) == ["head", "layer"]
    with pytest.raises(qk.QKEnergyError, match="^columns: the head table has no column 'nope'"):
        result.top(1, columns=["layer", "nope"])
    with pytest.raises(qk.QKEnergyError, match="^k must be"):
        result.top(0)


def test_summary_is_the_command_lines_text(result, cache) -> None:
    env = {**os.environ, "COLUMNS": "80", "PYTHONPATH": os.pathsep.join(sys.path)}
    command = [sys.executable, "-m", "qkenergy", "analyze", "--layers", "1,2", "--samples", str(SAMPLES)]
    done = subprocess.run(
        [*command, "--cache-dir", str(cache)], capture_output=True, text=True, env=env, check=True
    )
    assert result.summary() == done.stdout
    assert result.summary(top=0).count("\n") < result.summary().count("\n")


def test_repr_html_names_the_model_and_the_heads(result) -> None:
    page = result._repr_html_()
    assert page.startswith("<div>") and "all-MiniLM-L6-v2" in page and "<table" in page
    assert "200 samples" in page and "significantly more symmetric" in page


@pytest.mark.parametrize("name", [f for f in FIGURES if f != "symmetric_energy_offsets"])
def test_every_figure_without_writing_a_file(result, name, tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    fig = result.figure(name)
    assert isinstance(fig, Figure) and fig.axes
    assert list(tmp_path.iterdir()) == []
    if name == "lobes":
        own = Figure()
        axes = own.subplots(1, 2)
        assert result.figure(name, ax=axes, head=(2, 3)) is own
        assert "layer 2, head 3" in own.texts[0].get_text() if own.texts else True
    elif name == "type_spectra":
        own = Figure()
        axes = own.subplots(1, 3)
        assert result.figure(name, ax=axes) is own and all(ax.has_data() for ax in axes)
    else:
        own = Figure()
        ax = own.add_subplot()
        assert result.figure(name, ax=ax) is own and ax.has_data()
    with pytest.raises(qk.QKEnergyError, match="^name must be one of"):
        result.figure("nope")


def test_offsets_figure_of_a_rope_model(tmp_path) -> None:
    from tests.survey_checkpoints import write_checkpoint

    root = write_checkpoint(tmp_path / "toy", "llama", layers=2, N=32, heads=2, head_dim=8)
    rope = qk.analyze(root, null=False, rope_offsets=[0, 1, 4])
    assert rope.figure("symmetric_energy_offsets").axes
    assert rope.top(1)["offset"].tolist() == [0, 0]  # the summary's offset: the smallest


@pytest.fixture(scope="module")
def written(cache) -> qk.Analysis:
    from qkenergy.analysis import layer_forms

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(
            layer_forms, "LAYER_NULL_MAX_FLOPS", 1.0
        )  # the layer forms' own null law: skipped, and says so
        return qk.analyze(None, layers=[0], samples=SAMPLES, per_layer=True, cache_dir=cache)


@pytest.mark.parametrize("suffix", [".csv", ".parquet", ".json"])
def test_write_then_read_is_exact(written, tmp_path, suffix) -> None:
    path = tmp_path / f"minilm{suffix}"
    files = written.write(path)
    assert path in files
    back = qk.read(path)
    pd.testing.assert_frame_equal(back.heads, written.heads, check_exact=True)
    pd.testing.assert_frame_equal(back.layers, written.layers, check_exact=True)
    assert back.settings == json.loads(json.dumps(json_safe(written.settings)))
    assert back.model == written.model and back.null == written.null
    assert back.summary() == written.summary()
    # and again: a read analysis writes the same bytes
    again = tmp_path / "again" / path.name
    again.parent.mkdir()
    back.write(again)
    if suffix != ".parquet":  # parquet files carry the writer's own metadata
        assert again.read_bytes() == path.read_bytes()
    # its null laws are drawn again from its settings: the same draws
    np.testing.assert_array_equal(back.null_laws[(32, 384)].values, written.null_laws[(32, 384)].values)
    # and its heads reopen the model the settings name
    assert back.head(0, 4).symmetric_energy == written.heads["symmetric_energy"].iloc[4]


def test_write_refuses_an_unknown_format(result, tmp_path) -> None:
    with pytest.raises(qk.QKEnergyError, match="^path: expected a file ending in"):
        result.write(tmp_path / "x.xlsx")


def test_a_read_analysis_reads_its_layer_table_only_when_used(written, tmp_path) -> None:
    path = tmp_path / "minilm.csv"
    written.write(path)
    (tmp_path / "minilm.layers.csv").write_text('layer,"unterminated\n0,1\n')  # a csv no parser reads
    back = qk.read(path)  # the heads alone: plotting them needs no layer table
    files = back.plot(tmp_path / "plots", formats=("png",), null=NullSpec(samples=SAMPLES))
    assert len(files) == 7 and all(p.suffix == ".png" for p in files)
    with pytest.raises(qk.QKEnergyError, match="minilm.layers.csv: not a valid CSV header"):
        _ = back.layers

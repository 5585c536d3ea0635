"""The comparison report: per-model table, reference comparison, figures and the atomic set of files.

The page in a real browser and the PNG / SVG export are tested in test_report_browser.py.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from qkenergy.analysis.comparison import baseline_comparison, model_info, model_summary, relative_depth
from qkenergy.base.errors import ArgumentError, QKEnergyError
from qkenergy.figures.survey_figures import report_figures
from qkenergy.report import page as survey_report
from qkenergy.report.page import build_report, files_directory
from tests.survey_data import TOY_HEADS, TOY_LAYERS

MINILM = "sentence-transformers/all-MiniLM-L6-v2"


@pytest.fixture()
def tables(survey_frames) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    return survey_frames


def test_model_summary_matches_the_heads(tables) -> None:
    heads, layers, models = tables
    summary = model_summary(heads, layers, models).set_index("model")
    assert list(summary.index) == [
        MINILM,
        "toy-llama@0",
        "toy-llama@100",
        "toy-llama@1000",
        "toy-llama@10000",
    ]
    row = summary.loc[MINILM]
    mine = heads[heads["model"] == MINILM]
    assert (row["architecture"], row["layers"], row["n"], row["N"], row["heads"]) == ("bert", 6, 32, 384, 72)
    assert row["stacks"] == ""
    assert row["s_median"] == pytest.approx(np.median(mine["symmetric_energy"]), rel=1e-12)
    q1, q3 = np.quantile(mine["symmetric_energy"], [0.25, 0.75])
    assert (row["s_q1"], row["s_q3"]) == pytest.approx((q1, q3), rel=1e-12)
    assert row["baseline_min"] == row["baseline_max"] == 385 / 768
    significant = mine["symmetric_energy_p_bh"] < 0.05
    assert row["share_above"] == pytest.approx(np.mean(significant & (mine["symmetric_energy_z"] > 0)))
    assert row["share_below"] == pytest.approx(np.mean(significant & (mine["symmetric_energy_z"] < 0)))
    shares = [row[f"share_{t}"] for t in ("II", "I+", "I-")]
    assert shares == pytest.approx([np.mean(mine["head_type"] == t) for t in ("II", "I+", "I-")])
    assert row["balance_min"] == mine["balance"].min()
    assert row["pairing_median"] == pytest.approx(np.median(mine["pairing"]))
    forms = layers[layers["model"] == MINILM]
    assert row["symmetry_score_median"] == pytest.approx(np.median(forms["symmetry_score"]))
    assert row["directionality_q3"] == pytest.approx(np.quantile(forms["directionality"], 0.75))
    # The toy run becomes more symmetric with training.
    toys = summary.loc[[f"toy-llama@{s}" for s in (0, 100, 1000, 10000)], "s_median"].to_numpy()
    assert np.all(np.diff(toys) > 0)
    # Without the per-layer forms the Saponati columns are undefined, not zero.
    assert model_summary(heads).loc[:, "symmetry_score_median"].isna().all()


def test_relative_depth(tables) -> None:
    heads, _, models = tables
    depth = relative_depth(heads, model_info(heads, models))
    toy = heads["model"] == "toy-llama@0"
    np.testing.assert_array_equal(depth[toy], heads.loc[toy, "layer"] / (TOY_LAYERS - 1))
    assert depth[heads["model"] == MINILM].max() == 1.0
    # Only layers 0 and 1 analysed of a 6-layer model: depth still counts the model's own layers.
    part = heads[(heads["model"] == MINILM) & (heads["layer"] < 2)]
    info = pd.DataFrame({"model": [MINILM], "n_layers": [6]})
    assert set(relative_depth(part, model_info(part, info))) == {0.0, 0.2}
    assert set(relative_depth(part)) == {0.0, 1.0}  # unknown layer count: the deepest analysed layer


def test_baseline_comparison(tables) -> None:
    heads, _, models = tables
    result = baseline_comparison(heads, "toy-llama@0", models)
    assert result.compared == ["toy-llama@100", "toy-llama@1000", "toy-llama@10000"]
    assert "architecture bert" in result.skipped[MINILM]
    diffs = result.differences
    assert len(diffs) == 3 * TOY_LAYERS * TOY_HEADS
    one = diffs[(diffs["model"] == "toy-llama@1000") & (diffs["layer"] == 2) & (diffs["head"] == 1)].iloc[0]

    def s(model: str) -> float:
        return heads[(heads["model"] == model) & (heads["layer"] == 2) & (heads["head"] == 1)][
            "symmetric_energy"
        ].iloc[0]

    assert one["difference"] == s("toy-llama@1000") - s("toy-llama@0")
    summary = result.summary().set_index("model")
    assert summary.loc["toy-llama@10000", "share_higher"] == 1.0
    # A model lacking one of the reference's heads cannot be compared head by head.
    fewer = heads.drop(heads.index[(heads["model"] == "toy-llama@100") & (heads["head"] == 3)])
    assert "other heads" in baseline_comparison(fewer, "toy-llama@0", models).skipped["toy-llama@100"]
    with pytest.raises(ArgumentError, match="^baseline: model 'nope' is not in the table"):
        baseline_comparison(heads, "nope")


def test_optional_figures_follow_the_columns(tables) -> None:
    heads, layers, models = tables
    plain = heads.drop(columns=["group", "step"])
    names = [f.name for f in report_figures(plain, model_summary(plain, layers, models), models=models)]
    assert names == [
        "symmetric_energy_by_model",
        "symmetric_energy_by_depth",
        "head_types",
        "head_types_per_layer",
        "symmetric_profiles",
        "type_spectra",
        "moments_O_E",
    ]
    full = report_figures(heads, model_summary(heads, layers, models), models=models)
    assert [f.name for f in full][-2:] == ["training_steps", "groups"]
    steps = next(f for f in full if f.name == "training_steps").figure
    # one line per layer, and the dotted baseline's legend entry
    assert {t.name for t in steps.data} == {f"layer {i}" for i in range(TOY_LAYERS)} | {
        "random baseline (N+1)/(2N)"
    }
    # Every head of every model is a hover-able marker in the first figure, with its statistics.
    by_model = full[0].figure
    assert sum(len(t.y) for t in by_model.data if t.type == "box") == len(heads)
    # ... and the legend names the dashed baseline and the null band (shapes have no legend entry).
    assert [t.name for t in by_model.data if t.showlegend is not False and t.type == "scatter"] == [
        "random baseline (N+1)/(2N)",
        "null law: mean ± 2 sd",
    ]
    assert by_model.data[0].customdata[0][0] == MINILM


def test_report_html_is_self_contained(tables, tmp_path: Path) -> None:
    heads, layers, models = tables
    out = tmp_path / "report.html"
    report = build_report(heads, layers, out, baseline="toy-llama@0", models=models, static=False)
    text = out.read_text(encoding="utf-8")
    assert text.startswith("<!DOCTYPE html>")
    for name in report.figures:
        assert f'id="figure-{name}"' in text
    assert "<script src" not in text and '<link rel="stylesheet"' not in text
    assert "toy-llama@10000" in text and "Compared with toy-llama@0" in text
    assert sorted(p.name for p in files_directory(out).iterdir()) == ["baseline_difference.csv", "models.csv"]
    assert pd.read_csv(files_directory(out) / "models.csv")["heads"].tolist() == [72, 12, 12, 12, 12]


def test_report_is_all_or_nothing(tables, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    heads, layers, models = tables
    out = tmp_path / "report.html"
    build_report(heads, layers, out, models=models, static=False)
    before = out.read_bytes(), sorted(p.name for p in files_directory(out).iterdir())

    def fail(*args: object, **kwargs: object) -> None:
        raise QKEnergyError("no browser")

    monkeypatch.setattr(survey_report, "_export_static", fail)
    with pytest.raises(QKEnergyError, match="no browser"):
        build_report(heads, layers, out, baseline="toy-llama@0", models=models)
    assert (out.read_bytes(), sorted(p.name for p in files_directory(out).iterdir())) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report.html", "report_files"]  # no staging left


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda h: h.iloc[:0], "no heads to report"),
        (lambda h: h.drop(columns=["symmetric_energy"]), "missing column"),
    ],
)
def test_bad_tables(tables, tmp_path: Path, change, message: str) -> None:
    with pytest.raises(QKEnergyError, match=message):
        build_report(change(tables[0]), None, tmp_path / "r.html", static=False)
    assert not any(tmp_path.iterdir())


def test_bad_target(tables, tmp_path: Path) -> None:
    with pytest.raises(QKEnergyError, match=r"r\.png: the report is an HTML file"):
        build_report(tables[0], None, tmp_path / "r.png", static=False)


# ----------------------------------------------------------------------------- command line


def _run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    from qkenergy import cli

    with pytest.raises(SystemExit) as exit_info:
        cli.main(list(args))
    out, err = capsys.readouterr()
    return int(exit_info.value.code or 0), out, err


@pytest.fixture()
def analyze_tables(tables, tmp_path: Path) -> tuple[Path, Path]:
    """Two tables as `analyze -o` writes them: MiniLM as csv with its settings and layer forms beside it,
    the toy run as parquet without settings (as older files are)."""
    from qkenergy.formats.tables import write_results, write_table

    heads, layers, _ = tables
    minilm, toy = heads["model"] == MINILM, heads["model"].str.startswith("toy")
    settings = {"model": MINILM, "model_type": "bert", "n_layers": 6, "per_layer": True}
    forms = layers[layers["model"] == MINILM]
    write_results(
        heads[minilm].drop(columns=["group", "step"]),
        tmp_path / "minilm.csv",
        settings=settings,
        layers=forms,
    )
    write_table(heads[toy], tmp_path / "toy.parquet")
    return tmp_path / "minilm.csv", tmp_path / "toy.parquet"


def test_cli_report_from_tables(capsys, tables, analyze_tables, tmp_path: Path) -> None:
    minilm, toy = analyze_tables
    out = tmp_path / "out" / "r.html"
    code, stdout, err = _run(
        capsys, "report", str(minilm), str(toy), "-o", str(out), "--baseline", "toy-llama@0", "--no-static"
    )
    assert (code, err) == (0, "")
    assert f"wrote {out} (5 models, 10 figures)" in stdout
    summary = pd.read_csv(files_directory(out) / "models.csv").set_index("model")
    forms = tables[1][tables[1]["model"] == MINILM]
    assert summary.loc[MINILM, "symmetry_score_median"] == pytest.approx(np.median(forms["symmetry_score"]))
    assert summary.loc[MINILM, "architecture"] == "bert"  # from the settings recorded with the table
    assert np.isnan(summary.loc["toy-llama@0", "symmetry_score_median"])  # no layer forms for the toy table


@pytest.mark.parametrize(
    ("args", "code", "needle"),
    [
        (["-o", "r.png"], 2, "expected a file ending in .html"),
        (
            ["--baseline", "nope", "--no-static", "-o", "r.html"],
            2,
            "--baseline: model 'nope' is not in the table",
        ),
        (["DIR", "-o", "r.html"], 2, "a survey directory is reported on its own"),
        (["AGAIN", "-o", "r.html"], 1, "is already in"),
    ],
)
def test_cli_report_errors(
    capsys, analyze_tables, tmp_path: Path, args: list[str], code: int, needle: str
) -> None:
    minilm, _ = analyze_tables
    extra = {"DIR": str(tmp_path), "AGAIN": str(minilm)}
    args = [extra.get(a, str(tmp_path / a) if a.startswith("r.") else a) for a in args]
    status, _, err = _run(capsys, "report", str(minilm), *args)
    assert status == code and needle in err and err.count("\n") == 1, err
    assert not (tmp_path / "r.html").exists()


def test_cli_report_of_a_survey_directory(capsys, tables, tmp_path: Path) -> None:
    """OUT as `qkenergy survey` leaves it: one Parquet file per (model, layer) unit and survey.json."""
    import json

    from qkenergy.surveys.dataset import write_unit
    from qkenergy.surveys.manifest import model_name

    heads, layers, models = tables
    out = tmp_path / "OUT"
    for table, frame in (("heads", heads), ("layers", layers)):
        frame = frame.merge(
            heads.groupby("model")[["group", "step"]].first(), on="model", suffixes=("_x", "")
        )
        for (model, layer), unit in frame.groupby(["model", "layer"]):
            step = unit["step"].iloc[0]
            extra = {"group": unit["group"].iloc[0], "step": None if np.isnan(step) else int(step)}
            write_unit(out, table, model_name(model), int(layer), unit.drop(columns=["group", "step"]), extra)
    record = {
        "settings": {"samples": 300, "seed": 0},
        "models": [
            {"name": model_name(m), "model_type": arch, "n_layers": n}
            for m, arch, n in models[["model", "architecture", "n_layers"]].itertuples(index=False)
        ],
    }
    (out / "survey.json").write_text(json.dumps(record))
    code, stdout, err = _run(
        capsys, "report", str(out), "-o", str(out / "report.html"), "--baseline", "toy-llama_0", "--no-static"
    )
    assert (code, err) == (0, ""), err
    summary = pd.read_csv(files_directory(out / "report.html") / "models.csv").set_index("model")
    assert summary.loc["sentence-transformers--all-MiniLM-L6-v2", "architecture"] == "bert"
    assert (
        summary.loc["toy-llama_1000", "step"] == 1000 and summary.loc["toy-llama_1000", "group"] == "toy run"
    )
    expected = model_summary(heads, layers, models).set_index("model")
    # BH recomputed per model by load_survey: the same shares as the tables analyze wrote.
    assert summary.loc["toy-llama_100", "share_above"] == pytest.approx(
        expected.loc["toy-llama@100", "share_above"]
    )
    assert summary.loc["toy-llama_100", "directionality_median"] == pytest.approx(
        expected.loc["toy-llama@100", "directionality_median"]
    )
    assert "survey.json" not in stdout and (out / "report.html").is_file()


def test_models_with_several_stacks(tables) -> None:
    """An encoder-decoder's heads carry a stack name: counted per stack, named in the hover text."""
    heads, _, models = tables
    minilm = heads[heads["model"] == MINILM]
    two = pd.concat([minilm.assign(stack="encoder"), minilm.assign(stack="decoder")], ignore_index=True)
    both = pd.concat([two, heads[heads["model"] != MINILM].assign(stack="")], ignore_index=True)
    summary = model_summary(both, None, models).set_index("model")
    assert summary.loc[MINILM, "stacks"] == "decoder, encoder" and summary.loc[MINILM, "layers"] == 12
    assert summary.loc["toy-llama@0", "stacks"] == ""
    figures = report_figures(both, summary.reset_index(), models=models)
    hover = {row[1] for trace in figures[0].figure.data if trace.type == "box" for row in trace.customdata}
    assert "layer 5, head 11 (decoder)" in hover and "layer 2, head 3" in hover


def test_a_survey_of_trainer_checkpoints_reads_their_loss_curves(tables, tmp_path: Path) -> None:
    """A survey's record names each checkpoint's path, group and step: the report reads the losses there."""
    import json

    from qkenergy.report.page import read_inputs
    from qkenergy.surveys.dataset import write_unit

    heads, _, _ = tables
    out, checkpoints = tmp_path / "OUT", tmp_path / "run"
    unit = heads[heads["model"] == heads["model"].iloc[0]]
    write_unit(
        out, "heads", "tiny", int(unit["layer"].iloc[0]), unit[unit["layer"] == unit["layer"].iloc[0]], {}
    )
    models = []
    for step in (10, 20):
        folder = checkpoints / f"checkpoint-{step}"
        folder.mkdir(parents=True)
        history = [{"step": s, "loss": 5.0 / s} for s in range(1, step + 1)]
        (folder / "trainer_state.json").write_text(json.dumps({"log_history": history}))
        models.append({"name": f"tiny-{step}", "path": str(folder), "group": "run", "step": step})
    (out / "survey.json").write_text(json.dumps({"settings": {}, "models": models}))
    losses = read_inputs([out]).losses
    assert losses is not None  # the latest checkpoint's history: steps 1 to 20
    assert list(losses["run"].unique()) == ["run"] and list(losses["step"]) == list(range(1, 21))

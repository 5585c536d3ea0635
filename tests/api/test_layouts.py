"""qk.layouts() -> Layouts, qk.coverage() -> Coverage: what `qkenergy layouts [--coverage]` prints."""

from __future__ import annotations

import dataclasses
import json
import sys

import pytest

import qkenergy as qk
from qkenergy import cli
from qkenergy.weights.coverage import COVERAGE_COLUMNS, coverage_line
from qkenergy.weights.families import FAMILIES, LAYOUT_COLUMNS, describe_families, supported_model_types


def _cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["layouts", *args])
    out, err = capsys.readouterr()
    return int(exit_info.value.code or 0), out, err


def test_layouts_hold_the_families_rows() -> None:
    result = qk.layouts()
    assert result.records() == describe_families() and result.columns == LAYOUT_COLUMNS
    assert result.model_types == supported_model_types() and len(result) == len(FAMILIES)
    assert result.table.columns.tolist() == list(LAYOUT_COLUMNS) and len(result.table) == len(FAMILIES)
    assert json.loads(result.to_json()) == result.records()
    result.records()[0]["model_type"] = "changed"  # records are copies: the object stays as made
    assert result.model_types == supported_model_types()
    with pytest.raises(dataclasses.FrozenInstanceError):
        result.rows = ()  # type: ignore[misc]
    one = qk.layouts({"t5": FAMILIES["t5"]})
    assert one.model_types == ["t5"] and "transformers T5ForConditionalGeneration" in one._repr_html_()


def test_coverage_of_a_given_list() -> None:
    result = qk.coverage(["mamba", "llama", "no_such_type", "llama"])
    assert [(r["model_type"], r["status"]) for r in result] == [
        ("llama", "supported"),
        ("mamba", "not bilinear"),
        ("no_such_type", "not yet supported"),
    ]
    assert result.columns == COVERAGE_COLUMNS and result.where == "the given list"
    assert result.counts == {"supported": 1, "not bilinear": 1, "not yet supported": 1}
    assert result.line == coverage_line(result.rows, "the given list")
    assert result.to_markdown().startswith(result.line + "\n\n| model_type | status | detail |")


@pytest.mark.parametrize("args", [(), ("--json",), ("--markdown",)])
def test_the_command_prints_the_objects_text(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, args: tuple[str, ...]
) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    for flags, result in (((), qk.layouts()), (("--coverage",), qk.coverage())):
        code, out, _ = _cli(capsys, *flags, *args)
        assert code == 0
        expected = {(): result.summary(width=80), ("--json",): result.to_json() + "\n"}
        assert out == expected.get(args, result.to_markdown() + "\n")  # type: ignore[attr-defined]


def test_coverage_without_transformers(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "transformers", None)  # import transformers raises ImportError
    with pytest.raises(qk.QKEnergyError, match="^model_types: none given") as error:
        qk.coverage()
    assert error.value.parameter == "model_types"
    assert qk.coverage(["llama"]).counts["supported"] == 1  # a given list needs no transformers
    code, out, err = _cli(capsys, "--coverage")
    assert code == 1 and not out
    assert err == (
        "qkenergy: error: --coverage lists the model types of the installed transformers: pip install transformers\n"
    )


def test_a_name_filters_the_rows(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    # `qkenergy layouts llama`: by model_type or model names, ignoring case (issue 39).
    found = qk.layouts(name="LLaMA")
    assert {"llama", "llama4", "diffllama"} <= set(found.model_types)
    assert all("llama" in (r["model_type"] + r["models"]).lower() for r in found)
    assert "bert" in qk.layouts(name="MiniLM").model_types  # by a model name only
    assert qk.coverage(["llama", "mamba", "mllama"], name="llama").model_types == ["llama", "mllama"]
    with pytest.raises(qk.QKEnergyError, match="^no model type matches 'nope'"):
        qk.layouts(name="nope")
    monkeypatch.setenv("COLUMNS", "80")
    code, out, _ = _cli(capsys, "llama")
    assert code == 0 and out == found.summary(width=80)
    code, out, _ = _cli(capsys, "llama", "--json")
    assert json.loads(out) == found.records()
    code, out, err = _cli(capsys, "nope")
    assert code == 1 and out == "" and err.startswith("qkenergy: error: no model type matches 'nope'")


def test_the_text_table_fits_80_columns_without_trailing_spaces() -> None:
    # Piped `qkenergy layouts` lines were 289 characters (issue 39): five columns, wrapped to fit,
    # nothing cut; the variants and the proving class stay in --json and --markdown.
    result = qk.layouts()
    lines = result.summary(width=80).splitlines()
    assert max(map(len, lines)) <= 80 and not any(line.endswith(" ") for line in lines)
    assert lines[1].split() == list(result.shown or ()) and lines[-1] == result.note
    assert all(line.split()[0] in result.model_types for line in lines[2:-1] if line[:1] != " ")
    assert {line.split()[0] for line in lines[2:-1] if line[:1] != " "} == set(result.model_types)
    coverage = qk.coverage(["llama", "mamba"]).summary(width=80).splitlines()
    assert max(map(len, coverage)) <= 80

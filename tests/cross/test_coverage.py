"""`qkenergy layouts --coverage`: every model_type of the installed transformers, classified.

The whole table in docs/families.md and the README's count line are the command's output;
these tests keep them equal (regenerate both with `qkenergy layouts --coverage --markdown`).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from qkenergy.cli import cli
from qkenergy.weights.coverage import NOT_BILINEAR, STATUSES, coverage, coverage_counts, coverage_line
from qkenergy.weights.families import FAMILIES

transformers = pytest.importorskip("transformers")

ROOT = Path(__file__).resolve().parents[2]
DOCS_START, DOCS_END = (
    "<!-- qkenergy layouts --coverage: start -->\n",
    "<!-- qkenergy layouts --coverage: end -->",
)
README_START, README_END = "<!-- qkenergy coverage: start -->", "<!-- qkenergy coverage: end -->"


def _installed() -> list[str]:
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES

    return sorted(CONFIG_MAPPING_NAMES)


def _command(*args: str) -> str:
    result = CliRunner().invoke(cli, ["layouts", "--coverage", *args])
    assert result.exit_code == 0, result.output
    return result.output


def test_every_installed_type_is_classified_once() -> None:
    out = json.loads(_command("--json"))
    rows = out["model_types"]
    assert [r["model_type"] for r in rows] == _installed()
    assert {r["status"] for r in rows} <= set(STATUSES)
    counts = coverage_counts(rows)
    assert counts["supported"] == len(FAMILIES)  # every family is a type of this transformers
    assert out["summary"] == coverage_line(rows, f"transformers {transformers.__version__}")
    supported = {r["model_type"]: r["detail"] for r in rows if r["status"] == "supported"}
    assert all(supported[t] == f"proven by transformers {FAMILIES[t].proof}" for t in FAMILIES)


def test_not_bilinear_is_data_about_real_types() -> None:
    """Each reason names a model_type of this transformers, none of them a supported one."""
    assert set(NOT_BILINEAR) <= set(_installed())
    assert not set(NOT_BILINEAR) & set(FAMILIES)
    assert all(reason.strip() for reason in NOT_BILINEAR.values())
    rows = coverage(["mamba", "llama", "no_such_type"])
    assert [r["status"] for r in rows] == ["supported", "not bilinear", "not yet supported"]


def test_docs_table_and_readme_line_are_the_commands_output() -> None:
    out = _command("--markdown")
    docs = (ROOT / "docs" / "families.md").read_text(encoding="utf-8")
    assert DOCS_START in docs and DOCS_END in docs
    assert docs.split(DOCS_START, 1)[1].split(DOCS_END, 1)[0] == out
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert README_START in readme and README_END in readme
    line = out.split("\n", 1)[0]
    assert readme.split(README_START, 1)[1].split(README_END, 1)[0] == line

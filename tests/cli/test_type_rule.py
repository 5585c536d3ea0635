"""--type-rule, --imbalance-cut, --edge-cut: the head types of a run and the settings that record them."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from qkenergy.analysis.type_rule import TypeRule
from qkenergy.base.errors import QKEnergyError
from qkenergy.surveys import engine
from tests.cli.test_commands import run


def test_analyze_records_the_rule_and_names_types_by_it(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    tables = {}
    for rule in ("imbalance", "radius"):
        out = tmp_path / f"{rule}.csv"
        code, _, err = run(
            capsys, "analyze", "--no-null", "--quiet", "--layers", "1,3", "--type-rule", rule, "-o", str(out)
        )
        assert (code, err) == (0, "")
        settings = json.loads(Path(f"{out}.meta.json").read_text())["settings"]
        assert (
            settings["type_rule"],
            settings["imbalance_cut"],
            settings["edge_cut"],
            settings["radius"],
        ) == (
            rule,
            0.2,
            0.01,
            0.02,
        )
        tables[rule] = pd.read_csv(out).set_index(["layer", "head"])["head_type"]
    changed = tables["imbalance"] != tables["radius"]
    assert sorted(tables["imbalance"].index[changed]) == [
        (1, 2),
        (1, 7),
        (3, 10),
    ]  # as docs/mathematics.md says
    # the cuts as options: an edge of 0.015 takes layer 3 head 10 (c + d = 0.014) back to Type II
    out = tmp_path / "edge.csv"
    code, _, _ = run(
        capsys, "analyze", "--no-null", "--quiet", "--layers", "3", "--edge-cut", "0.015", "-o", str(out)
    )
    assert code == 0 and pd.read_csv(out).set_index("head").loc[10, "head_type"] == "II"
    assert json.loads(Path(f"{out}.meta.json").read_text())["settings"]["edge_cut"] == 0.015


def test_bad_rule_options(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code, _, err = run(capsys, "analyze", "--no-null", "--type-rule", "nope")
    assert code == 2 and "--type-rule" in err
    code, _, err = run(capsys, "analyze", "--no-null", "--imbalance-cut", "1.5")
    assert code == 2 and "--imbalance-cut" in err
    # the survey refuses a bad rule before reading its manifest
    with pytest.raises(QKEnergyError, match="type_rule must be one of imbalance, radius"):
        engine.survey(tmp_path / "missing.toml", tmp_path / "out", types=TypeRule("nope"))

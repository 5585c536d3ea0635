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


def test_radius_leaves_the_null_cache_alone(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """--radius only names head types: a run with another radius reads the same null-law files."""
    cache = tmp_path / "cache"
    listings = []
    for radius in ("0.02", "0.05"):
        out = tmp_path / f"r{radius}.csv"
        args = ["--samples", "50", "--layers", "0", "--type-rule", "radius", "--radius", radius]
        code, _, _ = run(capsys, "analyze", "--quiet", *args, "--cache-dir", str(cache), "-o", str(out))
        assert code == 0
        listings.append(sorted((p.name, p.stat().st_mtime_ns) for p in cache.iterdir()))
    assert listings[0] == listings[1] and len(listings[0]) == 1  # one law, written once and read back
    settings = json.loads(Path(f"{tmp_path / 'r0.05.csv'}.meta.json").read_text())["settings"]
    assert settings["radius"] == 0.05

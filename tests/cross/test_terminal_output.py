"""Output readable at 80 columns and in a pipe; the summary names the heads worth a look."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from rich.console import Console

from qkenergy import cli
from qkenergy.analysis.analyze import analyze_model
from qkenergy.analysis.summary import notable_heads, print_summary
from qkenergy.math import verify

BOX = set("─│┃━┏┓┗┛┡┩╇┳┻┼╋└┘┌┐")


def _plain_80(text: str) -> None:
    for line in text.splitlines():
        assert len(line) <= 80, line
        assert not BOX & set(line), line


def test_python_m_qkenergy_piped_at_80_columns(tmp_path: Path) -> None:
    """`python -m qkenergy` runs the CLI; piped output is plain text and no number is cut."""
    env = {**os.environ, "COLUMNS": "80", "XDG_CACHE_HOME": str(tmp_path)}
    done = subprocess.run(
        [sys.executable, "-m", "qkenergy", "baseline", "--n", "32", "--N", "384", "--samples", "200"],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert done.returncode == 0, done.stderr
    _plain_80(done.stdout)
    assert "…" not in done.stdout
    assert "0.501302" in done.stdout  # the exact mean (N+1)/(2N), every digit shown


def test_verify_at_80_columns_is_one_line_per_check(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(verify, "CHECKS", (verify.check_lemma5, verify.check_lemma6))
    monkeypatch.setenv("COLUMNS", "80")
    with pytest.raises(SystemExit):
        cli.main(["verify", "--samples", "100"])
    out = capsys.readouterr().out
    _plain_80(out)
    checks = [line for line in out.splitlines() if line.startswith(("pass ", "FAIL "))]
    assert len(checks) >= 8 and len(out.splitlines()) <= len(checks) + 8
    assert f"{len(checks)} of {len(checks)} checks passed" in out


@pytest.fixture(scope="module")
def two_layers(tmp_path_factory: pytest.TempPathFactory):
    cache = tmp_path_factory.getbasetemp() / "qkenergy-null-cache"  # shared with the other modules
    return analyze_model(layers=[2, 4], samples=300, seed=0, cache_dir=cache)


def test_summary_names_the_most_symmetric_and_most_skew_heads(two_layers) -> None:
    symmetric, skew = notable_heads(two_layers.heads, top=3)
    s = two_layers.heads["symmetric_energy"]
    assert symmetric["symmetric_energy"].tolist() == sorted(s, reverse=True)[:3]
    assert skew["symmetric_energy"].tolist() == sorted(s)[:3]
    console = Console(record=True, width=80, force_terminal=False)
    print_summary(two_layers, console, top=3)
    text = console.export_text()
    _plain_80(text)
    lines = text.splitlines()
    start = lines.index(next(line for line in lines if line.startswith("Heads worth a look")))
    rows = lines[start + 2 : start + 8]
    # MiniLM: layer 2 head 9 is the most symmetric head, layer 4 head 9 the most skew
    assert rows[0].split()[:5] == ["most", "symmetric", "2", "9", "0.8671"]
    assert rows[3].split()[:5] == ["most", "skew", "4", "9", "0.3938"]
    console = Console(record=True, width=80)
    print_summary(two_layers, console, top=0)
    assert "Heads worth a look" not in console.export_text()

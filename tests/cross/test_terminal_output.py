"""Output readable at 80 columns and in a pipe; the summary names the heads worth a look."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
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


def _cells(lines: list[str], header: str, column: str, following: str, *, key: str) -> list[str]:
    """The text of ``column`` in each row of a plain table (a row goes on over the lines where
    the ``key`` column is blank), its folded and wrapped pieces joined without spaces."""
    start, end = header.index(column), header.index(following)
    at = header.index(key)
    rows: list[str] = []
    for line in lines:
        if line[at : at + len(key)].strip():
            rows.append("")
        rows[-1] += "".join(line[start:end].split())
    return rows


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
    """In a pipe every check is one whole line (nothing cut at the width a terminal would have)."""
    monkeypatch.setattr(verify, "CHECKS", (verify.check_lemma5, verify.check_lemma6))
    monkeypatch.setenv("COLUMNS", "80")
    with pytest.raises(SystemExit):
        cli.main(["verify", "--samples", "100"])
    out = capsys.readouterr().out
    assert not BOX & set(out) and "…" not in out
    checks = [line for line in out.splitlines() if line.startswith(("pass  ", "FAIL  "))]
    assert len(checks) >= 8 and len(out.splitlines()) <= len(checks) + 8
    assert f"{len(checks)} of {len(checks)} checks passed" in out
    rows = verify.check_lemma5(100, 0)
    assert [line.split("  ")[-1] for line in checks[: len(rows)]] == [
        " ".join(r.setting.split()) for r in rows
    ]


def test_layouts_in_a_pipe_is_plain_and_whole(capsys: pytest.CaptureFixture[str], monkeypatch) -> None:
    from qkenergy.weights.families import describe_families

    monkeypatch.setenv("COLUMNS", "80")
    with pytest.raises(SystemExit):
        cli.main(["layouts"])
    out = capsys.readouterr().out
    assert not BOX & set(out) and "…" not in out
    _plain_80(out)  # the lines were 289 characters (issue 39): wrapped to fit, nothing cut
    assert not any(line.endswith(" ") for line in out.splitlines())
    lines = out.splitlines()
    rows = describe_families()
    assert [line.split()[0] for line in lines[2:-1] if line[:1] != " "] == [row["model_type"] for row in rows]
    assert _cells(lines[2:-1], lines[1], "models", "stacks", key="model_type") == [
        "".join(row["models"].split()) for row in rows
    ]


def test_survey_summary_in_a_pipe_is_plain_and_whole(tmp_path: Path) -> None:
    import io

    import pandas as pd

    from qkenergy.surveys.engine import SurveyRun
    from qkenergy.surveys.summary import print_survey

    names = ["minilm", "minilm-folded-with-a-name-longer-than-a-terminal-column-allows"]
    heads = pd.DataFrame(
        {
            "model": [m for m in names for _ in range(4)],
            "layer": [0, 0, 1, 1] * 2,
            "head": [0, 1] * 4,
            "n": 32,
            "N": 384,
            "symmetric_energy": np.linspace(0.45, 0.6, 8),
            "symmetric_energy_z": np.linspace(-3, 50, 8),
            "symmetric_energy_p_bh": [0.01, 0.5, 1e-9, 1e-9] * 2,
        }
    )
    buffer = io.StringIO()
    print_survey(SurveyRun(out=tmp_path, run=1, units=4, computed=4), heads, Console(file=buffer, width=80))
    out = buffer.getvalue()
    assert not BOX & set(out) and "…" not in out
    _plain_80(out)
    lines = out.splitlines()  # a long name broken over lines, not cut
    end = next(i for i, line in enumerate(lines) if " units: " in line)
    assert _cells(lines[2:end], lines[1], "model", "layers", key="layers") == names


@pytest.fixture(scope="module")
def two_layers(tmp_path_factory: pytest.TempPathFactory):
    cache = tmp_path_factory.getbasetemp() / "qkenergy-null-cache"  # shared with the other modules
    return analyze_model(layers=[2, 4], samples=300, seed=0, cache_dir=cache)


def test_summary_names_the_most_symmetric_and_most_skew_heads(two_layers) -> None:
    symmetric, skew = notable_heads(two_layers.heads, top=3)
    s = two_layers.heads["symmetric_energy"]
    base = 385 / 768  # (N+1)/(2N): a head above it is never listed as skew, nor one below as symmetric
    assert symmetric["symmetric_energy"].tolist() == sorted(s[s > base], reverse=True)[:3]
    assert skew["symmetric_energy"].tolist() == sorted(s[s < base])[:3]
    assert len(skew) == 2  # layers 2 and 4 of MiniLM: only heads 4.9 and 4.7 are below the baseline
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
    assert rows[4].split()[:3] == ["4", "7", "0.4976"]
    significant = int((skew["symmetric_energy_p_bh"] < 0.05).sum())
    assert (
        f"Most skew: the 2 heads below the random baseline, {significant} of them significantly more skew"
        in " ".join(text.split())
    )
    assert "24 heads in 2 layers" in text
    console = Console(record=True, width=80)
    print_summary(two_layers, console, top=0)
    assert "Heads worth a look" not in console.export_text()


def test_counts_agree_in_number() -> None:
    from qkenergy.analysis.summary import _layer_count
    from qkenergy.base.formatting import plural

    assert (plural(1, "head"), plural(12, "head"), plural(1, "model")) == ("1 head", "12 heads", "1 model")
    one = {"layer": np.zeros(12, dtype=np.int64)}
    assert _layer_count(one) == "1 layer"
    stacks = {
        "layer": np.array([0, 1, 0]),
        "stack": np.array(["encoder", "encoder", "decoder"], dtype=object),
    }
    assert _layer_count(stacks) == "3 layers of 2 stacks"


def test_analyze_in_a_pipe_has_no_trailing_spaces_and_states_its_p_floor(
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """Issue 39: piped summaries carried trailing spaces (padded titles and cells, rich's wrapped
    sentences), and p-values read 2.227e-311 or <5e-324: now two digits above a floor the summary states."""
    from qkenergy.math.tails import resolved_floor

    cache = tmp_path_factory.getbasetemp() / "qkenergy-null-cache"
    monkeypatch.setenv("COLUMNS", "80")
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["analyze", "--layers", "2,4", "--samples", "300", "--cache-dir", str(cache)])
    out = capsys.readouterr().out
    assert exit_info.value.code in (0, None)
    _plain_80(out)
    assert not any(line.endswith(" ") for line in out.splitlines())
    floor = f"<{resolved_floor(300):.0e}"
    assert floor == "<1e-12" and f"  {floor}  " in out and f"printed as {floor}" in " ".join(out.split())
    assert "e-3" not in out.replace(floor, "")  # no digits beyond the floor (no 2.227e-311, no <5e-324)


def test_the_survey_line_counts_one_unit_in_the_singular(tmp_path: Path) -> None:
    import io

    import pandas as pd

    from qkenergy.surveys.engine import SurveyRun
    from qkenergy.surveys.summary import print_survey

    heads = pd.DataFrame(
        {"model": ["m"], "layer": [0], "head": [0], "n": 8, "N": 64, "symmetric_energy": [0.5]}
    )
    heads["symmetric_energy_z"], heads["symmetric_energy_p_bh"] = 0.1, 0.9
    buffer = io.StringIO()
    print_survey(SurveyRun(out=tmp_path, run=1, units=1, computed=1), heads, Console(file=buffer, width=80))
    assert "1 unit: 1 computed" in buffer.getvalue()

"""qk.verify() -> Verification: the checks of `qkenergy verify` as one frozen object."""

from __future__ import annotations

import dataclasses
import json

import pytest

import qkenergy as qk
from qkenergy import cli
from qkenergy.api.verification import COLUMNS, Verification
from qkenergy.math import verify as checks


def _broken(samples: int, seed: int) -> list[checks.Check]:
    return [checks.Check("Broken", "a deliberately failing row", 1.0, 2.0, 0.01, False, "tolerance 5 SE")]


def _cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["verify", *args])
    return int(exit_info.value.code or 0), capsys.readouterr().out


def test_the_checks_their_verdict_and_their_records(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(checks, "CHECKS", (checks.check_lemma5, _broken))
    result = qk.verify(samples=100, seed=2)
    assert isinstance(result, Verification) and (result.samples, result.seed) == (100, 2)
    lemma5 = checks.check_lemma5(100, 2)
    assert list(result) == [*lemma5, *_broken(100, 2)] and len(result) == len(lemma5) + 1
    assert not result.passed and [c.claim for c in result.failed] == ["Broken"]
    assert result.verdict() == f"{len(lemma5)} of {len(result)} checks passed, 1 FAILED"
    records = result.records()
    assert records[-1] == {
        "claim": "Broken",
        "setting": "a deliberately failing row",
        "theory": 1.0,
        "estimate": 2.0,
        "stderr": 0.01,
        "z": pytest.approx(100.0),
        "error": 1.0,
        "passed": False,
        "note": "tolerance 5 SE",
    }
    assert json.loads(result.to_json()) == records
    table = result.table
    assert table.columns.tolist() == list(COLUMNS) and len(table) == len(result)
    assert table["passed"].tolist() == [c.passed for c in result]
    html = result._repr_html_()
    assert "1 FAILED" in html and "Broken" in html and "Lemma 5" not in html  # only the failed rows
    with pytest.raises(dataclasses.FrozenInstanceError):
        result.seed = 3  # type: ignore[misc]


@pytest.mark.parametrize("width", [80, 200])
def test_the_command_prints_the_objects_text(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, width: int
) -> None:
    monkeypatch.setattr(checks, "CHECKS", (checks.check_lemma5, checks.check_lemma6, _broken))
    monkeypatch.setenv("COLUMNS", str(width))
    result = qk.verify(samples=100)
    code, out = _cli(capsys, "--samples", "100")
    assert code == 1 and out == result.summary(width=width)
    assert out.splitlines()[2].startswith("pass  Lemma 5") is (width < 120)  # narrow: one line per check
    code, out = _cli(capsys, "--samples", "100", "--json")
    assert code == 1 and out == result.to_json() + "\n"


def test_default_samples_and_errors_name_the_parameter(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[tuple[int, int]] = []

    def record(samples: int, seed: int) -> list[checks.Check]:
        seen.append((samples, seed))
        return []

    monkeypatch.setattr(checks, "CHECKS", (record,))
    assert qk.verify().samples == checks.DEFAULT_SAMPLES and seen == [(checks.DEFAULT_SAMPLES, 0)]
    with pytest.raises(qk.QKEnergyError, match="^samples") as error:
        qk.verify(samples=1)
    assert error.value.parameter == "samples"

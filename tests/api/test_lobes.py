"""qk.lobes() -> LobeDeparture: Lemma 6's departure curve of `qkenergy lobes` as one frozen object."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

import qkenergy as qk
from qkenergy import cli
from qkenergy.api import lobes as api_lobes
from qkenergy.cli import lobes as command
from qkenergy.cli.params import IntListType
from qkenergy.math.lobes import lobe_departure_curve


def _cli(capsys: pytest.CaptureFixture[str], *args: str) -> str:
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["lobes", *args])
    assert not exit_info.value.code
    return capsys.readouterr().out


def test_the_curve_is_the_math_modules() -> None:
    result = qk.lobes("lognormal:0.5", rho=2.0, ns=[5, 50, 500], seed=4, repeats=6)
    curve = lobe_departure_curve("lognormal:0.5", 2.0, [5, 50, 500], seed=4, repeats=6)
    for name in ("ns", "mean", "stderr", "median", "values"):
        np.testing.assert_array_equal(getattr(result, name), getattr(curve, name))
    assert (result.law, result.rho, result.repeats, result.seed) == (curve.law, 2.0, 6, 4)
    assert result.finite_second_moment
    assert result.table.to_dict("list") == {
        "n": [5, 50, 500],
        "mean": curve.mean.tolist(),
        "stderr": curve.stderr.tolist(),
        "median": curve.median.tolist(),
    }
    assert json.loads(result.to_json()) == result.records() == result.table.to_dict("records")
    with pytest.raises(dataclasses.FrozenInstanceError):
        result.finite_second_moment = False  # type: ignore[misc]


def test_a_heavy_tail_is_the_contrast_case() -> None:
    result = qk.lobes("pareto:1.5", ns=[10, 100], repeats=3)
    assert not result.finite_second_moment
    assert "infinite second moment: Lemma 6 does not apply" in result.note()
    assert "pareto" in result._repr_html_()


def test_the_command_prints_the_objects_text(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    result = qk.lobes("half_normal", rho=0.25, ns=[10, 1000], seed=1, repeats=4)
    args = ["--law", "half_normal", "--rho", "0.25", "--n", "10,1000", "--seed", "1", "--repeats", "4"]
    assert _cli(capsys, *args) == result.summary(width=80)
    assert _cli(capsys, *args, "--json") == result.to_json() + "\n"


def test_the_commands_defaults_are_the_apis() -> None:
    lengths = IntListType().convert(command.DEFAULT_LOBE_LENGTHS, None, None)
    assert tuple(lengths) == api_lobes.DEFAULT_LOBE_LENGTHS
    assert command.DEFAULT_LOBE_REPEATS == api_lobes.DEFAULT_LOBE_REPEATS
    result = qk.lobes(ns=[10], repeats=2)
    assert (result.law, result.rho) == ("exponential", 0.5)


def test_errors_name_the_parameter() -> None:
    with pytest.raises(qk.QKEnergyError, match="^rho") as error:
        qk.lobes(rho=0)
    assert error.value.parameter == "rho"
    with pytest.raises(qk.QKEnergyError, match="cauchy"):
        qk.lobes("cauchy")

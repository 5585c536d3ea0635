"""qk.baseline -> Baseline: the random baseline of a head shape, as `qkenergy baseline` prints it."""

from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner

import qkenergy as qk
from qkenergy.cli import cli


def test_a_gaussian_baseline_is_exact_where_proposition_6_says() -> None:
    b = qk.baseline(8, 32, samples=400, seed=1)
    assert b.exact and (b.n, b.N, b.dist) == (8, 32, "gaussian")
    assert b.ratio_of_expectations == b.expectation_of_ratio == pytest.approx(33 / 64, abs=0)
    energy = b.records()["symmetric_energy"]
    assert energy["stderr"] == 0  # the exact mean, not the sample's
    # the sampled mean is within 5 standard errors of the exact one (fixed seed)
    assert abs(energy["sample_mean"] - 33 / 64) < 5 * energy["sample_stderr"]
    table = b.table
    assert list(table.index) == ["symmetric_energy", "pairing", "lobe_departure"]
    assert np.all(np.diff(table.loc["pairing", ["quantile 0.01", "quantile 0.5", "quantile 0.99"]]) > 0)


def test_another_entry_law_reports_both_expectations() -> None:
    b = qk.baseline(4, 16, dist="rademacher", samples=300, seed=2)
    energy = b.records()["symmetric_energy"]
    assert not b.exact and "Monte Carlo" in b.records()["sampler"]
    # Corollary 2: the ratio of expectations is (N+1)/(2N) for every law; its estimate agrees within 5 SE
    assert (
        abs(energy["ratio_of_expectations_estimate"] - 17 / 32)
        < 5 * energy["ratio_of_expectations_estimate_stderr"]
    )
    assert "Monte Carlo; z =" in b.summary()


@pytest.mark.parametrize("args", [["--n", "4", "--N", "16"], ["--n", "4", "--N", "16", "--dist", "uniform"]])
def test_the_command_prints_the_objects_text_and_json(args: list[str]) -> None:
    b = qk.baseline(4, 16, dist=args[-1] if "--dist" in args else "gaussian", samples=200, seed=0)
    runner = CliRunner()
    text = runner.invoke(cli, ["baseline", *args, "--samples", "200"], env={"COLUMNS": "80"})
    assert text.exit_code == 0, text.output
    assert text.output == b.summary(width=80)
    as_json = runner.invoke(cli, ["baseline", *args, "--samples", "200", "--json"])
    assert json.loads(as_json.output) == json.loads(b.to_json())
    assert "<table" in b._repr_html_()


def test_bad_shapes_name_the_parameter() -> None:
    with pytest.raises(qk.QKEnergyError, match="n <= N") as error:
        qk.baseline(40, 32)
    assert error.value.parameter == "n"

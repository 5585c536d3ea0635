"""RunConfig: one run's options, checked once; the keywords declared once (AnalyzeOptions)."""

from __future__ import annotations

import dataclasses
import inspect

import pytest

import qkenergy as qk
from qkenergy.analysis.analyze import analyze_model
from qkenergy.analysis.nullspec import NullSpec
from qkenergy.analysis.run_config import AnalyzeOptions, RunConfig
from qkenergy.analysis.type_rule import TypeRule
from qkenergy.base.errors import QKEnergyError
from tests.cli.test_commands import run


def test_defaults_come_from_the_parts_and_the_config_is_frozen() -> None:
    config = RunConfig.of({})
    assert (config.spec, config.types, config.null, config.per_layer) == (NullSpec(), TypeRule(), True, False)
    assert isinstance(config.threads, int) and config.threads >= 1
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.null = False  # type: ignore[misc]
    loose = RunConfig.of(
        {"samples": 50, "seed": 3, "null_kind": "both", "radius": 0.1, "type_rule": "radius"}
    )
    assert loose.spec == NullSpec(samples=50, seed=3, kind="both")
    assert loose.types == TypeRule("radius", radius=0.1)
    # values a run does not draw are not checked: --no-null with any samples
    assert RunConfig.of({"null": False, "samples": 1}).spec.samples == NullSpec().samples


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"null": NullSpec(), "samples": 10}, "^samples: give the null laws once"),
        ({"type_rule": TypeRule(), "radius": 0.1}, "^radius: give the type rule once"),
        ({"null_kind": "uniform"}, "^null_kind must be one of gaussian, rotation, both"),
        ({"radius": 1.5}, r"^radius must be"),
        ({"name": ""}, "^name: expected a non-empty name"),
    ],
)
def test_bad_options_are_one_line_naming_the_option(options: dict, message: str) -> None:
    with pytest.raises(QKEnergyError, match=message):
        RunConfig.of(options)


def test_the_keywords_are_declared_once_and_unknown_ones_are_named() -> None:
    for function in (qk.analyze, qk.Model.analyze, analyze_model):
        (options,) = [p for p in inspect.signature(function).parameters.values() if p.kind is p.VAR_KEYWORD]
        assert "AnalyzeOptions" in str(options.annotation)
    assert {"samples", "radius", "revision", "type_rule", "null"} <= set(AnalyzeOptions.__annotations__)
    with pytest.raises(
        TypeError, match=r"^qk.analyze\(\) got an unexpected keyword argument 'sample'; did you"
    ):
        qk.analyze(sample=10)  # type: ignore[call-arg]


def test_revision_option_reaches_the_reader(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "analyze", "--revision", "v1", "--no-null", "--quiet")
    assert code == 1 and "a revision ('v1') applies only to a hub id or a Hugging Face cache folder" in err

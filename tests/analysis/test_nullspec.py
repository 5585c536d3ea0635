"""NullSpec: the null settings travel together, are checked once, and key the cache."""

from __future__ import annotations

import dataclasses

import pytest

from qkenergy.analysis.null_cache import null_cache_path
from qkenergy.analysis.nullspec import NullSpec
from qkenergy.base.errors import QKEnergyError


def test_defaults_are_analyzes_and_frozen() -> None:
    spec = NullSpec()
    assert spec.as_dict() == {
        "samples": 2000,
        "seed": 0,
        "kind": "gaussian",
        "rotation_samples": 500,
    }
    assert spec.gaussian and not spec.rotation
    with pytest.raises(dataclasses.FrozenInstanceError):
        spec.samples = 5  # type: ignore[misc]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"samples": 1}, "^samples must be an integer >= 2, got 1"),
        ({"seed": -1}, "^seed must be a non-negative integer"),
        ({"kind": "uniform"}, "^kind must be one of gaussian, rotation, both"),
        ({"rotation_samples": True}, "^rotation_samples must be an integer"),
    ],
)
def test_bad_values_name_the_parameter(kwargs: dict, message: str) -> None:
    with pytest.raises(QKEnergyError, match=message) as caught:
        NullSpec(**kwargs)
    assert caught.value.parameter == next(iter(kwargs))


def test_read_back_from_settings_and_cache_key(tmp_path) -> None:
    spec = NullSpec(samples=300, seed=4, kind="both", rotation_samples=60)
    settings = {
        "null": True,
        "samples": 300,
        "seed": 4,
        "null_kind": "both",
        "radius": 0.05,
        "rotation_samples": 60,
    }
    assert NullSpec.from_settings(settings) == spec
    assert NullSpec.from_settings({**settings, "null": False, "null_kind": None}) is None
    assert spec.cache_path(tmp_path, 8, 64) == null_cache_path(tmp_path, spec, 8, 64)
    law = spec.null_law(2, 8, names=("symmetric_energy",), cache_dir=tmp_path)
    assert law.size == 300 and spec.cache_path(tmp_path, 2, 8, ("symmetric_energy",)).is_file()

"""NullSpec: the null settings travel together, are checked once, and key the cache."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np
import pytest

from qkenergy.analysis.null_cache import null_cache_path
from qkenergy.analysis.nullspec import KINDS, NullKind, NullSpec, null_kinds, register
from qkenergy.base.errors import QKEnergyError
from qkenergy.math.nulls import NULL_STATISTICS, NullLaw


def test_defaults_are_analyzes_and_frozen() -> None:
    spec = NullSpec()
    assert spec.as_dict() == {
        "samples": 2000,
        "seed": 0,
        "kind": "gaussian",
        "rotation_samples": 500,
    }
    assert spec.gaussian and spec.draws("rotation_samples") == 0
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


def test_cache_key(tmp_path) -> None:
    spec = NullSpec(samples=300, seed=4, kind="both", rotation_samples=60)
    assert spec.cache_path(tmp_path, 8, 64) == null_cache_path(tmp_path, spec, 8, 64)
    law = spec.null_law(2, 8, names=("symmetric_energy",), cache_dir=tmp_path)
    assert law.size == 300 and spec.cache_path(tmp_path, 2, 8, ("symmetric_energy",)).is_file()


# ----------------------------------------------------------------------------- a toy null kind


def uniform_sampler(gram: np.ndarray, N: int, samples: int, seed: int, names: Sequence[str]) -> NullLaw:
    """A toy null per head: every statistic uniform on [0, 1] (module level: Dask workers import it)."""
    values = np.random.default_rng(seed).uniform(size=(samples, len(names)))
    return NullLaw(gram.shape[-1] // 2, N, seed, tuple(names), values, kind="toy")


TOY = NullKind(
    "toy", "toy_", "rotation_samples", "toy", "toy null {K} uniform draws per head (smallest p {floor})",
    "Toy null (each statistic uniform on [0, 1])", uniform_sampler,
)  # fmt: skip


@pytest.fixture
def toy() -> Iterator[NullKind]:
    register(TOY)
    try:
        yield TOY
    finally:
        del KINDS["toy"]


def test_a_registered_null_kind_runs_through_analyze_summary_table_and_survey(
    toy: NullKind, tmp_path: Path
) -> None:
    """One registration: the CLI-free path of a new law (columns, settings, summary, csv, survey)."""
    import qkenergy as qk
    from qkenergy.analysis.judgement import rotation_seed
    from qkenergy.surveys import load_survey, survey
    from tests.survey_checkpoints import write_checkpoint

    assert "toy" in null_kinds() and NullSpec(kind="toy").kinds == (toy,)
    with pytest.raises(QKEnergyError, match="already registered"):
        register(toy)
    model = write_checkpoint(tmp_path / "m", "llama", layers=2, N=32, heads=2, head_dim=4)
    analysis = qk.analyze(model, null=NullSpec(kind="toy", rotation_samples=200))
    heads = analysis.heads
    toy_columns = [c for c in heads.columns if "_toy_" in c]
    assert toy_columns[-1] == "symmetric_energy_toy_p_bh" and list(heads.columns[-2:]) == ["alpha", "beta"]
    assert heads["symmetric_energy_p"].isna().all() and heads["symmetric_energy_rotation_p"].isna().all()
    # Exact: head (1, 1)'s columns are its own law's (seed of (run seed, layer, head)).
    law = uniform_sampler(np.eye(8), 32, 200, rotation_seed(0, 1, 1), NULL_STATISTICS)
    row = heads[(heads["layer"] == 1) & (heads["head"] == 1)].iloc[0]
    assert row["pairing_toy_null_mean"] == law["pairing"].mean()
    assert row["symmetric_energy_toy_z"] == pytest.approx(
        float(law.z("symmetric_energy", row["symmetric_energy"]))
    )
    # Statistical: the uniform law's mean 1/2, within 5 standard errors sqrt(1/12 / 200) of the draws.
    assert np.abs(heads["symmetric_energy_toy_null_mean"] - 0.5).max() < 5 * np.sqrt(1 / 12 / 200)
    settings = analysis.settings
    assert (settings["null_kind"], settings["samples"], settings["rotation_samples"]) == ("toy", 0, 200)
    summary = " ".join(analysis.summary().split())  # the words, whatever the wrapping
    assert "toy null 200 uniform draws per head (smallest p 0.01)" in summary
    assert (
        "Toy null (each statistic uniform on [0, 1]): " in summary and "null samples per shape" not in summary
    )
    analysis.write(tmp_path / "t.csv")
    back = qk.read(tmp_path / "t.csv").heads
    for column in toy_columns:
        np.testing.assert_allclose(back[column], heads[column], rtol=1e-12, err_msg=column)

    manifest = tmp_path / "m.toml"
    manifest.write_text(f'[[model]]\nsource = "{model}"\nname = "m"\n')
    run = survey(manifest, tmp_path / "sv", null=NullSpec(kind="toy", rotation_samples=200), workers=1)
    assert (run.units, run.computed, len(run.failed)) == (2, 2, 0)
    got = load_survey(tmp_path / "sv")[0].sort_values(["layer", "head"]).reset_index(drop=True)
    for column in toy_columns:  # BH recomputed over the model's heads, as analyze does
        np.testing.assert_allclose(got[column], heads[column], rtol=1e-12, err_msg=column)

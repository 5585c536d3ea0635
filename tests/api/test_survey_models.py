"""The API on a survey's models: each head opened with qk.open equals its row of the survey's dataset."""

from __future__ import annotations

from pathlib import Path

import pytest

import qkenergy as qk
from tests.survey_checkpoints import write_checkpoint

SAMPLES = 100


def test_heads_of_a_surveys_models_equal_its_dataset(tmp_path: Path) -> None:
    sources = {
        "llama": write_checkpoint(
            tmp_path / "llama", "llama", layers=2, N=48, heads=4, head_dim=6, kv_heads=2
        ),
        "gpt2": write_checkpoint(tmp_path / "gpt2", "gpt2", layers=1, N=32, heads=4, head_dim=8, seed=1),
    }
    manifest = tmp_path / "models.toml"
    manifest.write_text(
        "".join(f'[[model]]\nsource = "{root}"\nname = "{name}"\n\n' for name, root in sources.items())
    )
    survey = qk.survey(
        manifest, tmp_path / "out", null=qk.NullSpec(samples=SAMPLES), workers=1, cache_dir=tmp_path / "cache"
    )
    assert survey.last_run is not None and survey.last_run.units == 3 and not survey.last_run.failed
    heads, _ = qk.load_survey(tmp_path / "out")
    for name, root in sources.items():
        model = qk.open(root)
        rows = heads[heads["model"] == name]
        assert len(rows) == model.layers * model.heads
        for row in rows.itertuples():
            head = model.head(row.layer, row.head)
            assert head.symmetric_energy == pytest.approx(row.symmetric_energy, rel=1e-12)
            assert head.pairing == pytest.approx(row.pairing, rel=1e-12) and head.head_type == row.head_type
            # the survey's shared null law is the head's own: the same p
            assert head.null(samples=SAMPLES).pvalue(head.symmetric_energy) == row.symmetric_energy_p

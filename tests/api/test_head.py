"""qk.Model.head: a head's statistics, lobes, spectra and null laws equal what analyze's table says."""

from __future__ import annotations

import numpy as np
import pytest

import qkenergy as qk
from qkenergy.math.statistics import STATISTICS
from tests.survey_checkpoints import write_checkpoint

SAMPLES = 200  # null draws: the p-values compared below are exact functions of the same draws


@pytest.fixture(scope="module")
def minilm() -> qk.Model:
    return qk.open()


@pytest.fixture(scope="module")
def layer2(minilm: qk.Model) -> qk.Analysis:
    return minilm.analyze(layers=[2], samples=SAMPLES, null_kind="both", rotation_samples=50)


def _row(analysis: qk.Analysis, layer: int, head: int, **where: int):
    table = analysis.heads
    rows = table[(table["layer"] == layer) & (table["head"] == head)]
    for key, value in where.items():
        rows = rows[rows[key] == value]
    assert len(rows) == 1
    return rows.iloc[0]


def test_every_statistic_equals_its_table_column(minilm, layer2) -> None:
    for h in range(minilm.heads):
        head, row = minilm.head(2, h), _row(layer2, 2, h)
        for name in STATISTICS:
            assert getattr(head, name) == pytest.approx(row[name], rel=1e-12, abs=1e-15, nan_ok=True), name
        assert head.head_type == row["head_type"] and head.reason == row["reason"]
        alpha, beta = head.lobes
        np.testing.assert_allclose(alpha, row["alpha"], rtol=1e-12)
        np.testing.assert_allclose(beta, row["beta"], rtol=1e-12)


def test_weights_gram_profile_and_singular_values(minilm) -> None:
    head = minilm.head(2, 3)
    assert head.w_query.shape == head.w_key.shape == (32, 384)
    assert head.w_query.dtype == np.float32  # as stored
    assert head.gram.shape == (64, 64) and not head.gram.flags.writeable
    assert sum(head.profile) == pytest.approx(1.0, abs=1e-12)
    dense = head.w_key.astype(np.float64).T @ head.w_query.astype(np.float64)
    reference = np.linalg.svd(dense, compute_uv=False)[: head.n]
    # in the weights' units, not the Gram matrix's power-of-two scaled ones
    np.testing.assert_allclose(head.singular_values, reference, rtol=0, atol=1e-12 * reference[0])
    assert repr(head) == "<Head layer 2 head 3: n=32, N=384>"


def test_gaussian_null_gives_the_tables_p_and_moments(minilm, layer2) -> None:
    for h in (0, 3, 9):
        head, row = minilm.head(2, h), _row(layer2, 2, h)
        law = head.null(samples=SAMPLES)
        assert law.mean() == 385 / 768  # (N + 1) / (2N), Proposition 6
        # each p of the table by name, and by default the one its BH takes (the tail at the floor)
        assert law.pvalue(head.symmetric_energy, tail="empirical") == row["symmetric_energy_p"]
        assert law.pvalue(head.symmetric_energy, tail="beta") == law.p_tail(head.symmetric_energy)
        assert law.p_tail(head.symmetric_energy) == row["symmetric_energy_p_tail"]
        expected = (
            row["symmetric_energy_p_tail"]
            if row["symmetric_energy_p"] <= 2 / (SAMPLES + 1)
            else row["symmetric_energy_p"]
        )
        assert law.pvalue(head.symmetric_energy) == expected == head.pvalue(samples=SAMPLES)
        assert head.pvalue(samples=SAMPLES, tail="empirical") == row["symmetric_energy_p"]
        assert law.std() == pytest.approx(row["symmetric_energy_null_sd"], rel=1e-12)
        pairing = head.null(samples=SAMPLES, statistic="pairing")
        assert pairing.mean() == pytest.approx(row["pairing_null_mean"], rel=1e-12)
        assert pairing.pvalue(head.pairing) == row["pairing_p"]
        assert head.null_law(samples=SAMPLES)["lobe_departure"].z(head.lobe_departure) == pytest.approx(
            row["lobe_departure_z"], rel=1e-12
        )


def test_rotation_null_gives_the_tables_rotation_columns(minilm, layer2) -> None:
    head, row = minilm.head(2, 5), _row(layer2, 2, 5)
    law = head.null(samples=50, kind="rotation")
    assert not law.drawable
    assert law.pvalue(head.symmetric_energy, tail="empirical") == row["symmetric_energy_rotation_p"]
    assert law.p_tail(head.symmetric_energy) == row["symmetric_energy_rotation_p_tail"]
    assert head.pvalue(samples=50, kind="rotation") == law.pvalue(head.symmetric_energy)
    assert law.std() == pytest.approx(row["symmetric_energy_rotation_null_sd"], rel=1e-12)
    with pytest.raises(qk.QKEnergyError, match="cannot be drawn"):
        law.rvs(3)


def test_a_survey_model_with_grouped_keys_and_rope_offsets(tmp_path) -> None:
    root = write_checkpoint(
        tmp_path / "toy", "llama", layers=2, N=64, heads=4, head_dim=8, kv_heads=2, seed=3
    )
    model = qk.open(root)
    assert (model.model_type, model.layers, model.heads, model.source) == ("llama", 2, 4, "directory")
    result = model.analyze(null=False, rope_offsets=[0, 3])
    for h in range(4):
        head = model.head(1, h, offset=3)
        assert head.kv_head == h // 2
        row = _row(result, 1, h, offset=3)
        for name in ("symmetric_energy", "pairing", "lobe_departure", "rho", "stable_rank"):
            assert getattr(head, name) == pytest.approx(row[name], rel=1e-10), name
        # at offset 3 the form is L_3 = W_K^T R_3 W_Q: W_Q comes back rotated
        dense = head.w_key.astype(np.float64).T @ head.w_query
        np.testing.assert_allclose(
            head.singular_values,
            np.linalg.svd(dense, compute_uv=False)[:8],
            atol=1e-10 * head.singular_values[0],
        )


@pytest.mark.parametrize("model_type", ["gpt2", "phi3", "gpt_neox"])
def test_other_survey_layouts(tmp_path, model_type) -> None:
    root = write_checkpoint(tmp_path / model_type, model_type, layers=1, N=32, heads=4, head_dim=8, seed=1)
    model = qk.open(root)
    result = model.analyze(null=False)
    for h in range(4):
        assert model.head(0, h).symmetric_energy == pytest.approx(
            _row(result, 0, h)["symmetric_energy"], rel=1e-12
        )


def test_bad_indices_name_the_parameter(minilm) -> None:
    with pytest.raises(qk.QKEnergyError, match=r"^layer: 6 is out of range; valid layers are 0\.\.5"):
        minilm.head(6, 0)
    with pytest.raises(qk.QKEnergyError, match=r"^head: 12 is out of range"):
        minilm.head(0, 12)
    with pytest.raises(qk.QKEnergyError, match=r"^stack: 'decoder' is not a stack"):
        minilm.head(0, 0, stack="decoder")
    with pytest.raises(qk.QKEnergyError, match="offset"):
        minilm.head(0, 0, offset=2)  # MiniLM has absolute positions
    with pytest.raises(qk.QKEnergyError, match="^kind must be"):
        minilm.head(0, 0).null(kind="uniform")


def test_a_read_heads_type_follows_the_recorded_rule(tmp_path) -> None:
    # the head of an analysis is named by the rule the analysis used, not by the default one
    analysis = qk.analyze(layers=[2], null=False, type_rule="radius", radius=0.3)
    table = list(analysis.heads["head_type"])
    assert table != list(qk.analyze(layers=[2], null=False).heads["head_type"])  # the rules disagree here
    assert [analysis.head(2, h).head_type for h in range(len(table))] == table
    analysis.write(tmp_path / "heads.csv")
    written = qk.read(tmp_path / "heads.csv")
    assert [written.head(2, h).head_type for h in range(len(table))] == table

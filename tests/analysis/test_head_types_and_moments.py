"""MiniLM under the published head-type rule and the radius rule; the new columns against the dense route and their nulls."""

from __future__ import annotations

import collections
from pathlib import Path

import numpy as np
import pytest

from qkenergy.analysis import null_cache
from qkenergy.analysis.analyze import analyze_model
from qkenergy.analysis.nullspec import NullSpec
from qkenergy.math import nulls
from qkenergy.math.moments import MOMENT_STATISTICS
from qkenergy.math.statistics import STATISTICS
from qkenergy.weights.architecture import architecture
from qkenergy.weights.checkpoint import open_model
from qkenergy.weights.reading import find_prefix, read_layer
from tests.math.test_moments import NEW_COLUMNS, dense_columns

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def minilm() -> tuple[np.ndarray, np.ndarray]:
    """The embedded MiniLM's W_Q, W_K: (72, 32, 384) each, layer by layer."""
    with open_model(None) as source:
        arch = architecture(source.config, "config.json")
        prefix = find_prefix(source.tensors, arch)
        layers = [read_layer(source.tensors, arch, i, prefix=prefix) for i in range(arch.n_layers)]
    return np.concatenate([w.w_query for w in layers]), np.concatenate([w.w_key for w in layers])


def test_minilm_head_types_under_both_rules() -> None:
    published = analyze_model(null=False)
    radius = analyze_model(null=False, type_rule="radius")
    counts = collections.Counter(published.columns["head_type"].tolist())
    assert counts == {"I+": 43, "I-": 20, "II": 9}
    assert collections.Counter(radius.columns["head_type"].tolist()) == {"I+": 44, "I-": 20, "II": 8}
    for settings, rule in ((published.settings, "imbalance"), (radius.settings, "radius")):
        assert (
            settings["type_rule"],
            settings["imbalance_cut"],
            settings["edge_cut"],
            settings["radius"],
        ) == (
            rule,
            0.2,
            0.01,
            0.02,
        )
    a, b = published.columns, radius.columns
    changed = np.flatnonzero(a["head_type"] != b["head_type"])
    assert [
        (int(a["layer"][i]), int(a["head"][i]), a["head_type"][i], b["head_type"][i]) for i in changed
    ] == [
        (1, 2, "II", "I+"),
        (1, 7, "II", "I-"),
        (3, 10, "I-", "II"),
    ]
    # what docs/mathematics.md says about them
    text = " ".join((ROOT / "docs" / "mathematics.md").read_text(encoding="utf-8").split())
    assert "imbalance rule gives 43 I+, 20 I- and 9 II; the radius rule gives 44 I+, 20 I- and 8 II" in text
    i = changed[2]
    assert f"(c + d = {a['c'][i] + a['d'][i]:.3f}," in text and f"(imbalance {a['imbalance'][i]:.2f})" in text


def test_new_columns_equal_the_dense_eigenvalues_on_minilm(minilm: tuple[np.ndarray, np.ndarray]) -> None:
    table = analyze_model(null=False).columns
    dense = dense_columns(*minilm)
    for name in NEW_COLUMNS:
        np.testing.assert_allclose(table[name], dense[name], rtol=1e-9, atol=1e-9, err_msg=name)
    assert np.all(table["moment_E"] >= 1) and np.all(np.abs(table["lobe_imbalance"]) < 1)


SPEC = NullSpec(samples=40, seed=1)


def test_a_cached_law_without_the_new_names_is_a_miss(tmp_path: Path) -> None:
    old_names = ("symmetric_energy", "pairing", "lobe_departure")
    old_every = tuple(name for name in STATISTICS if name not in NEW_COLUMNS)
    for names in (old_names, old_every):
        old = nulls.null_law(3, 9, samples=40, seed=1, names=names)
        null_cache.store_null_law(old, SPEC, tmp_path)
    assert null_cache.cached_null_law(SPEC, 3, 9, cache_dir=tmp_path, names=nulls.NULL_STATISTICS) is None
    assert null_cache.cached_null_law(SPEC, 3, 9, cache_dir=tmp_path) is None
    law = null_cache.null_law(SPEC, 3, 9, cache_dir=tmp_path, names=nulls.NULL_STATISTICS)
    assert law.names == nulls.NULL_STATISTICS
    again = null_cache.cached_null_law(SPEC, 3, 9, cache_dir=tmp_path, names=nulls.NULL_STATISTICS)
    assert again is not None
    np.testing.assert_array_equal(again.values, law.values)


def test_analysis_judges_the_moments_against_the_null(tmp_path: Path) -> None:
    result = analyze_model(layers=[0], samples=300, cache_dir=tmp_path)
    df = result.heads
    law = null_cache.null_law(NullSpec(samples=300), 32, 384, cache_dir=tmp_path, names=nulls.NULL_STATISTICS)
    for name in MOMENT_STATISTICS:
        np.testing.assert_allclose(df[f"{name}_null_mean"], law.mean(name))
        np.testing.assert_allclose(df[f"{name}_z"], (df[name] - law.mean(name)) / law.sd(name))
        assert df[f"{name}_p"].between(0, 1).all()
    assert (df["moment_E_z"] > 5).all()  # trained heads concentrate their spectra far beyond a random head


def test_gaussian_heads_of_minilm_shape_are_type_ii_under_both_rules() -> None:
    """docs/mathematics.md: c + d of 0.0003 (median of 2000 draws, at most 0.0014) for n = 32, N = 384."""
    law = nulls.null_law(32, 384, samples=2000, seed=0, names=("c", "d", "c_sym", "d_sym"))
    unpaired = law.samples("c") + law.samples("d")
    assert round(float(np.median(unpaired)), 4) == 0.0003 and round(float(unpaired.max()), 4) == 0.0014
    assert np.all(unpaired <= 0.01) and np.all(law.samples("c_sym") + law.samples("d_sym") <= 0.02)

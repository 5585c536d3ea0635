"""The per-layer null law (math/layer_null.py) against direct sampling of whole Gaussian layers.

Fixed seeds; means within 5 standard errors; laws by two-sample KS tests at p > 1e-3.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from qkenergy.analysis import analyze, layer_forms
from qkenergy.analysis.null_cache import layer_null_cache_path
from qkenergy.analysis.null_cache import layer_null_law as cached_layer_null_law
from qkenergy.analysis.nullspec import NullSpec
from qkenergy.math import layer_null, montecarlo
from qkenergy.math.directionality import dense_norms, directionality
from qkenergy.math.energies import energies

KS_ALPHA = 1e-3
TOLERANCE_SE = 5.0


def test_routes_agree_draw_by_draw() -> None:
    gram = layer_null.layer_null_samples(np.random.default_rng(0), [2, 1], 3, 20, 50, route="gram")
    dense = layer_null.layer_null_samples(np.random.default_rng(0), [2, 1], 3, 20, 50, route="dense")
    np.testing.assert_allclose(gram, dense, rtol=1e-10, atol=1e-12)
    assert layer_null.layer_null_route(384, 384) == "dense"  # 2 n N^2 < 8 n^2 N when N < 4n
    assert layer_null.layer_null_route(8, 384) == "gram"


@pytest.mark.parametrize(("groups", "head_dim", "N"), [((1, 1, 1), 4, 16), ((3, 3), 2, 16)])
def test_exact_mean_and_symmetric_directionality(groups: tuple[int, ...], head_dim: int, N: int) -> None:
    """E[s] = (N+1)/(2N) exactly; directionality is odd under L -> L^T, so its null mean is 0 (5 SE)."""
    law = layer_null.layer_null_law(groups, head_dim, N, samples=20_000, seed=1)
    s = montecarlo.estimate_mean(law.samples("symmetric_energy"))
    assert s.within((N + 1) / (2 * N), TOLERANCE_SE)
    assert montecarlo.estimate_mean(law.samples("directionality")).within(0.0, TOLERANCE_SE)
    assert law.mean("symmetric_energy") == (N + 1) / (2 * N)


def _direct_layer(rng: np.random.Generator, size: int, H: int, H_kv: int, d: int, N: int) -> np.ndarray:
    """(s, directionality) of whole Gaussian layers: every query head, key heads repeated (GQA)."""
    kv_head = np.arange(H) // (H // H_kv)
    w_query = rng.standard_normal((size, H, d, N)).reshape(size, H * d, N)
    w_key = rng.standard_normal((size, H_kv, d, N))[:, kv_head].reshape(size, H * d, N)
    L = np.swapaxes(w_key, 1, 2) @ w_query  # sum over heads of W_K^T W_Q, the form analyze scores
    rows, cols = dense_norms(L)
    return np.stack([energies(L).symmetric_ratio, directionality(rows, cols)], axis=1)


def test_grouped_query_layer_matches_direct_sampling() -> None:
    """The GQA reduction (summed query groups = one Gaussian head of n = H_kv d) against whole layers."""
    H, H_kv, d, N = 4, 2, 3, 24
    law = layer_null.layer_null_law([H // H_kv] * H_kv, d, N, samples=1500, seed=2)
    direct = _direct_layer(np.random.default_rng(3), 1500, H, H_kv, d, N)
    for j, name in enumerate(layer_null.LAYER_NULL_STATISTICS):
        assert stats.ks_2samp(law.samples(name), direct[:, j]).pvalue > KS_ALPHA, name


def test_cached_law(tmp_path: Path) -> None:
    first = cached_layer_null_law(NullSpec(samples=300, seed=4), (1, 1), 3, 12, cache_dir=tmp_path)
    assert layer_null_cache_path(tmp_path, NullSpec(samples=300, seed=4), (1, 1), 3, 12).is_file()
    again = cached_layer_null_law(NullSpec(samples=300, seed=4), (1, 1), 3, 12, cache_dir=tmp_path)
    np.testing.assert_array_equal(first.values, again.values)
    np.testing.assert_array_equal(
        first.values, layer_null.layer_null_law((1, 1), 3, 12, samples=300, seed=4).values
    )


def test_minilm_layers_judged_and_large_shapes_flagged(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    result = analyze.analyze_model(layers=[0, 5], heads=[0], per_layer=True, samples=50, cache_dir=tmp_path)
    layers = result.layers
    assert (layers["symmetric_energy_null_mean"] == 385 / 768).all()
    assert (layers["null_route"] == "dense").all() and (layers["null_note"] == "").all()
    expected = (layers["directionality"] - layers["directionality_null_mean"]) / layers[
        "directionality_null_sd"
    ]
    np.testing.assert_allclose(layers["directionality_z"], expected)
    assert (layers["symmetric_energy_z"] > 20).all()  # trained layers are far more symmetric than random
    # A shape beyond the arithmetic limit is not drawn, and the table says why.
    monkeypatch.setattr(layer_forms, "LAYER_NULL_MAX_FLOPS", 1e6)
    skipped = analyze.analyze_model(
        layers=[0], heads=[0], per_layer=True, samples=200, cache_dir=tmp_path
    ).layers
    assert skipped["null_note"].iloc[0].startswith("not drawn: 200 draws of a form with n = 384, N = 384")
    assert skipped["null_route"].iloc[0] == "" and np.isnan(skipped["directionality_z"].iloc[0])

"""Per-head statistics (statistics.py) and the spectra behind them (spectrum.py).

Property tests: the Gram route equals the dense route; every statistic is
invariant under transposition of L, orthogonal congruence and scaling; the
profile lies on the simplex and its faces; the pairing lemma; failures.
"""

from __future__ import annotations

import warnings
from dataclasses import fields

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from qkenergy.math.gram import head_gram
from qkenergy.math.spectrum import (
    dense_singular_values,
    dense_skew_singular_values,
    dense_symmetric_eigenvalues,
    lobes,
    singular_values,
    skew_singular_values,
    symmetric_eigenvalues,
)
from qkenergy.math.statistics import (
    REASON_NON_FINITE,
    REASON_ZERO_HEAD,
    STATISTICS,
    HeadStatistics,
    dense_statistics,
    gram_statistics,
    head_statistics,
)

SETTINGS = settings(max_examples=40, deadline=None)
KINDS = ("gaussian", "repeated_key_rows", "low_rank_key", "shared_rows", "graded_key")


@st.composite
def heads(draw, max_n: int = 4, max_N: int = 8) -> tuple[np.ndarray, np.ndarray]:
    """A batch of small heads (w_query, w_key), (batch, n, N): generic and rank-deficient.

    n ranges over both sides of N/2 (and past N), so C = [W_K; W_Q] is often
    rank-deficient; the other kinds make W_K itself rank-deficient or
    ill-conditioned, or let W_K and W_Q share a row.
    """
    N = draw(st.integers(1, max_N))
    n = draw(st.integers(1, max_n))
    batch = draw(st.integers(1, 3))
    kind = draw(st.sampled_from(KINDS))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    w_query = rng.standard_normal((batch, n, N))
    w_key = rng.standard_normal((batch, n, N))
    if kind == "repeated_key_rows" and n > 1:
        w_key[:, 1:] = w_key[:, :1]
    elif kind == "low_rank_key" and n > 1:
        w_key = rng.standard_normal((batch, n, 1)) @ rng.standard_normal((batch, 1, N))
    elif kind == "shared_rows":
        w_query[:, 0] = w_key[:, 0]
    elif kind == "graded_key":
        # singular values of W_K down to 1e-5, well above the Gram route's
        # resolution sqrt(2n eps) (see spectrum.psd_factor)
        w_key = np.logspace(0, -5, n)[:, None] * w_key
    return w_query, w_key


def dense_l(w_query: np.ndarray, w_key: np.ndarray) -> np.ndarray:
    """L = W_K^T W_Q."""
    return np.swapaxes(np.asarray(w_key, np.float64), -1, -2) @ np.asarray(w_query, np.float64)


def random_orthogonal(rng: np.random.Generator, N: int) -> np.ndarray:
    q, r = np.linalg.qr(rng.standard_normal((N, N)))
    return q * np.sign(np.diag(r))


def assert_statistics_close(
    x: HeadStatistics, y: HeadStatistics, atol: float, lobe_length: int | None = None
) -> None:
    """Every scalar statistic, head_type, reason and the lobes agree (NaN and inf in the same places)."""
    for name in STATISTICS:
        np.testing.assert_allclose(getattr(x, name), getattr(y, name), atol=atol, rtol=atol, err_msg=name)
    np.testing.assert_array_equal(x.reason, y.reason)
    # the Type II boundary is a threshold: compare the type only away from it
    off_diagonal = x.c_sym + x.d_sym
    clear = ~(np.abs(off_diagonal - 0.02) < 1e-6)
    np.testing.assert_array_equal(x.head_type[clear], y.head_type[clear])
    m = min(lobe_length or x.alpha.shape[-1], x.alpha.shape[-1], y.alpha.shape[-1])
    np.testing.assert_allclose(x.alpha[..., :m], y.alpha[..., :m], atol=atol, rtol=0)
    np.testing.assert_allclose(x.beta[..., :m], y.beta[..., :m], atol=atol, rtol=0)


# ---------------------------------------------------------------- contract


def test_statistics_names_and_fields_follow_the_contract() -> None:
    names = [field.name for field in fields(HeadStatistics)]
    assert tuple(names[: len(STATISTICS)]) == STATISTICS
    assert names[len(STATISTICS) :] == ["head_type", "reason", "alpha", "beta"]
    assert len(set(STATISTICS)) == len(STATISTICS) == 31


def test_batch_shapes_and_columns() -> None:
    rng = np.random.default_rng(0)
    w_query, w_key = rng.standard_normal((2, 2, 3, 8)), rng.standard_normal((2, 2, 3, 8))
    stats = head_statistics(w_query, w_key)
    assert stats.symmetric_energy.shape == (2, 2)
    assert stats.head_type.shape == (2, 2) and stats.reason.shape == (2, 2)
    assert stats.alpha.shape == (2, 2, 3) and stats.beta.shape == (2, 2, 3)
    columns = stats.columns()
    assert list(columns) == [*STATISTICS, "head_type", "reason"]
    assert all(column.shape == (4,) for column in columns.values())
    np.testing.assert_array_equal(columns["rho"], stats.rho.reshape(-1))

    single = head_statistics(w_query[1, 0], w_key[1, 0])
    assert single.symmetric_energy.shape == () and single.alpha.shape == (3,)
    assert {name: column.shape for name, column in single.columns().items()} == {
        name: (1,) for name in columns
    }
    np.testing.assert_allclose(single.symmetric_energy, stats.symmetric_energy[1, 0], rtol=1e-13)

    dense = dense_statistics(dense_l(w_query, w_key))
    assert dense.alpha.shape == (2, 2, 8)
    assert dense_statistics(dense_l(w_query[0, 0], w_key[0, 0])).rho.shape == ()


# ---------------------------------------------------------------- Gram route = dense route


@SETTINGS
@given(head=heads())
def test_gram_route_equals_dense_route(head) -> None:
    w_query, w_key = head
    n, N = w_query.shape[-2:]
    via_gram = head_statistics(w_query, w_key)
    via_dense = dense_statistics(dense_l(w_query, w_key))
    assert_statistics_close(via_gram, via_dense, atol=1e-8, lobe_length=n)
    # dense lobes beyond n are padding: S has at most n positive and n negative eigenvalues
    assert np.all(via_dense.alpha[..., n:] == 0) and np.all(via_dense.beta[..., n:] == 0)
    assert np.all(via_gram.n_pos <= n) and np.all(via_gram.n_neg <= n)
    np.testing.assert_array_equal(via_gram.n_pos + via_gram.n_neg + via_gram.n_zero, N)


@SETTINGS
@given(head=heads())
def test_gram_spectra_equal_dense_spectra(head) -> None:
    w_query, w_key = head
    n, N = w_query.shape[-2:]
    G = head_gram(w_query, w_key)
    # undo head_gram's per-matrix power-of-two rescaling to compare spectra in L's units
    C = np.concatenate([w_key, w_query], axis=-2)
    G = C @ np.swapaxes(C, -1, -2)
    L = dense_l(w_query, w_key)
    scale = np.max(np.abs(dense_singular_values(L)))
    k = min(2 * n, N)

    def top_moduli(values: np.ndarray) -> np.ndarray:
        return -np.sort(-np.abs(values), axis=-1)[..., :k]

    np.testing.assert_allclose(
        top_moduli(symmetric_eigenvalues(G)), top_moduli(dense_symmetric_eigenvalues(L)), atol=1e-9 * scale
    )
    np.testing.assert_allclose(
        skew_singular_values(G)[..., :k], dense_skew_singular_values(L)[..., :k], atol=1e-9 * scale
    )
    m = min(n, N)
    np.testing.assert_allclose(
        singular_values(G)[..., :m], dense_singular_values(L)[..., :m], atol=1e-7 * scale
    )


def test_gram_statistics_on_a_precomputed_gram_with_batch_axes() -> None:
    rng = np.random.default_rng(1)
    w_query, w_key = rng.standard_normal((2, 3, 4, 12)), rng.standard_normal((2, 3, 4, 12))
    C = np.concatenate([w_key, w_query], axis=-2)
    unscaled = gram_statistics(C @ np.swapaxes(C, -1, -2), 12)
    assert unscaled.rho.shape == (2, 3)
    assert_statistics_close(unscaled, head_statistics(w_query, w_key), atol=1e-10)


# ---------------------------------------------------------------- invariances


@SETTINGS
@given(head=heads())
def test_invariant_under_transposition(head) -> None:
    """Swapping W_Q and W_K transposes L."""
    w_query, w_key = head
    assert_statistics_close(head_statistics(w_key, w_query), head_statistics(w_query, w_key), atol=1e-9)


@SETTINGS
@given(head=heads(), seed=st.integers(0, 2**32 - 1))
def test_invariant_under_orthogonal_congruence(head, seed: int) -> None:
    """W -> W O maps L to O^T L O."""
    w_query, w_key = head
    O = random_orthogonal(np.random.default_rng(seed), w_query.shape[-1])
    rotated = head_statistics(w_query @ O, w_key @ O)
    assert_statistics_close(rotated, head_statistics(w_query, w_key), atol=1e-9)


@SETTINGS
@given(
    head=heads(),
    query_scale=st.floats(1e-3, 1e3),
    key_scale=st.floats(1e-3, 1e3),
    exponents=st.tuples(st.integers(-300, 300), st.integers(-300, 300)),
)
def test_invariant_under_scaling(head, query_scale: float, key_scale: float, exponents) -> None:
    w_query, w_key = head
    reference = head_statistics(w_query, w_key)
    assert_statistics_close(head_statistics(query_scale * w_query, key_scale * w_key), reference, atol=1e-9)
    # powers of two are exact: bitwise the same statistics, even at 2**+-300
    exact = head_statistics(np.ldexp(w_query, exponents[0]), np.ldexp(w_key, exponents[1]))
    for name in STATISTICS:
        np.testing.assert_array_equal(getattr(exact, name), getattr(reference, name), err_msg=name)


@pytest.mark.parametrize("size", [1e-30, 1e30])
def test_float32_extreme_sizes_give_the_ratios_of_size_one(size: float) -> None:
    rng = np.random.default_rng(2)
    w_query = rng.standard_normal((4, 6, 64)).astype(np.float32)
    w_key = rng.standard_normal((4, 6, 64)).astype(np.float32)
    tiny_or_huge = (w_query * np.float32(size), w_key * np.float32(size))
    assert tiny_or_huge[0].dtype == np.float32 and np.all(np.isfinite(tiny_or_huge[0]))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        scaled = head_statistics(*tiny_or_huge)
    # the float32 products round each entry (relative 6e-8): ratios agree to that level
    assert_statistics_close(scaled, head_statistics(w_query, w_key), atol=1e-5)
    assert np.all(scaled.reason == "")


@pytest.mark.parametrize("dtype", [np.float16, ml_dtypes.bfloat16])
def test_half_precision_inputs(dtype) -> None:
    rng = np.random.default_rng(3)
    w_query = (0.02 * rng.standard_normal((3, 8, 48))).astype(dtype)
    w_key = (0.02 * rng.standard_normal((3, 8, 48))).astype(dtype)
    stats = head_statistics(w_query, w_key)
    # 16-bit weights are multiplied in float32 (gram.accumulator_dtype): rounding
    # ~ sqrt(N) 2^-24 relative, far below the weights' own 2^-8 to 2^-11.
    reference = head_statistics(w_query.astype(np.float64), w_key.astype(np.float64))
    for name in STATISTICS:
        np.testing.assert_allclose(
            getattr(stats, name), getattr(reference, name), rtol=1e-5, atol=1e-6, err_msg=name
        )
    assert_statistics_close(stats, dense_statistics(dense_l(w_query, w_key)), atol=1e-5, lobe_length=8)
    assert np.all(stats.reason == "")


# ---------------------------------------------------------------- simplex, faces, pairing lemma


@SETTINGS
@given(head=heads())
def test_profile_on_the_simplex_and_pairing_lemma(head) -> None:
    stats = head_statistics(*head)
    np.testing.assert_allclose(stats.a + stats.b + stats.c + stats.d, 1.0, atol=1e-12)
    np.testing.assert_allclose(stats.symmetric_energy + stats.a, 1.0, atol=1e-12)
    for part in (stats.a, stats.b, stats.c, stats.d):
        assert np.all(part >= 0)
    defined = ~np.isnan(stats.b_sym)
    np.testing.assert_allclose((stats.b_sym + stats.c_sym + stats.d_sym)[defined], 1.0, atol=1e-12)
    np.testing.assert_allclose(
        stats.b_sym[defined] * stats.symmetric_energy[defined], stats.b[defined], atol=1e-12
    )
    limits = stats.limit_b_sym + stats.limit_c_sym + stats.limit_d_sym
    np.testing.assert_allclose(limits[defined], 1.0, atol=1e-12)
    # pairing lemma
    assert np.all(stats.pairing[defined] <= stats.pairing_bound[defined] + 1e-12)
    np.testing.assert_allclose(stats.pairing_gap, stats.pairing_bound - stats.pairing, atol=1e-15)
    # limit profile at the head's rho, in the closed form of docs/mathematics.md §3
    rho = stats.rho[defined & np.isfinite(stats.rho)]
    limit = np.stack([2 * rho, np.maximum(1 - rho, 0) ** 2, np.maximum(rho - 1, 0) ** 2]) / (1 + rho**2)
    finite = defined & np.isfinite(stats.rho)
    np.testing.assert_allclose(limit[0], stats.limit_b_sym[finite], atol=1e-12)
    np.testing.assert_allclose(limit[1], stats.limit_c_sym[finite], atol=1e-12)
    np.testing.assert_allclose(limit[2], stats.limit_d_sym[finite], atol=1e-12)
    np.testing.assert_allclose(
        stats.pairing_bound[finite], 1 - np.abs(1 - rho) / np.sqrt(1 + rho**2), atol=1e-12
    )
    # lobes in units of ||L||: ||alpha||^2 + ||beta||^2 = s, b = 2 <alpha, beta>
    lobe_energy = np.sum(stats.alpha**2 + stats.beta**2, axis=-1)
    np.testing.assert_allclose(lobe_energy, stats.symmetric_energy, atol=1e-12)
    np.testing.assert_allclose(2 * np.sum(stats.alpha * stats.beta, axis=-1), stats.b, atol=1e-12)
    # singular-value shares
    assert np.all((stats.leading_share > 0) & (stats.leading_share <= 1 + 1e-12))
    assert np.all(stats.stable_rank >= 1 - 1e-12) and np.all(stats.participation_ratio >= 1 - 1e-12)
    np.testing.assert_allclose(stats.stable_rank * stats.leading_share, 1.0, rtol=1e-12)


def test_symmetric_head_has_a_zero() -> None:
    rng = np.random.default_rng(4)
    w_key = rng.standard_normal((2, 3, 10))
    signs = np.array([1.0, -1.0, 1.0])[:, None]
    stats = head_statistics(signs * w_key, w_key)  # L = W_K^T D W_K
    np.testing.assert_allclose(stats.a, 0.0, atol=1e-14)
    np.testing.assert_allclose(stats.symmetric_energy, 1.0, atol=1e-14)
    assert np.all(stats.n_pos == 2) and np.all(stats.n_neg == 1)


def test_antisymmetric_head_has_a_one_and_no_symmetric_profile() -> None:
    rng = np.random.default_rng(5)
    x, y = rng.standard_normal((2, 3, 1, 9))
    w_key = np.concatenate([x, y], axis=1)
    w_query = np.concatenate([y, -x], axis=1)  # L = x^T y - y^T x
    for stats in (head_statistics(w_query, w_key), dense_statistics(dense_l(w_query, w_key))):
        np.testing.assert_allclose(stats.a, 1.0, atol=1e-14)
        np.testing.assert_allclose(stats.b + stats.c + stats.d, 0.0, atol=1e-14)
        assert np.all(stats.reason == "")
        assert np.all(stats.n_pos == 0) and np.all(stats.n_neg == 0) and np.all(stats.n_zero == 9)
        undefined = ("b_sym", "c_sym", "d_sym", "balance", "rho", "pairing", "pairing_bound")
        for name in (*undefined, "lobe_departure", "limit_distance"):
            assert np.all(np.isnan(getattr(stats, name))), name
        assert np.all(stats.head_type == "")
        assert np.all(np.isfinite(stats.trace_ratio)) and np.all(np.isfinite(stats.stable_rank))


def test_positive_semidefinite_s_has_c_sym_one() -> None:
    rng = np.random.default_rng(6)
    w_key = rng.standard_normal((3, 4, 16))
    stats = head_statistics(w_key, w_key)  # L = W_K^T W_K
    np.testing.assert_allclose(stats.c_sym, 1.0, atol=1e-12)
    np.testing.assert_allclose(stats.b_sym + stats.d_sym, 0.0, atol=1e-12)
    np.testing.assert_allclose(stats.rho, 0.0)
    np.testing.assert_allclose(stats.limit_distance, 0.0, atol=1e-12)
    assert np.all(np.isnan(stats.lobe_departure)) and np.all(stats.reason == "")
    assert np.all(stats.head_type == "I+") and np.all(stats.n_neg == 0)


def test_negative_semidefinite_s_has_d_sym_one_and_infinite_rho() -> None:
    rng = np.random.default_rng(7)
    w_key = rng.standard_normal((2, 4, 16))
    stats = head_statistics(-w_key, w_key)  # L = -W_K^T W_K
    np.testing.assert_allclose(stats.d_sym, 1.0, atol=1e-12)
    assert np.all(stats.rho == np.inf)
    np.testing.assert_allclose(stats.limit_d_sym, 1.0)
    np.testing.assert_allclose(stats.limit_distance, 0.0, atol=1e-12)
    np.testing.assert_allclose(stats.pairing_bound, 0.0, atol=1e-12)
    assert np.all(stats.head_type == "I-") and np.all(np.isnan(stats.lobe_departure))


def test_spectrum_symmetric_about_zero_has_b_sym_one() -> None:
    rng = np.random.default_rng(8)
    rows = np.linalg.qr(rng.standard_normal((12, 4)))[0].T  # orthonormal rows
    signs = np.array([1.0, 1.0, -1.0, -1.0])[:, None]
    # S = W_K^T D W_K has eigenvalues +1, +1, -1, -1; a rank-one head with orthogonal k, q too
    k, q = rows[:1], rows[1:2]
    w_query = np.stack([signs * rows, 3.0 * np.concatenate([q, 0 * rows[1:]])])
    w_key = np.stack([rows, np.concatenate([k, 0 * rows[1:]])])
    stats = head_statistics(w_query, w_key)
    np.testing.assert_allclose(stats.b_sym, 1.0, atol=1e-12)
    np.testing.assert_allclose(stats.rho, 1.0, atol=1e-12)
    np.testing.assert_allclose(stats.pairing, 1.0, atol=1e-12)
    np.testing.assert_allclose(stats.lobe_departure, 0.0, atol=1e-12)
    np.testing.assert_allclose(stats.limit_distance, 0.0, atol=1e-12)
    np.testing.assert_allclose(stats.balance, 1.0)
    assert list(stats.head_type) == ["II", "II"]
    np.testing.assert_allclose(stats.a, [0.0, 0.5], atol=1e-12)


def test_random_heads_are_balanced_with_n_zero_from_the_residual_width() -> None:
    rng = np.random.default_rng(9)
    n, N = 5, 40
    stats = head_statistics(rng.standard_normal((6, n, N)), rng.standard_normal((6, n, N)))
    assert np.all(stats.n_pos == n) and np.all(stats.n_neg == n) and np.all(stats.n_zero == N - 2 * n)
    np.testing.assert_allclose(stats.balance, 1.0)
    # wide heads, 2n > N: S is generically full rank
    wide = head_statistics(rng.standard_normal((4, 6, 9)), rng.standard_normal((4, 6, 9)))
    assert np.all(wide.n_pos + wide.n_neg == 9) and np.all(wide.n_zero == 0)


def test_radius_sets_the_type_ii_region() -> None:
    rng = np.random.default_rng(10)
    w_query, w_key = rng.standard_normal((2, 8, 3, 12))
    rule = {"type_rule": "radius"}
    assert np.all(head_statistics(w_query, w_key, radius=1.0, **rule).head_type == "II")
    strict = head_statistics(w_query, w_key, radius=0.0, **rule)
    assert set(strict.head_type) <= {"I+", "I-"}
    default = head_statistics(w_query, w_key, **rule)
    expected = np.where(
        default.c_sym + default.d_sym <= 0.02, "II", np.where(default.c_sym > default.d_sym, "I+", "I-")
    )
    np.testing.assert_array_equal(default.head_type, expected)


# ---------------------------------------------------------------- failures mid-batch


EXPECTED_REASONS = ["", REASON_ZERO_HEAD, REASON_ZERO_HEAD, REASON_NON_FINITE, REASON_NON_FINITE, ""]


def failing_batch() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(11)
    w_query, w_key = rng.standard_normal((2, 6, 3, 10))
    w_key[1] = 0.0  # zero weight matrix
    w_key[2, 1:] = 0.0  # L = 0 with nonzero W_K, W_Q: the one key row meets a zero query row
    w_query[2, 0] = 0.0
    w_query[3, 2, 4] = np.nan
    w_key[4, 0, 0] = np.inf
    return w_query, w_key


def test_zero_and_non_finite_heads_mid_batch() -> None:
    w_query, w_key = failing_batch()
    assert np.all(dense_l(w_query[2], w_key[2]) == 0) and np.any(w_key[2]) and np.any(w_query[2])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        stats = head_statistics(w_query, w_key)
    assert list(stats.reason) == EXPECTED_REASONS
    for name in STATISTICS:
        assert np.all(np.isnan(getattr(stats, name)[1:5])), name
        assert np.all(np.isfinite(getattr(stats, name)[[0, 5]])), name
    assert list(stats.head_type[1:5]) == [""] * 4
    assert np.all(np.isnan(stats.alpha[1:5])) and np.all(np.isnan(stats.beta[1:5]))
    # the fine heads are untouched by their neighbours
    for i in (0, 5):
        alone = head_statistics(w_query[i], w_key[i])
        for name in STATISTICS:
            np.testing.assert_allclose(
                getattr(stats, name)[i], getattr(alone, name), rtol=1e-12, err_msg=name
            )
        assert stats.head_type[i] == alone.head_type


def test_zero_and_non_finite_heads_on_the_dense_route() -> None:
    w_query, w_key = failing_batch()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        L = dense_l(w_query, w_key)
        stats = dense_statistics(L)
    assert list(stats.reason) == EXPECTED_REASONS
    assert all(np.all(np.isnan(getattr(stats, name)[1:5])) for name in STATISTICS)
    fine = [0, 5]
    assert_statistics_close(
        dense_statistics(L[fine]), head_statistics(w_query[fine], w_key[fine]), atol=1e-9, lobe_length=3
    )


def test_nearly_zero_head_relative_to_its_weights_is_a_zero_head() -> None:
    rng = np.random.default_rng(12)
    w_query, w_key = rng.standard_normal((2, 2, 3, 10))
    w_key[0, 1:] = 0.0
    w_query[0, 0] = 1e-9 * rng.standard_normal(10)  # ||L|| ~ 1e-9 ||W_K|| ||W_Q||
    stats = head_statistics(w_query, w_key)
    assert list(stats.reason) == [REASON_ZERO_HEAD, ""]
    # a head merely small in absolute terms is not
    assert head_statistics(1e-9 * w_query[1], w_key[1]).reason == ""


# ---------------------------------------------------------------- lobes


def test_lobes_sort_pad_and_drop_rounding_level_eigenvalues() -> None:
    eigs = np.array([[0.5, -2.0, 1e-12, 3.0, -1e-11, 0.0], [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]])
    alpha, beta = lobes(eigs, length=4)
    np.testing.assert_array_equal(alpha, [[3.0, 0.5, 0, 0], [6.0, 5.0, 4.0, 3.0]])
    np.testing.assert_array_equal(beta, [[2.0, 0, 0, 0], [0, 0, 0, 0]])
    alpha, beta = lobes(eigs[0], zero_tol=0.0)
    np.testing.assert_array_equal(alpha, [3.0, 0.5, 1e-12, 0, 0, 0])
    np.testing.assert_array_equal(beta, [2.0, 1e-11, 0, 0, 0, 0])
    alpha, beta = lobes(np.zeros(3), length=5)
    assert alpha.shape == (5,) and not np.any(alpha) and not np.any(beta)

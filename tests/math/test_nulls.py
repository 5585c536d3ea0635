"""Exact null samplers (Bartlett-Wishart and direct C C^T) and NullLaw.

Statistical checks use fixed seeds and a tolerance of 5 standard errors; the
two-sample KS comparisons use a fixed threshold p > 1e-3.
"""

import itertools
import json
import math
import os
import subprocess
import sys

import numpy as np
import pytest
from scipy import stats

from qkenergy.base.errors import QKEnergyError
from qkenergy.math import baselines, nulls
from qkenergy.math import montecarlo as mc


def _summaries(G: np.ndarray, n: int) -> dict[str, np.ndarray]:
    """Statistics of G computed here, independently of qkenergy.math.statistics (docs/mathematics.md §4)."""
    gkk, gqq, gqk = G[:, :n, :n], G[:, n:, n:], G[:, n:, :n]
    norm_l = np.einsum("bij,bij->b", gkk, gqq)
    tr_l2 = np.einsum("bij,bji->b", gqk, gqk)
    return {
        "symmetric_energy": 0.5 + tr_l2 / (2 * norm_l),
        "trace_ratio": np.abs(np.trace(gqk, axis1=1, axis2=2)) / np.sqrt(norm_l),
        "largest_eigenvalue": np.linalg.eigvalsh(G)[:, -1],
        "key_energy_share": np.trace(gkk, axis1=1, axis2=2) / np.trace(G, axis1=1, axis2=2),
    }


@pytest.mark.parametrize("n,N", [(1, 2), (2, 5), (3, 40), (16, 40)])
def test_bartlett_shape_symmetry_and_mean(n, N):
    G = nulls.bartlett_gram(np.random.default_rng(1), n, N, 3000)
    assert G.shape == (3000, 2 * n, 2 * n) and G.dtype == np.float64
    np.testing.assert_allclose(G, np.swapaxes(G, 1, 2), rtol=1e-13, atol=1e-13 * N)
    assert np.all(np.linalg.eigvalsh(G) > 0)
    # E[G] = N I, entrywise within 5 standard errors (Var G_ij = N (1 + delta_ij)).
    se = np.sqrt(N * (1 + np.eye(2 * n)) / G.shape[0])
    assert np.all(np.abs(G.mean(axis=0) - N * np.eye(2 * n)) < 5 * se)


# (16, 32) and (20, 45) run the dlauum route (2n >= 32), the others the batched-matmul route.
@pytest.mark.parametrize("n,N", [(1, 2), (1, 9), (2, 4), (2, 13), (4, 8), (6, 30), (16, 32), (20, 45)])
def test_bartlett_matches_direct_ks(n, N):
    rng = np.random.default_rng(1000 * n + N)
    a = _summaries(nulls.bartlett_gram(rng, n, N, 4000), n)
    b = _summaries(nulls.direct_gram(rng, n, N, 4000), n)
    for name in a:
        assert stats.ks_2samp(a[name], b[name]).pvalue > 1e-3, name


def _bartlett_reference(rng, n, N, size, pairs_per_batch):
    """Plain-numpy oracle of nulls.bartlett_gram: same draws, explicit triangular factors.

    Per sub-batch of pairs: X ~ N(0, 1) of shape (pairs, 2n + 1, 2n), then the
    chi diagonals; sample 2k is U U^T with U = triu(X[k, :2n]), sample 2k + 1
    is L^T L with L = tril(X[k, 1:]); outputs ordered U's first, then L's.
    """
    p = 2 * n
    dof = N - p + 1 + np.arange(p)
    out = []
    for lo in range(0, size, 2 * pairs_per_batch):
        hi = min(size, lo + 2 * pairs_per_batch)
        pairs, full = -(-(hi - lo) // 2), (hi - lo) // 2
        X = rng.standard_normal((pairs, p + 1, p))
        chi = np.sqrt(rng.chisquare(dof, size=(pairs, 2, p)))
        for k in range(pairs):
            U = np.triu(X[k, :p], 1) + np.diag(chi[k, 0])
            out.append(U @ U.T)
        for k in range(full):
            L = np.tril(X[k, 1:], -1) + np.diag(chi[k, 1])
            out.append(L.T @ L)
    return np.array(out)


@pytest.mark.parametrize("n,N", [(1, 2), (2, 5), (16, 40), (17, 34)])
@pytest.mark.parametrize("pairs_per_batch", [1, 3, None])
def test_bartlett_matches_explicit_factors(monkeypatch, n, N, pairs_per_batch):
    # Pins the construction: the buffer layout, the chi degrees of freedom, the
    # in-place dlauum products, the symmetrising copy and sub-batches with odd tails.
    p = 2 * n
    if pairs_per_batch is not None:
        monkeypatch.setattr(nulls, "_BARTLETT_BATCH_VALUES", pairs_per_batch * p * (p + 1))
    size = 13
    G = nulls.bartlett_gram(np.random.default_rng(9), n, N, size)
    ref = _bartlett_reference(np.random.default_rng(9), n, N, size, pairs_per_batch or size)
    np.testing.assert_allclose(G, ref, rtol=1e-12, atol=1e-12 * N)
    if p >= nulls._LAUUM_MIN_P:
        np.testing.assert_array_equal(G, np.swapaxes(G, 1, 2))  # symmetric by construction


@pytest.mark.parametrize("n,N", [(1, 2), (16, 40), (17, 34)])
@pytest.mark.parametrize("pairs_per_batch", [1, 3, None])
def test_bartlett_spectra_match_the_gram_route(monkeypatch, n, N, pairs_per_batch):
    # The null fast path reads each factor in place in the draw buffer (the other triangle
    # belongs to another sample) and must give the spectra of the same G as bartlett_gram,
    # sub-batches with odd tails included.
    statistics = pytest.importorskip("qkenergy.math.statistics")
    p = 2 * n
    if pairs_per_batch is not None:
        monkeypatch.setattr(nulls, "_BARTLETT_BATCH_VALUES", pairs_per_batch * p * (p + 1))
    size = 13
    G = nulls.bartlett_gram(np.random.default_rng(9), n, N, size)
    got = nulls.bartlett_spectra(np.random.default_rng(9), n, N, size, with_h=True)
    want = statistics._gram_spectra(statistics._prepare_gram(G)[0], with_h=True)  # G rescaled there
    # ||L||^2 = sum G_KK * G_QQ (docs/mathematics.md §4), then everything in units of ||L|| (scale-free).
    norm_l_sq = np.einsum("bij,bij->b", G[:, :n, :n], G[:, n:, n:])
    np.testing.assert_allclose(got["norm_l_sq"], norm_l_sq, rtol=1e-12)
    want_l_sq = want["norm_s_sq"] + want["norm_t_sq"]
    unit, want_unit = np.sqrt(got["norm_l_sq"])[:, None], np.sqrt(want_l_sq)[:, None]
    np.testing.assert_allclose(got["eigs"] / unit, want["eigs"] / want_unit, rtol=0, atol=1e-13)
    # h^2 = eig(Z Z^T) on both routes: compare squares (the square root magnifies rounding of small h).
    np.testing.assert_allclose((got["h"] / unit) ** 2, (want["h"] / want_unit) ** 2, rtol=0, atol=1e-13)
    np.testing.assert_allclose(got["norm_s_sq"] / got["norm_l_sq"], want["norm_s_sq"] / want_l_sq, rtol=1e-13)
    np.testing.assert_allclose(
        got["trace_l"] / unit[:, 0], np.einsum("bii->b", G[:, n:, :n]) / unit[:, 0], atol=1e-13
    )


def test_null_law_holds_every_blas_at_one_thread():
    # scipy.linalg brings a second OpenBLAS: it must be held at one thread too while samples
    # are drawn, also when the sampler first loads it inside an outer limit (a survey's worker),
    # and both are given back their threads afterwards. A fresh interpreter: scipy not loaded.
    code = """
import json
from threadpoolctl import threadpool_info
from qkenergy.math import nulls
from qkenergy.base.parallel import single_threaded_blas
seen = []
def spy(*args, **kwargs):
    seen.append(sorted(info["num_threads"] for info in threadpool_info()))
    return spectrum(*args, **kwargs)
spectrum, nulls.fill_core = nulls.fill_core, spy
with single_threaded_blas():
    nulls.null_law_blocks(4, 12, 0, 1, samples=600, names=nulls.NULL_STATISTICS)
for threads in (1, 2):
    nulls.null_law(4, 12, samples=600, names=nulls.NULL_STATISTICS, threads=threads)
print(json.dumps([seen, sorted(info["num_threads"] for info in threadpool_info())]))
"""
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "2", "PYTHONPATH": os.pathsep.join(sys.path)}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    seen, after = json.loads(out.stdout)
    assert len(seen) == 256 + 1200 and all(len(counts) >= 2 and set(counts) == {1} for counts in seen)
    assert len(after) >= 2 and set(after) == {2}


def test_factor_spectrum_ignores_the_other_triangle():
    # A factor in the draw buffer shares its p x p block with another sample: NaN there changes nothing.
    from qkenergy.math.spectrum import CoreBuffers, factor_spectrum

    n, p = 5, 10
    rng = np.random.default_rng(3)
    V = np.triu(rng.standard_normal((p, p)))
    garbage = np.full((p, p), np.nan)
    buffers = CoreBuffers.for_head_dim(n)
    clean = factor_spectrum(V, transposed=False, buffers=buffers, with_h=True)
    for factor, transposed in (
        (np.where(np.triu(np.ones((p, p))) > 0, V, garbage), False),
        (np.where(np.tril(np.ones((p, p))) > 0, V.T, garbage), True),
    ):
        got = factor_spectrum(factor, transposed=transposed, buffers=buffers, with_h=True)
        # The two layouts take different BLAS kernels, so equal up to rounding at each value's scale
        # (NaN from the other triangle would fail): eigenvalues of S to 1e-13 of the largest; h as the
        # square roots of Z Z^T's eigenvalues, whose error is 1e-13 of the largest h^2.
        for a, b in zip(got[:4], clean[:4]):
            np.testing.assert_allclose(a, b, rtol=1e-13, atol=1e-13 * np.max(np.abs(b)))
        np.testing.assert_allclose(got[4] ** 2, clean[4] ** 2, rtol=0, atol=1e-13 * clean[4][0] ** 2)
    # The dense definition: eigenvalues of S = (L + L^T)/2 for C = V (rows K then Q), L = W_K^T W_Q.
    L = V[:n].T @ V[n:]
    S = 0.5 * (L + L.T)
    np.testing.assert_allclose(clean[0], np.linalg.eigvalsh(S), atol=1e-12 * np.linalg.norm(L))
    np.testing.assert_allclose(clean[1:4], [np.sum(S * S), np.sum(L * L), np.trace(L)], rtol=1e-12)
    h = np.linalg.svd(L, compute_uv=False)[:n]
    np.testing.assert_allclose(clean[4] ** 2, h**2, rtol=0, atol=1e-13 * h[0] ** 2)


@pytest.mark.parametrize("n,N", [(2, 3), (4, 4), (3, 1)])
def test_direct_route_below_2n(n, N):
    rng = np.random.default_rng(5)
    G = nulls.null_gram(rng, n, N, 2000)
    np.testing.assert_allclose(G, np.swapaxes(G, 1, 2), rtol=1e-13, atol=1e-13 * N)
    eig = np.linalg.eigvalsh(G)
    # rank N < 2n: 2n - N eigenvalues vanish up to rounding
    assert np.all(np.abs(eig[:, : 2 * n - N]) < 1e-10 * eig[:, -1:])
    assert np.all(eig[:, 2 * n - N :] > 0)
    np.testing.assert_array_equal(G, nulls.direct_gram(np.random.default_rng(5), n, N, 2000))
    if n <= N:
        # Proposition 6 on the direct route: E[s] = (N+1)/(2N) within 5 standard errors.
        s = _summaries(G, n)["symmetric_energy"]
        assert abs(s.mean() - (N + 1) / (2 * N)) < 5 * s.std(ddof=1) / math.sqrt(s.size)


def test_null_gram_dispatch():
    a = nulls.null_gram(np.random.default_rng(3), 2, 4, 5)
    b = nulls.bartlett_gram(np.random.default_rng(3), 2, 4, 5)
    np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("N", [2, 3, 10])
def test_rank_one_exact_law(N):
    # n = 1: s = (1 + cos^2)/2, cos^2 ~ Beta(1/2, (N-1)/2) (docs/mathematics.md §6).
    G = nulls.null_gram(np.random.default_rng(40 + N), 1, N, 5000)
    s = _summaries(G, 1)["symmetric_energy"]
    assert stats.kstest(s, baselines.rank_one_law(N).cdf).pvalue > 1e-3


@pytest.mark.parametrize("n,N", [(3, 8), (16, 33)])
def test_null_gram_chunk_invariance(n, N):
    def sampler(rng, size):
        return nulls.null_gram(rng, n, N, size)

    samples = 3 * mc.BLOCK_SIZE + 5
    ref = mc.draw(sampler, samples, seed=2, chunk_size=mc.BLOCK_SIZE)
    for chunk in (3 * mc.BLOCK_SIZE, samples):
        np.testing.assert_array_equal(mc.draw(sampler, samples, seed=2, chunk_size=chunk), ref)


@pytest.mark.parametrize(
    "call,word",
    [
        (lambda: nulls.bartlett_gram(np.random.default_rng(0), 3, 5, 2), "N >= 2n"),
        (lambda: nulls.bartlett_gram(np.random.default_rng(0), 0, 5, 2), "n"),
        (lambda: nulls.direct_gram(np.random.default_rng(0), 2, 0, 2), "N"),
        (lambda: nulls.null_gram(np.random.default_rng(0), 2, 4, -1), "size"),
        (lambda: nulls.null_gram(np.random.default_rng(0), 2.0, 4, 1), "n"),
        (lambda: nulls.null_law(2, 4, samples=1), "samples"),
        (lambda: nulls.null_law(2, 4, seed=-1), "seed"),
        (lambda: nulls.null_law(0, 4), "n"),
    ],
)
def test_bad_arguments(call, word):
    with pytest.raises(QKEnergyError, match=word):
        call()


# ----------------------------------------------------------------------------- NullLaw


def _synthetic(values):
    values = np.asarray(values, dtype=np.float64).reshape(-1, 1)
    return nulls.NullLaw(n=2, N=4, seed=0, names=("rho",), values=values)


def test_p_two_sided_formula_and_nan():
    null = np.array([0.1, 0.2, 0.2, 0.3, 0.5, np.nan])
    law = _synthetic(null)
    finite = null[np.isfinite(null)]
    k = finite.size
    xs = np.array([-1.0, 0.1, 0.2, 0.25, 0.5, 9.0, np.nan])
    p = law.p_two_sided("rho", xs)
    for x, px in zip(xs, p):
        if np.isnan(x):
            assert np.isnan(px)
            continue
        expected = min(1.0, 2 * min(1 + np.sum(finite <= x), 1 + np.sum(finite >= x)) / (1 + k))
        assert px == pytest.approx(expected)
    assert np.nanmin(p) > 0
    assert isinstance(law.p_two_sided("rho", 0.2), float)
    assert math.isnan(law.p_two_sided("rho", math.nan))


def test_summaries_of_synthetic_law():
    x = np.random.default_rng(0).standard_normal(1001)
    law = _synthetic(np.append(x, np.nan))
    finite = x
    assert law.size == 1002
    assert law.mean("rho") == pytest.approx(finite.mean())
    assert law.sd("rho") == pytest.approx(finite.std(ddof=1))
    assert law.stderr("rho") == pytest.approx(finite.std(ddof=1) / math.sqrt(finite.size))
    np.testing.assert_allclose(law.quantiles("rho", [0.1, 0.5]), np.quantile(finite, [0.1, 0.5]))
    z = law.z("rho", np.array([0.0, np.nan]))
    assert z[0] == pytest.approx(-finite.mean() / finite.std(ddof=1)) and np.isnan(z[1])
    assert law.exact_mean("rho") is None
    with pytest.raises(QKEnergyError, match="unknown statistic"):
        law.mean("nope")
    with pytest.raises(QKEnergyError, match=r"^q must lie in \[0, 1\]"):
        law.quantiles("rho", [1.5])
    with pytest.raises(ValueError):
        law.samples("rho")[0] = 1.0  # read-only


statistics = pytest.importorskip("qkenergy.math.statistics")


@pytest.fixture(scope="module")
def small_law():
    return nulls.null_law(2, 6, samples=1500, seed=3)


def test_null_law_columns_and_exact_mean(small_law):
    law = small_law
    assert law.names == tuple(statistics.STATISTICS)
    assert law.values.shape == (1500, len(law.names))
    assert law.mean("symmetric_energy") == (6 + 1) / 12
    assert law.stderr("symmetric_energy") == 0.0
    s = law.samples("symmetric_energy")
    # The Monte Carlo mean agrees with the exact one (Proposition 6) within 5 standard errors.
    assert abs(s.mean() - 7 / 12) < 5 * s.std(ddof=1) / math.sqrt(s.size)
    # Balanced Gaussian heads with N >= 2n: n positive and n negative eigenvalues of S.
    np.testing.assert_array_equal(law.samples("n_pos"), 2)
    np.testing.assert_array_equal(law.samples("balance"), 1)
    assert law.stderr("rho") > 0
    q = law.quantiles("symmetric_energy", [0.025, 0.5, 0.975])
    assert q[0] < q[1] < q[2]
    assert law.p_two_sided("symmetric_energy", q[1]) > 0.5


def test_null_law_matches_gram_statistics(small_law):
    # The null law reads the Bartlett factors directly; the Gram route forms G from
    # the same draws and re-factors it: the same numbers to rounding.
    G = mc.draw(lambda rng, size: nulls.null_gram(rng, 2, 6, size), 1500, seed=3)
    cols = statistics.gram_statistics(G, 6).columns()
    for name in statistics.STATISTICS:
        np.testing.assert_allclose(small_law.samples(name), cols[name], rtol=1e-12, atol=1e-13, err_msg=name)
    ours = _summaries(G, 2)
    np.testing.assert_allclose(small_law.samples("symmetric_energy"), ours["symmetric_energy"], rtol=1e-10)
    np.testing.assert_allclose(small_law.samples("trace_ratio"), ours["trace_ratio"], rtol=1e-8, atol=1e-12)


def test_null_law_chunk_invariance():
    samples = 2 * mc.BLOCK_SIZE + 7
    ref = nulls.null_law(3, 7, samples=samples, seed=1, chunk_size=mc.BLOCK_SIZE).values
    for chunk in (3 * mc.BLOCK_SIZE, samples):
        got = nulls.null_law(3, 7, samples=samples, seed=1, chunk_size=chunk).values
        np.testing.assert_array_equal(got, ref)


def test_null_law_threads_and_names():
    # Bitwise the same whatever the threads; a subset of names gives the same columns.
    samples = 3 * mc.BLOCK_SIZE + 5
    names = nulls.NULL_STATISTICS
    one = nulls.null_law(16, 40, samples=samples, seed=4, names=names, threads=1)
    two = nulls.null_law(
        16, 40, samples=samples, seed=4, names=names, threads=2, chunk_size=2 * mc.BLOCK_SIZE
    )
    np.testing.assert_array_equal(one.values, two.values)
    every = nulls.null_law(16, 40, samples=samples, seed=4)
    for name in names:
        np.testing.assert_array_equal(one.samples(name), every.samples(name))
    with pytest.raises(QKEnergyError, match="unknown statistic"):
        nulls.null_law(2, 6, samples=10, names=("nope",))


def test_null_law_blocks_join_to_the_law():
    # Blocks drawn apart (as a survey's Dask workers draw them), joined in order: bitwise the law,
    # whatever the grouping; a range outside the law is refused.
    samples = 2 * mc.BLOCK_SIZE + 5
    names = nulls.NULL_STATISTICS
    law = nulls.null_law(16, 40, samples=samples, seed=4, names=names)
    assert mc.block_count(samples) == 3
    for bounds in ([0, 1, 2, 3], [0, 2, 3], [0, 3]):
        parts = [
            nulls.null_law_blocks(16, 40, a, b, samples=samples, seed=4, names=names)
            for a, b in itertools.pairwise(bounds)
        ]
        joined = nulls.null_law_from_blocks(16, 40, parts, seed=4, names=names)
        np.testing.assert_array_equal(joined.values, law.values)
        assert (joined.n, joined.N, joined.seed, joined.names) == (16, 40, 4, names)
    with pytest.raises(QKEnergyError, match=r"blocks \[2, 4\)"):
        nulls.null_law_blocks(16, 40, 2, 4, samples=samples, seed=4)


def test_null_law_rank_one_exact():
    law = nulls.null_law(1, 5, samples=3000, seed=8)
    s = law.samples("symmetric_energy")
    assert stats.kstest(s, baselines.rank_one_law(5).cdf).pvalue > 1e-3


def test_null_law_below_2n_uses_direct_route():
    law = nulls.null_law(3, 4, samples=600, seed=2)
    assert law.mean("symmetric_energy") == 5 / 8
    law = nulls.null_law(5, 3, samples=600, seed=2)
    assert law.exact_mean("symmetric_energy") is None  # Proposition 6 needs n <= N
    assert np.isfinite(law.mean("symmetric_energy"))

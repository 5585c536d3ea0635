"""The rotation null (math/rotation.py) and the Beta tail (math/tails.py) against direct sampling.

Fixed seeds throughout. Means are checked within 5 standard errors, laws by
two-sample (or one-sample, against an exact cdf) KS tests passing at p > 1e-3.
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from qkenergy.base.errors import QKEnergyError
from qkenergy.math import baselines, montecarlo, nulls, rotation, tails
from qkenergy.math.gram import gram_energies, head_gram
from qkenergy.math.statistics import head_statistics

KS_ALPHA = 1e-3
TOLERANCE_SE = 5.0


def _low_rank_head(rng: np.random.Generator, n: int, N: int, rank: int) -> tuple[np.ndarray, np.ndarray]:
    """W_Q of rank ``rank`` (its rows repeat), W_K of full rank with an anisotropic spectrum."""
    w_query = np.zeros((n, N))
    w_query[:rank] = rng.standard_normal((rank, N))
    w_query[rank:] = 0.5 * w_query[: n - rank]
    w_key = np.diag(2.0 ** -np.arange(n)) @ rng.standard_normal((n, N))
    return w_query, w_key


def _direct(w_query: np.ndarray, w_key: np.ndarray, size: int, seed: int) -> np.ndarray:
    """ROTATION_STATISTICS of [W_K; W_Q U] with U from the QR of an N x N Gaussian (sign fixed)."""
    n, N = w_query.shape
    U = rotation.haar_orthogonal(np.random.default_rng(seed), N, size)
    rotated = np.broadcast_to(w_query, (size, n, N)) @ U
    return head_statistics(rotated, np.broadcast_to(w_key, (size, n, N))).stack(rotation.ROTATION_STATISTICS)


def test_haar_orthogonal() -> None:
    U = rotation.haar_orthogonal(np.random.default_rng(0), 6, 50)
    np.testing.assert_allclose(U @ np.swapaxes(U, 1, 2), np.broadcast_to(np.eye(6), (50, 6, 6)), atol=1e-12)


@pytest.mark.parametrize(("r_Q", "r_K", "N"), [(2, 3, 9), (4, 3, 5)])  # Bartlett; direct Y (N < r_Q + r_K)
def test_haar_block_matches_direct_haar(r_Q: int, r_K: int, N: int) -> None:
    size = 4000
    B = rotation.haar_block(np.random.default_rng(1), r_Q, r_K, N, size)
    direct = rotation.haar_orthogonal(np.random.default_rng(2), N, size)[:, :r_Q, :r_K]
    for a, b in ((B[:, 0, 0], direct[:, 0, 0]), (B[:, -1, -1], direct[:, -1, -1])):
        assert stats.ks_2samp(a, b).pvalue > KS_ALPHA
    frob = np.sum(B * B, axis=(1, 2)), np.sum(direct * direct, axis=(1, 2))
    assert stats.ks_2samp(*frob).pvalue > KS_ALPHA
    # Singular values of a block of an orthogonal matrix never exceed 1.
    assert np.linalg.svd(B, compute_uv=False).max() <= 1 + 1e-12


@pytest.mark.parametrize("rank", [1, 2, 4])
def test_rotation_law_matches_direct_haar(rank: int) -> None:
    """Exact O(n^3) sampler against rotating W_Q by a directly sampled Haar U, low and full rank."""
    w_query, w_key = _low_rank_head(np.random.default_rng(rank), 4, 12, rank)
    law = rotation.rotation_law(head_gram(w_query, w_key), 12, samples=3000, seed=3)
    assert rotation.rotated_head(head_gram(w_query, w_key), 12).ranks == (rank, 4)
    direct = _direct(w_query, w_key, 3000, seed=4)
    for j, name in enumerate(rotation.ROTATION_STATISTICS):
        x, y = law.samples(name), direct[:, j]
        assert stats.ks_2samp(x[np.isfinite(x)], y[np.isfinite(y)]).pvalue > KS_ALPHA, name


@pytest.mark.parametrize("rank", [1, 3, 6])
def test_rotation_mean_is_exact_for_any_head(rank: int) -> None:
    """E[s(L U)] = (N+1)/(2N) for every fixed L (within 5 SE), through the cheap s-only route."""
    N = 10
    w_query, w_key = _low_rank_head(np.random.default_rng(10 + rank), 6, N, rank)
    head = rotation.rotated_head(head_gram(w_query, w_key), N)
    s = montecarlo.draw(lambda rng, size: rotation.rotation_symmetric_energy(rng, head, size), 40_000, seed=5)
    estimate = montecarlo.estimate_mean(s)
    assert estimate.within(baselines.symmetric_ratio(N), TOLERANCE_SE)
    # The s-only route and the Gram-route statistics agree draw by draw.
    law = rotation.rotation_law(head_gram(w_query, w_key), N, samples=300, seed=6)
    cheap = rotation.rotation_law(
        head_gram(w_query, w_key), N, samples=300, seed=6, names=("symmetric_energy",)
    )
    np.testing.assert_allclose(cheap.samples("symmetric_energy"), law.samples("symmetric_energy"), atol=1e-12)


def test_rank_one_head_follows_the_rank_one_law() -> None:
    """L = k q^T: s(L U) = (1 + cos^2)/2 with U^T q uniform, the law of a rank-one Gaussian head."""
    N = 20
    rng = np.random.default_rng(7)
    w_query, w_key = np.zeros((2, 4, N))
    w_query[0], w_key[0] = rng.standard_normal((2, N))
    law = rotation.rotation_law(head_gram(w_query, w_key), N, samples=4000, seed=8)
    assert stats.kstest(law.samples("symmetric_energy"), baselines.rank_one_law(N).cdf).pvalue > KS_ALPHA


def test_low_rank_heads_separate_the_two_nulls() -> None:
    """Pairing under the rotation null of a low-effective-rank head is far wider than the Gaussian one."""
    n, N = 8, 64
    gaussian = nulls.null_law(n, N, samples=2000, seed=1)
    rng = np.random.default_rng(9)
    geometric = np.diag(2.0 ** -np.arange(n))
    low = rotation.rotation_law(
        head_gram(geometric @ rng.standard_normal((n, N)), geometric @ rng.standard_normal((n, N))),
        N,
        samples=2000,
        seed=2,
    )
    x, y = low.samples("pairing"), gaussian.samples("pairing")
    assert stats.ks_2samp(x[np.isfinite(x)], y[np.isfinite(y)]).pvalue < 1e-6
    assert low.sd("pairing") > 2 * gaussian.sd("pairing")
    # The exact mean of s is the same under both nulls.
    assert low.mean("symmetric_energy") == gaussian.mean("symmetric_energy") == (N + 1) / (2 * N)


def test_rotation_law_is_reproducible_and_rejects_zero_heads() -> None:
    w_query, w_key = _low_rank_head(np.random.default_rng(0), 4, 12, 2)
    G = head_gram(w_query, w_key)
    a = rotation.rotation_law(G, 12, samples=300, seed=11)
    b = rotation.rotation_law(G, 12, samples=300, seed=11)
    np.testing.assert_array_equal(a.values, b.values)
    with pytest.raises(QKEnergyError, match="zero head"):
        rotation.rotation_law(np.zeros((8, 8)), 12)
    with pytest.raises(QKEnergyError, match="r_Q, r_K <= N"):
        rotation.haar_block(np.random.default_rng(0), 5, 1, 4, 1)


# ----------------------------------------------------------------------------- Beta tail


def test_matched_beta_is_exact_for_iid_square_gaussian() -> None:
    """s ~ Beta(N(N+1)/4, N(N-1)/4) exactly: the Beta matched to its mean and variance is that law."""
    for N in (3, 10):
        exact = baselines.gaussian_square_law(N)
        matched = tails.matched_beta(exact.mean(), exact.var())
        np.testing.assert_allclose(matched.args, exact.args, rtol=1e-10)
        # From simulated moments, the matched tail agrees with the exact one within sampling error.
        s = montecarlo.energy_samples("square", "gaussian", N, samples=20_000, seed=N)[:, 3]
        fitted = tails.matched_beta(s.mean(), s.var(ddof=1))
        q = exact.ppf(0.01)
        count = np.sum(s <= q)  # binomial(K, 0.01): 5 SE tolerance
        assert abs(count - 200) <= TOLERANCE_SE * np.sqrt(20_000 * 0.01 * 0.99)
        assert fitted.cdf(q) == pytest.approx(0.01, rel=0.15)


def test_beta_tail_against_the_empirical_gaussian_head_null() -> None:
    """Where both exist (a Gaussian head, n = 16, N = 128), the Beta tail matches the empirical one (5 SE)."""
    K, n, N = 10_000, 16, 128
    s = montecarlo.draw(
        lambda rng, size: gram_energies(nulls.null_gram(rng, n, N, size)).symmetric_ratio, K, seed=1
    )
    beta = tails.matched_beta(baselines.symmetric_ratio(N), s.var(ddof=1))
    for q in (0.01, 0.001):
        se = np.sqrt(q * (1 - q) / K)
        assert abs(np.mean(s <= beta.ppf(q)) - q) <= TOLERANCE_SE * se
        assert abs(np.mean(s >= beta.isf(q)) - q) <= TOLERANCE_SE * se
    p = tails.beta_p_two_sided(np.array([385 / 768, 0.6, np.nan]), 385 / 768, 0.0018**2)
    assert p[0] == pytest.approx(1.0, abs=0.05) and 0 <= p[1] < 1e-100 and np.isnan(p[2])
    assert tails.matched_beta(0.5, 0.5) is None  # no Beta law has this variance

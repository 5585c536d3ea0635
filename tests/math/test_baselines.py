"""Closed forms of Corollary 1, Corollary 2, Proposition 6 and the exact laws of s.

Statistical checks use fixed seeds and a tolerance of 5 standard errors.
"""

import math

import numpy as np
import pytest
from scipy import stats

from qkenergy.base.errors import QKEnergyError
from qkenergy.math import baselines


@pytest.mark.parametrize("N", [1, 2, 3, 10, 768])
@pytest.mark.parametrize("sigma2", [1.0, 0.25, 3.0])
def test_corollary1_closed_form(N, sigma2):
    e = baselines.iid_square_expectations(N, sigma2)
    assert e.total == pytest.approx(N * N * sigma2)
    assert e.symmetric == pytest.approx(N * (N + 1) / 2 * sigma2)
    assert e.skew == pytest.approx(N * (N - 1) / 2 * sigma2)
    assert e.symmetric + e.skew == pytest.approx(e.total)  # Lemma 5
    assert e.symmetric_ratio == pytest.approx(e.symmetric / e.total)
    assert e.skew_ratio == pytest.approx(e.skew / e.total)
    assert e.symmetric_ratio == pytest.approx((N + 1) / (2 * N))
    assert e.skew_ratio == pytest.approx((N - 1) / (2 * N))
    assert baselines.corollary1(N, sigma2) == e


@pytest.mark.parametrize("n,N", [(1, 1), (1, 5), (4, 8), (64, 768), (9, 3)])
def test_corollary2_closed_form(n, N):
    e = baselines.qk_product_expectations(n, N, 2.0, 0.5)
    v = 2.0 * 0.5
    assert e.total == pytest.approx(n * N * N * v)
    assert e.symmetric == pytest.approx(n * N * (N + 1) / 2 * v)
    assert e.skew == pytest.approx(n * N * (N - 1) / 2 * v)
    assert e.symmetric_ratio == pytest.approx((N + 1) / (2 * N))
    assert e.skew_ratio == pytest.approx((N - 1) / (2 * N))
    assert baselines.corollary2(n, N, 2.0, 0.5) == e


@pytest.mark.parametrize("n,N", [(1, 1), (1, 2), (3, 3), (64, 768)])
def test_proposition6(n, N):
    r = baselines.gaussian_head_ratio_expectations(n, N)
    assert r.symmetric == pytest.approx((N + 1) / (2 * N))
    assert r.skew == pytest.approx((N - 1) / (2 * N))
    assert r.symmetric + r.skew == pytest.approx(1.0)
    assert baselines.proposition6(n, N) == r
    assert baselines.symmetric_ratio(N) == r.symmetric
    assert baselines.skew_ratio(N) == r.skew


@pytest.mark.parametrize(
    "call,word",
    [
        (lambda: baselines.iid_square_expectations(0), "N"),
        (lambda: baselines.iid_square_expectations(-3), "N"),
        (lambda: baselines.iid_square_expectations(2.5), "N"),
        (lambda: baselines.iid_square_expectations(2.0), "N"),
        (lambda: baselines.iid_square_expectations(True), "N"),
        (lambda: baselines.iid_square_expectations("3"), "N"),
        (lambda: baselines.iid_square_expectations(3, 0.0), "sigma2"),
        (lambda: baselines.iid_square_expectations(3, -1.0), "sigma2"),
        (lambda: baselines.iid_square_expectations(3, math.nan), "sigma2"),
        (lambda: baselines.iid_square_expectations(3, math.inf), "sigma2"),
        (lambda: baselines.qk_product_expectations(0, 3), "n"),
        (lambda: baselines.qk_product_expectations(2, 0), "N"),
        (lambda: baselines.qk_product_expectations(2, 3, 0.0, 1.0), "sigma2_K"),
        (lambda: baselines.qk_product_expectations(2, 3, 1.0, -2.0), "sigma2_Q"),
        (lambda: baselines.gaussian_head_ratio_expectations(4, 3), "n <= N"),
        (lambda: baselines.gaussian_head_ratio_expectations(0, 3), "n"),
        (lambda: baselines.symmetric_ratio(0), "N"),
        (lambda: baselines.skew_ratio(1.5), "N"),
        (lambda: baselines.gaussian_square_law(1), "N"),
        (lambda: baselines.rank_one_law(0), "N"),
    ],
)
def test_bad_arguments(call, word):
    with pytest.raises(QKEnergyError, match=word) as info:
        call()
    assert "\n" not in str(info.value)


def test_numpy_integers_accepted():
    e = baselines.qk_product_expectations(np.int64(2), np.int32(5), np.float32(1.0), 2)
    assert e.total == pytest.approx(2 * 25 * 2)


@pytest.mark.parametrize("N", [2, 3, 8, 50])
def test_exact_laws_have_mean_of_proposition6(N):
    assert baselines.gaussian_square_law(N).mean() == pytest.approx((N + 1) / (2 * N))
    assert baselines.rank_one_law(N).mean() == pytest.approx((N + 1) / (2 * N))
    lo, hi = baselines.rank_one_law(N).support()
    assert (lo, hi) == (0.5, 1.0)


@pytest.mark.parametrize("N", [2, 3, 6])
def test_gaussian_square_law_matches_simulation(N):
    # Corollary 1 exact law: s of an iid Gaussian square L is Beta(N(N+1)/4, N(N-1)/4).
    rng = np.random.default_rng(100 + N)
    L = rng.standard_normal((20000, N, N))
    s = 0.5 + np.einsum("bij,bji->b", L, L) / (2 * np.einsum("bij,bij->b", L, L))
    assert stats.kstest(s, baselines.gaussian_square_law(N).cdf).pvalue > 1e-3
    # Mean within 5 standard errors of (N+1)/(2N).
    assert abs(s.mean() - (N + 1) / (2 * N)) < 5 * s.std(ddof=1) / math.sqrt(s.size)


@pytest.mark.parametrize("N", [2, 4, 20])
def test_rank_one_law_matches_simulation(N):
    # n = 1: L = w_k^T w_q, s = (1 + cos^2)/2 with cos^2 ~ Beta(1/2, (N-1)/2).
    rng = np.random.default_rng(200 + N)
    wk = rng.standard_normal((20000, N)) * 3.0  # unequal variances change nothing
    wq = rng.standard_normal((20000, N))
    c = np.sum(wk * wq, axis=1)
    s = 0.5 + c**2 / (2 * np.sum(wk * wk, axis=1) * np.sum(wq * wq, axis=1))
    assert stats.kstest(s, baselines.rank_one_law(N).cdf).pvalue > 1e-3

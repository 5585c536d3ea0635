"""Monte Carlo engine: chunk invariance, estimators, and the energy experiments
against Corollaries 1, 2 and Proposition 6.

Statistical checks use fixed seeds and a tolerance of 5 standard errors.
"""

import math

import numpy as np
import pytest

from qkenergy.base.errors import QKEnergyError
from qkenergy.math import baselines
from qkenergy.math import montecarlo as mc
from qkenergy.math.entry_laws import entry_law

B = mc.BLOCK_SIZE


def _normal_rows(rng, size):
    return rng.standard_normal((size, 3))


def test_block_generator_is_spawned_child():
    children = np.random.SeedSequence(42).spawn(5)
    for b in (0, 4):
        expected = np.random.Generator(np.random.PCG64(children[b])).random(8)
        np.testing.assert_array_equal(mc.block_generator(42, b).random(8), expected)


@pytest.mark.parametrize("samples", [1, B - 1, B, 3 * B + 17, 7 * B])
def test_draw_chunk_invariance_bitwise(samples):
    ref = mc.draw(_normal_rows, samples, seed=5, chunk_size=B)
    assert ref.shape == (samples, 3)
    for chunk in (1, 3 * B, 3 * B - 5, None, 100 * B):
        np.testing.assert_array_equal(mc.draw(_normal_rows, samples, seed=5, chunk_size=chunk), ref)


def test_draw_prefix_property_and_seeds():
    a = mc.draw(_normal_rows, 2 * B + 3, seed=1)
    b = mc.draw(_normal_rows, 5 * B, seed=1)
    np.testing.assert_array_equal(a[: 2 * B], b[: 2 * B])  # whole blocks are shared
    c = mc.draw(_normal_rows, 2 * B + 3, seed=2)
    assert not np.array_equal(a, c)


def test_draw_transform_per_chunk():
    out = mc.draw(_normal_rows, 3 * B + 1, seed=0, chunk_size=2 * B, transform=lambda x: np.sum(x, axis=1))
    ref = mc.draw(_normal_rows, 3 * B + 1, seed=0).sum(axis=1)
    assert out.shape == (3 * B + 1,)
    np.testing.assert_array_equal(out, ref)


def test_draw_progress_runs():
    out = mc.draw(_normal_rows, 4 * B, seed=0, chunk_size=B, progress=True)
    assert out.shape == (4 * B, 3)


@pytest.mark.parametrize(
    "kwargs,word",
    [
        (dict(samples=0, seed=0), "samples"),
        (dict(samples=10, seed=-1), "seed"),
        (dict(samples=10, seed=1.5), "seed"),
        (dict(samples=10, seed=0, chunk_size=0), "chunk_size"),
    ],
)
def test_draw_bad_arguments(kwargs, word):
    with pytest.raises(QKEnergyError, match=word):
        mc.draw(_normal_rows, **kwargs)


def test_draw_checks_sampler_shape():
    with pytest.raises(ValueError, match="leading axis"):
        mc.draw(lambda rng, size: rng.random(size + 1), 10, seed=0)


def test_estimate_mean():
    x = np.array([1.0, 2.0, 3.0, 4.0])
    e = mc.estimate_mean(x)
    assert e.value == 2.5 and e.samples == 4
    assert e.stderr == pytest.approx(np.std(x, ddof=1) / 2)
    assert e.ci_low < 2.5 < e.ci_high
    assert e.ci_high - e.value == pytest.approx(3.182446305 * e.stderr, rel=1e-6)  # t_3
    assert e.within(2.5 + 4 * e.stderr) and not e.within(2.5 + 6 * e.stderr)
    with pytest.raises(QKEnergyError):
        mc.estimate_mean(np.array([]))
    assert math.isnan(mc.estimate_mean(np.array([1.0, np.nan])).value)


def test_estimate_ratio_delta_method():
    rng = np.random.default_rng(9)
    den = rng.exponential(size=1000) + 1
    e = mc.estimate_ratio(2 * den, den)
    assert e.value == pytest.approx(2.0) and e.stderr == pytest.approx(0.0, abs=1e-15)
    # The delta-method stderr matches the spread of the estimator over replicates.
    reps, k = 400, 200
    num = rng.exponential(size=(reps, k)) + rng.standard_normal((reps, k))
    den = rng.exponential(size=(reps, k)) + 0.5
    values = num.mean(axis=1) / den.mean(axis=1)
    ses = [mc.estimate_ratio(a, b).stderr for a, b in zip(num, den)]
    assert np.mean(ses) == pytest.approx(values.std(ddof=1), rel=0.15)
    with pytest.raises(QKEnergyError, match="den"):
        mc.estimate_ratio(np.ones(3), np.zeros(3))
    with pytest.raises(QKEnergyError, match="length"):
        mc.estimate_ratio(np.ones(3), np.ones(4))


def _within(est, target, k=5.0):
    # 5 standard errors, plus float slack for zero-variance cases (Rademacher ||L||^2).
    return abs(est.value - target) <= k * est.stderr + 1e-9 * abs(target)


@pytest.mark.parametrize("N", [1, 2, 5, 16])
@pytest.mark.parametrize("law", ["gaussian", "exponential", "bernoulli:0.1", "student_t:5", "rademacher"])
def test_corollary1_monte_carlo(N, law):
    e = mc.energy_expectations("square", law, N, samples=20_000, seed=11, sigma2=2.0)
    base = baselines.iid_square_expectations(N, 2.0)
    assert e.baseline == base
    assert _within(e.total, base.total)
    assert _within(e.symmetric, base.symmetric)
    assert _within(e.skew, base.skew) if N > 1 else e.skew.value == 0.0
    assert _within(e.ratio_of_expectations, base.symmetric_ratio)


@pytest.mark.parametrize("n,N", [(1, 3), (4, 8), (8, 4), (2, 32)])
@pytest.mark.parametrize("law", ["gaussian", "rademacher", "exponential", "lognormal", "uniform"])
def test_corollary2_monte_carlo(n, N, law):
    e = mc.energy_expectations("qk", law, N, n, samples=8_000, seed=12, sigma2_K=3.0, sigma2_Q=0.5)
    base = baselines.qk_product_expectations(n, N, 3.0, 0.5)
    assert _within(e.total, base.total)
    assert _within(e.symmetric, base.symmetric)
    assert _within(e.skew, base.skew)
    assert _within(e.ratio_of_expectations, base.symmetric_ratio)


@pytest.mark.parametrize("N", [2, 3, 7])
def test_gaussian_square_expectation_of_ratio(N):
    # Corollary 1, Gaussian case: E[s] = (N+1)/(2N) = mean of Beta(N(N+1)/4, N(N-1)/4).
    e = mc.energy_expectations("square", "gaussian", N, samples=50_000, seed=13)
    assert _within(e.expectation_of_ratio, (N + 1) / (2 * N))
    assert baselines.gaussian_square_law(N).mean() == pytest.approx((N + 1) / (2 * N))


@pytest.mark.parametrize("n,N", [(1, 4), (3, 5), (4, 4), (2, 64)])
def test_proposition6_expectation_of_ratio(n, N):
    e = mc.energy_expectations("qk", "gaussian", N, n, samples=20_000, seed=14, sigma2_K=5.0, sigma2_Q=0.1)
    assert _within(e.expectation_of_ratio, baselines.proposition6(n, N).symmetric)


@pytest.mark.parametrize(
    "law,expected",
    [("exponential", 0.7668), ("lognormal", 0.7839), ("bernoulli:0.1", 0.9031)],
)
def test_skewed_laws_depart_at_N2(law, expected):
    # Reference values from 2e6 samples (stderr ~0.0002; docs/mathematics.md §5); here 2e5 samples and 5 combined SEs.
    e = mc.energy_expectations("square", law, 2, samples=200_000, seed=15)
    se = math.hypot(e.expectation_of_ratio.stderr, 0.0002)
    assert abs(e.expectation_of_ratio.value - expected) < 5 * se
    # ... while the ratio of expectations stays at (N+1)/(2N) = 0.75 (Corollary 1).
    assert _within(e.ratio_of_expectations, 0.75)
    assert e.expectation_of_ratio.value - 0.75 > 10 * e.expectation_of_ratio.stderr


def test_rademacher_ratio_and_expectation_agree():
    # ||L||^2 is constant for +-1 entries, so E[s] = E||S||^2/E||L||^2 exactly per sample set.
    e = mc.energy_expectations("square", "rademacher", 2, samples=50_000, seed=16)
    assert e.expectation_of_ratio.value == pytest.approx(e.ratio_of_expectations.value, rel=1e-12)
    assert e.total.stderr == 0.0


@pytest.mark.parametrize("model,N,n", [("square", 4, None), ("qk", 6, 3)])
def test_energy_chunk_invariance_bitwise(model, N, n):
    samples = 5 * B + 11
    ref = mc.energy_samples(model, "exponential", N, n, samples=samples, seed=17, chunk_size=B)
    for chunk in (3 * B, samples):
        np.testing.assert_array_equal(
            mc.energy_samples(model, "exponential", N, n, samples=samples, seed=17, chunk_size=chunk), ref
        )
    # Lemma 5 per sample: ||L||^2 = ||S||^2 + ||T||^2.
    np.testing.assert_allclose(ref[:, 1] + ref[:, 2], ref[:, 0], rtol=1e-12)


def test_energy_samples_match_dense_computation():
    x = mc.energy_samples("qk", "gaussian", 5, 2, samples=3, seed=3)
    rng = mc.block_generator(3, 0)
    law = entry_law("gaussian")
    wk = law.sample(rng, (3, 2, 5))
    wq = law.sample(rng, (3, 2, 5))
    L = np.swapaxes(wk, 1, 2) @ wq
    S = (L + np.swapaxes(L, 1, 2)) / 2
    T = (L - np.swapaxes(L, 1, 2)) / 2
    np.testing.assert_allclose(x[:, 0], (L**2).sum(axis=(1, 2)), rtol=1e-12)
    np.testing.assert_allclose(x[:, 1], (S**2).sum(axis=(1, 2)), rtol=1e-12)
    np.testing.assert_allclose(x[:, 2], (T**2).sum(axis=(1, 2)), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(x[:, 3], x[:, 1] / x[:, 0], rtol=1e-12)


@pytest.mark.parametrize(
    "args,kwargs,word",
    [
        (("cube", "gaussian", 3), dict(samples=10, seed=0), "model"),
        (("square", "gaussian", 3, 2), dict(samples=10, seed=0), "n"),
        (("qk", "gaussian", 3), dict(samples=10, seed=0), "n"),
        (("qk", "gaussian", 3, 0), dict(samples=10, seed=0), "n"),
        (("square", "gaussian", 0), dict(samples=10, seed=0), "N"),
        (("square", "cauchy", 3), dict(samples=10, seed=0), "cauchy"),
        (("square", "gaussian", 3), dict(samples=0, seed=0), "samples"),
        (("square", "gaussian", 3), dict(samples=10, seed=-2), "seed"),
        (("square", "gaussian", 3), dict(samples=10, seed=0, sigma2=0.0), "sigma2"),
        (("qk", "gaussian", 3, 2), dict(samples=10, seed=0, sigma2_Q=-1.0), "sigma2_Q"),
    ],
)
def test_energy_bad_arguments(args, kwargs, word):
    with pytest.raises(QKEnergyError, match=word):
        mc.energy_expectations(*args, **kwargs)

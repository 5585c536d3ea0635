"""Lemma 6 (proportional lobes): positive laws and the departure curve D_n.

Statistical checks use fixed seeds; the monotone-decay checks compare means
over repeats whose standard errors are far below the gaps tested.
"""

import math

import numpy as np
import pytest

from qkenergy.base.errors import QKEnergyError
from qkenergy.math import lobes

NS = [100, 1_000, 10_000, 100_000]


@pytest.mark.parametrize(
    "spec,second",
    [
        ("exponential", 2.0),
        ("half_normal", 1.0),
        ("lognormal", math.e**2),
        ("chi:3", 3.0),
        ("pareto:3", 3.0),
        ("pareto:1.5", math.inf),
        ("pareto:2", math.inf),
    ],
)
def test_positive_laws(spec, second):
    law = lobes.positive_law(spec)
    assert law.second_moment == pytest.approx(second)
    assert law.finite_second_moment == math.isfinite(second)
    x = law.sample(np.random.default_rng(0), 200_000)
    assert x.shape == (200_000,) and np.all(x > 0)
    if math.isfinite(second) and not spec.startswith("pareto"):
        # E[X^2] within 5 standard errors.
        se = np.std(x**2, ddof=1) / math.sqrt(x.size)
        assert abs(np.mean(x**2) - second) < 5 * se
    if spec.startswith("pareto"):
        assert x.min() >= 1.0


def test_positive_law_parsing():
    assert lobes.positive_law("pareto:1.5") == lobes.positive_law("pareto", alpha=1.5)
    assert lobes.positive_law("chi:k=4").params == (("k", 4.0),)
    assert lobes.positive_law("Half-Normal").name == "half_normal"
    law = lobes.positive_law("lognormal:0.5")
    assert lobes.positive_law(law.spec) == law and lobes.positive_law(law) is law


@pytest.mark.parametrize(
    "call,word",
    [
        (lambda: lobes.positive_law("cauchy"), "cauchy"),
        (lambda: lobes.positive_law("pareto:0"), "alpha"),
        (lambda: lobes.positive_law("pareto:x"), "alpha"),
        (lambda: lobes.positive_law("chi:-1"), "k"),
        (lambda: lobes.positive_law("exponential:2"), "exponential"),
        (lambda: lobes.positive_law("pareto", beta=2.0), "beta"),
        (lambda: lobes.lobe_departure_curve("exponential", 0.0, NS, seed=0), "rho"),
        (lambda: lobes.lobe_departure_curve("exponential", math.inf, NS, seed=0), "rho"),
        (lambda: lobes.lobe_departure_curve("exponential", 1.0, [], seed=0), "ns"),
        (lambda: lobes.lobe_departure_curve("exponential", 1.0, [0, 5], seed=0), "ns"),
        (lambda: lobes.lobe_departure_curve("exponential", 1.0, [2.5], seed=0), "ns"),
        (lambda: lobes.lobe_departure_curve("exponential", 1.0, NS, seed=0, repeats=0), "repeats"),
        (lambda: lobes.lobe_departure_curve("exponential", 1.0, NS, seed=-1), "seed"),
    ],
)
def test_bad_arguments(call, word):
    with pytest.raises(QKEnergyError, match=word):
        call()


def test_lobe_departure_values():
    alpha = np.array([3.0, 2.0, 1.0])
    assert lobes.lobe_departure(alpha, 0.5 * alpha, 0.5) == 0.0
    beta = np.array([2.0, 1.0, 0.0])
    assert lobes.lobe_departure(alpha, beta, 1.0) == pytest.approx(math.sqrt(3) / math.sqrt(14))


def test_curve_shapes_and_determinism():
    c = lobes.lobe_departure_curve("half_normal", 0.5, [10, 100], seed=3, repeats=5)
    assert c.values.shape == (5, 2) and c.mean.shape == c.stderr.shape == c.median.shape == (2,)
    assert c.repeats == 5 and c.rho == 0.5 and list(c.ns) == [10, 100]
    np.testing.assert_allclose(c.mean, c.values.mean(axis=0))
    np.testing.assert_allclose(c.stderr, c.values.std(axis=0, ddof=1) / math.sqrt(5))
    again = lobes.lobe_departure_curve("half_normal", 0.5, [10, 100], seed=3, repeats=5)
    np.testing.assert_array_equal(c.values, again.values)


@pytest.mark.parametrize("law", ["exponential", "half_normal", "chi:3"])
@pytest.mark.parametrize("rho", [0.5, 1.0, 2.0])
def test_lemma6_decay_with_finite_second_moment(law, rho):
    c = lobes.lobe_departure_curve(law, rho, NS, seed=21, repeats=20)
    assert np.all(np.diff(c.mean) < 0)  # decreasing in n
    # Roughly n^(-1/2): ten-fold drop across three decades, and small at n = 1e5.
    assert c.mean[-1] < 0.1 * c.mean[0]
    assert c.mean[-1] < 0.03 * rho


def test_lemma6_fails_for_pareto_15():
    # Tail index 1.5 < 2: infinite second moment, the largest values keep the lobes apart.
    c = lobes.lobe_departure_curve("pareto:1.5", 1.0, NS, seed=21, repeats=20)
    e = lobes.lobe_departure_curve("exponential", 1.0, NS, seed=21, repeats=20)
    assert np.all(c.median > 0.25)
    assert c.median[-1] > 0.5 * c.median[0]
    assert c.median[-1] > 10 * e.median[-1]


def test_large_n_is_fast():
    c = lobes.lobe_departure_curve("exponential", 0.7, [1_000_000], seed=0, repeats=1)
    assert c.mean[0] < 0.01 and math.isnan(c.stderr[0])

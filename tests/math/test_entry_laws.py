"""Centred entry laws: exact centring and scaling, spec parsing, errors.

Statistical checks use fixed seeds and a tolerance of 5 standard errors.
"""

import math

import numpy as np
import pytest
from scipy import stats

from qkenergy.base.errors import QKEnergyError
from qkenergy.math.entry_laws import ENTRY_LAWS, EntryLaw, entry_law

SPECS = [
    "gaussian",
    "rademacher",
    "uniform",
    "exponential",
    "lognormal",
    "lognormal:0.5",
    "bernoulli:0.1",
    "bernoulli:p=0.5",
    "student_t:5",
    "student_t:nu=9",
]


def test_registry_names():
    assert set(ENTRY_LAWS) == {
        "gaussian",
        "rademacher",
        "uniform",
        "exponential",
        "lognormal",
        "bernoulli",
        "student_t",
    }


@pytest.mark.parametrize("spec", SPECS)
@pytest.mark.parametrize("variance", [1.0, 2.5])
def test_mean_zero_and_requested_variance(spec, variance):
    law = entry_law(spec)
    rng = np.random.default_rng(7)
    x = law.sample(rng, 400_000, variance=variance)
    assert x.dtype == np.float64 and x.shape == (400_000,)
    k = x.size
    # 5 standard errors for the mean and for the sample variance
    # (Var of the sample variance ~ (m4 - sigma^4)/K, m4 estimated from the sample).
    assert abs(x.mean()) < 5 * x.std() / math.sqrt(k)
    c = x - x.mean()
    m4 = np.mean(c**4)
    se_var = math.sqrt(max(m4 - variance**2, 0.0) / k)
    assert abs(np.mean(c**2) - variance) < 5 * se_var + 1e-12


@pytest.mark.parametrize(
    "spec,dist",
    [
        ("gaussian", stats.norm()),
        ("uniform", stats.uniform(-1, 2)),
        ("exponential", stats.expon()),
        ("lognormal", stats.lognorm(1.0)),
        ("lognormal:0.3", stats.lognorm(0.3)),
        ("bernoulli:0.1", stats.bernoulli(0.1)),
        ("student_t:5", stats.t(5)),
        ("student_t:2.5", stats.t(2.5)),
    ],
)
def test_exact_variance_matches_scipy(spec, dist):
    assert entry_law(spec).raw_variance == pytest.approx(dist.var(), rel=1e-12)


def test_rademacher_values():
    x = entry_law("rademacher").sample(np.random.default_rng(0), (50, 4), variance=4.0)
    assert x.shape == (50, 4)
    assert set(np.unique(x)) == {-2.0, 2.0}


def test_bernoulli_values():
    x = entry_law("bernoulli:0.25").sample(np.random.default_rng(0), 1000)
    scale = 1 / math.sqrt(0.25 * 0.75)
    np.testing.assert_allclose(np.unique(x), [-0.25 * scale, 0.75 * scale])


def test_deterministic_given_generator():
    law = entry_law("student_t:5")
    a = law.sample(np.random.default_rng(3), (4, 5))
    b = law.sample(np.random.default_rng(3), (4, 5))
    np.testing.assert_array_equal(a, b)


def test_parsing_and_spec_round_trip():
    law = entry_law("bernoulli:0.1")
    assert isinstance(law, EntryLaw)
    assert law.name == "bernoulli" and dict(law.params) == {"p": 0.1}
    assert entry_law(law.spec) == law
    assert entry_law("bernoulli", p=0.1) == law
    assert entry_law("Student-T:5") == entry_law("student_t", nu=5)
    assert entry_law("normal") == entry_law("gaussian")
    assert entry_law("lognormal").params == (("sigma", 1.0),)
    assert entry_law(law) is law
    assert entry_law(law, p=0.3) == entry_law("bernoulli:0.3")
    assert str(entry_law("gaussian")) == "gaussian"
    assert entry_law("gaussian").symmetric and not entry_law("exponential").symmetric


@pytest.mark.parametrize(
    "call,word",
    [
        (lambda: entry_law("cauchy"), "cauchy"),
        (lambda: entry_law("bernoulli:1.5"), "p"),
        (lambda: entry_law("bernoulli:0"), "p"),
        (lambda: entry_law("bernoulli:abc"), "p"),
        (lambda: entry_law("student_t:2"), "nu"),
        (lambda: entry_law("student_t", nu=1.0), "nu"),
        (lambda: entry_law("gaussian:1"), "gaussian"),
        (lambda: entry_law("bernoulli", q=0.3), "q"),
        (lambda: entry_law("lognormal:sigma=-1"), "sigma"),
        (lambda: entry_law("bernoulli:nan"), "p"),
        (lambda: entry_law(3), "entry law"),
        (lambda: entry_law("gaussian").sample(np.random.default_rng(0), 3, variance=0.0), "variance"),
        (lambda: entry_law("gaussian").sample(np.random.default_rng(0), 3, variance=-1), "variance"),
    ],
)
def test_bad_laws(call, word):
    with pytest.raises(QKEnergyError, match=word) as info:
        call()
    assert "\n" not in str(info.value)


def test_unknown_name_lists_valid_ones():
    with pytest.raises(QKEnergyError) as info:
        entry_law("cauchy")
    for name in ENTRY_LAWS:
        assert name in str(info.value)

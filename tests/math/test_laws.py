"""Law: one statistic's null law as a frozen distribution, and NullLaw[name].

Statistical check: fresh draws of a Gaussian null law match the law's own samples in mean
within 5 standard errors (fixed seeds).
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from qkenergy.base.errors import QKEnergyError
from qkenergy.math import nulls
from qkenergy.math.laws import Law
from qkenergy.math.tails import beta_p_two_sided


def test_empirical_cdf_sf_ppf_pvalue() -> None:
    law = Law("x", [3.0, 1.0, np.nan, 2.0, 4.0])  # NaN is kept in samples, left out of the law
    assert law.size == 5 and np.isnan(law.samples[2]) and not law.samples.flags.writeable
    assert law.cdf(2.0) == 0.5 and law.sf(2.0) == 0.5 and law.cdf(0.0) == 0.0 and law.sf(4.0) == 0.0
    np.testing.assert_array_equal(law.cdf([1.0, 4.0]), [0.25, 1.0])
    assert law.ppf(0.0) == 1.0 and law.ppf(1.0) == 4.0 and law.ppf(0.5) == 2.5
    assert law.mean() == 2.5 and law.std() == pytest.approx(np.std([1, 2, 3, 4], ddof=1))
    assert law.pvalue(10.0) == 2 / 5 and law.pvalue(2.5) == 1.0  # 2 (1 + 0) / (1 + 4); capped at 1
    assert math.isnan(law.cdf(np.nan)) and math.isnan(law.pvalue(np.nan))
    with pytest.raises(QKEnergyError, match="^q must lie in"):
        law.ppf(1.5)
    with pytest.raises(QKEnergyError, match="cannot be drawn"):
        law.rvs(2)
    assert Law("x", [1.0, 2.0], exact_mean=7.0).mean() == 7.0
    assert Law("x", [1.0, 2.0], exact_mean=7.0).stderr() == 0.0 and law.defined == 4
    assert law.stderr() == pytest.approx(law.std() / 2)


def test_null_law_items_agree_with_the_null_law() -> None:
    law = nulls.null_law(4, 16, samples=400, seed=5)
    x = np.linspace(0.4, 0.7, 7)
    for name in ("symmetric_energy", "pairing", "stable_rank"):
        one = law[name]
        np.testing.assert_array_equal(one.samples, law.samples(name))
        assert one.mean() == law.mean(name) and one.std() == law.sd(name)
        np.testing.assert_array_equal(one.pvalue(x, tail="empirical"), law.p_two_sided(name, x))
        np.testing.assert_array_equal(one.z(x), law.z(name, x))
        np.testing.assert_allclose(one.ppf([0.1, 0.9]), law.quantiles(name, [0.1, 0.9]))
    assert law["symmetric_energy"].mean() == 17 / 32  # (N + 1) / (2N), exact
    # The default p is the one the table's BH takes: the Beta tail where the empirical p is at its
    # floor (x = 0.4 and 0.7 lie beyond every draw), the empirical p elsewhere; statistics without
    # a tail column keep the empirical p.
    s = law["symmetric_energy"]
    empirical, beyond = s.pvalue(x, tail="empirical"), s.pvalue(x, tail="beta")
    floor = empirical <= 2 / (law.size + 1) * (1 + 1e-12)
    assert floor.tolist() == [True, False, False, False, False, False, True]
    np.testing.assert_array_equal(
        beyond, beta_p_two_sided(x, law.mean("symmetric_energy"), law.sd("symmetric_energy") ** 2)
    )
    np.testing.assert_array_equal(s.pvalue(x), np.where(floor, beyond, empirical))
    np.testing.assert_array_equal(s.p_tail(x), beyond)
    np.testing.assert_array_equal(law["pairing"].pvalue(x), law.p_two_sided("pairing", x))
    with pytest.raises(QKEnergyError, match="tail must be"):
        s.pvalue(0.5, tail="normal")  # type: ignore[arg-type]
    assert "pairing" in law and "nope" not in law
    with pytest.raises(QKEnergyError, match="unknown statistic"):
        law["nope"]


def test_fresh_draws_of_a_gaussian_law() -> None:
    law = nulls.null_law(4, 16, samples=2000, seed=1)["pairing"]
    assert law.drawable
    draws = law.rvs(2000, random_state=2)
    np.testing.assert_array_equal(draws, law.rvs(2000, random_state=np.random.default_rng(2)))
    se = math.hypot(np.std(draws, ddof=1), law.std()) / math.sqrt(2000)
    assert abs(draws.mean() - law.mean()) < 5 * se  # 5 standard errors
    with pytest.raises(QKEnergyError, match="^size must be"):
        law.rvs(0)

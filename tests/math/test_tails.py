"""tails: the two-sided p of the Beta law matched to a null's mean and variance."""

from __future__ import annotations

import math

import numpy as np
import pytest

from qkenergy.math.tails import beta_p_two_sided, matched_beta


@pytest.mark.parametrize(("mean", "var"), [(0.5, 1e-4), (0.5001, 2.5e-9), (0.2, 0.01), (0.93, 3e-6)])
def test_p_is_that_of_the_matched_beta_law(mean: float, var: float) -> None:
    # beta_p_two_sided avoids importing scipy.stats; it must give the frozen law's values exactly,
    # deep in both tails (p far below 1e-16), at the ends of the support and outside it.
    sd = math.sqrt(var)
    x = np.concatenate([mean + sd * np.linspace(-60, 60, 121), [0.0, 1.0, -0.1, 1.1, np.nan]])
    law = matched_beta(mean, var)
    assert law is not None
    expected = np.minimum(1.0, 2.0 * np.minimum(law.cdf(x), law.sf(x)))
    expected[np.isnan(x)] = np.nan
    p = beta_p_two_sided(x, mean, var)
    np.testing.assert_array_equal(p, expected)
    assert np.nanmin(p) < 1e-30  # the tails really were reached


def test_no_matching_beta_law_gives_nan() -> None:
    # A Beta law needs 0 < mean < 1 and 0 < var < mean (1 - mean).
    for mean, var in [(0.5, 0.25), (0.0, 1e-3), (1.0, 1e-3), (0.5, 0.0), (math.nan, 1e-3)]:
        assert matched_beta(mean, var) is None
        assert math.isnan(beta_p_two_sided(0.5, mean, var))  # type: ignore[arg-type]
    assert isinstance(beta_p_two_sided(0.5, 0.5, 1e-3), float)

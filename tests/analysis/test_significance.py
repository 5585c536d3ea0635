"""significance.bh: Benjamini-Hochberg adjusted p-values, written out to spare the scipy.stats import."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import false_discovery_control

from qkenergy.analysis.significance import bh


@pytest.mark.parametrize("m", [1, 2, 7, 144, 2000])
def test_bh_is_scipys_false_discovery_control(m: int) -> None:
    rng = np.random.default_rng(m)
    p = rng.uniform(0, 1, m) ** 4  # many small p, where the adjustment matters
    p[rng.uniform(size=m) < 0.2] = 1e-300  # ties, deep in the tail
    if m > 2:
        p[:2] = [0.0, 1.0]
    np.testing.assert_allclose(bh(p), false_discovery_control(p, method="bh"), rtol=1e-14, atol=0)


def test_bh_skips_nan_and_keeps_the_shape() -> None:
    p = np.array([0.01, np.nan, 0.04, 0.03, np.nan, 0.5])
    out = bh(p)
    finite = np.isfinite(p)
    assert np.isnan(out[~finite]).all()
    np.testing.assert_allclose(out[finite], false_discovery_control(p[finite], method="bh"), rtol=1e-14)
    # sorted 0.01, 0.03, 0.04, 0.5 -> m p_(i) / i = 0.04, 0.06, 0.16 / 3, 0.5 -> minima from the top
    np.testing.assert_allclose(out[finite], [0.04, 0.16 / 3, 0.16 / 3, 0.5], rtol=1e-15)
    assert np.isnan(bh(np.array([np.nan, np.nan]))).all() and bh(np.array([])).shape == (0,)

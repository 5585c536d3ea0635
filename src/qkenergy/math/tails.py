"""Tail probabilities beyond the Monte Carlo floor: a Beta law matched to the null's moments.

An empirical two-sided p-value from K null samples cannot go below 2/(K + 1),
so a head at z = 18 and one at z = 204 read the same. For a statistic in
[0, 1] such as the symmetric energy s, the Beta law with the null's mean m and
variance v,

    Beta(a, b),  a + b = m (1 - m) / v - 1,  a = m (a + b),

gives a smooth tail that reaches any depth. It is an APPROXIMATION of the tail
(exact in one case: for an iid Gaussian square L, s ~ Beta(N(N+1)/4, N(N-1)/4),
whose mean and variance determine it), checked against the empirical law where
both exist (``qkenergy verify``, tests). Use it where the empirical p sits at its
floor, not in place of it.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:  # pragma: no cover
    from scipy.stats import rv_continuous

__all__ = ["TAIL_STATISTICS", "beta_p_two_sided", "matched_beta", "resolved_floor"]

TAIL_STATISTICS: tuple[str, ...] = ("symmetric_energy",)
"""Statistics with a ``_p_tail`` column: bounded in [0, 1], where a matched Beta law makes sense."""


def _beta_parameters(mean: float, var: float) -> tuple[float, float] | None:
    """(a, b) of the Beta law with this mean and variance; None when none exists.

    A Beta law needs 0 < mean < 1 and 0 < var < mean (1 - mean).
    """
    m, v = float(mean), float(var)
    if not (math.isfinite(m) and math.isfinite(v) and 0 < m < 1 and 0 < v < m * (1 - m)):
        return None
    total = m * (1 - m) / v - 1
    return m * total, (1 - m) * total


def matched_beta(mean: float, var: float) -> rv_continuous | None:
    """The Beta law on [0, 1] with this mean and variance (method of moments).

    Parameters
    ----------
    mean : float
        Needs 0 < mean < 1.
    var : float
        Needs 0 < var < mean (1 - mean).

    Returns
    -------
    scipy.stats.rv_continuous or None
        The frozen law; None when no Beta law has these moments.
    """
    parameters = _beta_parameters(mean, var)
    if parameters is None:
        return None
    from scipy import stats  # ~0.5 s import: only when the law itself is asked for

    return stats.beta(*parameters)


def beta_p_two_sided(x: float | np.ndarray, mean: float, var: float) -> np.ndarray | float:
    """Two-sided tail probability min(1, 2 min(F(x), 1 - F(x))) under :func:`matched_beta`.

    F is the matched Beta cdf, the regularized incomplete beta function; its
    upper tail comes from the complementary function, so p stays accurate far
    below 1e-16: the p-value beyond the Monte Carlo floor (docs/mathematics.md §7).

    Parameters
    ----------
    x : float or ndarray
        The observed statistics.
    mean, var : float
        The null law's mean and variance.

    Returns
    -------
    ndarray or float
        p of each x (a float for a scalar x); NaN where x is NaN or no Beta law matches.

    Examples
    --------
    >>> from qkenergy.math.tails import beta_p_two_sided
    >>> float(beta_p_two_sided(0.5, 0.5, 0.01))
    1.0
    """
    xs = np.asarray(x, dtype=np.float64)
    parameters = _beta_parameters(mean, var)
    if parameters is None:
        p = np.full(xs.shape, np.nan)
    else:
        # scipy.special (~0.15 s to import) rather than scipy.stats (~0.5 s): every analysis with
        # a null law asks for this. The same Boost functions as stats.beta's cdf and sf, so the
        # same values bit for bit; x is clipped to the support, where stats.beta gives 0 and 1.
        from scipy import special

        a, b = parameters
        support = np.clip(xs, 0.0, 1.0)
        with np.errstate(invalid="ignore"):
            p = np.minimum(
                1.0, 2.0 * np.minimum(special.betainc(a, b, support), special.betaincc(a, b, support))
            )
        p = np.where(np.isnan(xs), np.nan, p)
    return float(p) if p.ndim == 0 else p


def resolved_floor(samples: int) -> float:
    """The smallest p the matched Beta tail gives to within a factor of 10, for a null of K samples.

    The Beta law's variance v is the null samples' (m is exact): its relative standard
    error is sqrt(2 / (K - 1)). Far in the tail ln p ~ -(x - m)^2 / (2 v), so one standard
    error of v moves ln p by |ln p| sqrt(2 / (K - 1)); that stays within ln 10 while
    log10(1/p) <= sqrt((K - 1) / 2). The floor is that power of ten, rounded towards 1
    (1e-31 for the default K = 2000), and never below 1e-300 (float64 ends near 1e-308).
    A smaller p is printed as "<floor" (docs/statistics.md).

    Parameters
    ----------
    samples : int
        K, the null samples behind the variance.

    Returns
    -------
    float
        10^-e with e = min(300, max(1, floor(sqrt((K - 1) / 2)))).

    Examples
    --------
    >>> resolved_floor(2000), resolved_floor(200)
    (1e-31, 1e-09)
    """
    exponent = math.floor(math.sqrt(max(int(samples) - 1, 0) / 2))
    return 10.0 ** -min(300, max(1, exponent))

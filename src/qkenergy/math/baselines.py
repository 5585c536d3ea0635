"""Closed-form random baselines of the symmetric and skew energy (spec section 2).

- Corollary 1: iid square L (any centred square-integrable entries, variance sigma2).
- Corollary 2: QK product L = W_K^T W_Q with n x N factors.
- Proposition 6: expectation of the ratio ||S||^2/||L||^2 for Gaussian heads.
- Exact laws of s = ||S||^2/||L||^2: Beta(N(N+1)/4, N(N-1)/4) for an iid
  Gaussian square L, and s = (1 + cos^2)/2, cos^2 ~ Beta(1/2, (N-1)/2), for a
  rank-one Gaussian head (n = 1). See docs/mathematics.md §5.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from qkenergy.base.errors import QKEnergyError, check_integer, check_positive

if TYPE_CHECKING:  # scipy.stats costs ~0.7 s to import: only the exact laws below need it
    from scipy import stats

__all__ = [
    "EnergyExpectations",
    "RatioExpectations",
    "corollary1",
    "corollary2",
    "gaussian_head_ratio_expectations",
    "gaussian_square_law",
    "iid_square_expectations",
    "proposition6",
    "qk_product_expectations",
    "rank_one_law",
    "skew_ratio",
    "symmetric_ratio",
]


@dataclass(frozen=True)
class EnergyExpectations:
    """Expected energies E||L||^2, E||S||^2, E||T||^2 and the ratios of expectations (docs/mathematics.md §5).

    These are ratios of expectations; they equal the expectation of the ratio
    only under extra symmetry (Gaussian entries, Proposition 6).

    Parameters
    ----------
    total, symmetric, skew : float
        E||L||^2, E||S||^2 and E||T||^2.
    symmetric_ratio, skew_ratio : float
        E||S||^2 / E||L||^2 and E||T||^2 / E||L||^2.
    """

    total: float
    symmetric: float
    skew: float
    symmetric_ratio: float
    skew_ratio: float


@dataclass(frozen=True)
class RatioExpectations:
    """Expectations of the normalized energies (docs/mathematics.md §5).

    Parameters
    ----------
    symmetric : float
        E[||S||^2 / ||L||^2] = E[s].
    skew : float
        E[||T||^2 / ||L||^2] = 1 - E[s].
    """

    symmetric: float
    skew: float


def symmetric_ratio(N: int) -> float:
    """(N+1)/(2N): E||S||^2/E||L||^2 (Corollaries 1, 2) and E[s] for Gaussian heads (Proposition 6).

    Parameters
    ----------
    N : int
        Residual width (or the size of a square L).

    Returns
    -------
    float
    """
    N = check_integer(N, "N")
    return (N + 1) / (2 * N)


def skew_ratio(N: int) -> float:
    """(N-1)/(2N): E||T||^2/E||L||^2 (Corollaries 1, 2) and E[||T||^2/||L||^2] for Gaussian heads.

    Parameters
    ----------
    N : int
        Residual width (or the size of a square L).

    Returns
    -------
    float
    """
    N = check_integer(N, "N")
    return (N - 1) / (2 * N)


def _expectations(n: int, N: int, v: float) -> EnergyExpectations:
    """E||L||^2 = n N^2 v, E||S||^2 = n N(N+1)/2 v, E||T||^2 = n N(N-1)/2 v (n = 1: the square L)."""
    return EnergyExpectations(
        total=n * N * N * v,
        symmetric=n * N * (N + 1) / 2 * v,
        skew=n * N * (N - 1) / 2 * v,
        symmetric_ratio=symmetric_ratio(N),
        skew_ratio=skew_ratio(N),
    )


def iid_square_expectations(N: int, sigma2: float = 1.0) -> EnergyExpectations:
    """Corollary 1: E||L||^2 = N^2 s2, E||S||^2 = N(N+1)/2 s2, E||T||^2 = N(N-1)/2 s2.

    L is N x N with independent centred entries of common variance s2 = ``sigma2``
    (docs/mathematics.md §5).

    Parameters
    ----------
    N : int
        Size of L.
    sigma2 : float
        Variance of the entries, > 0.

    Returns
    -------
    EnergyExpectations
        The three expected energies and the ratios of expectations (N+1)/(2N), (N-1)/(2N).
    """
    return _expectations(1, check_integer(N, "N"), check_positive(sigma2, "sigma2"))


def qk_product_expectations(
    n: int, N: int, sigma2_K: float = 1.0, sigma2_Q: float = 1.0
) -> EnergyExpectations:
    """Corollary 2: the expected energies of L = W_K^T W_Q with iid centred n x N factors.

    E||L||^2 = n N^2 sK2 sQ2, E||S||^2 = n N(N+1)/2 sK2 sQ2, E||T||^2 = n N(N-1)/2 sK2 sQ2;
    no restriction n <= N is needed (docs/mathematics.md §5).

    Parameters
    ----------
    n : int
        Head dimension (rows of W_K and W_Q).
    N : int
        Residual width.
    sigma2_K, sigma2_Q : float
        Variances sK2, sQ2 of the entries of W_K and W_Q, > 0.

    Returns
    -------
    EnergyExpectations
        The expected energies; ``symmetric_ratio`` = (N+1)/(2N) for every entry law.

    Examples
    --------
    >>> from qkenergy.math.baselines import qk_product_expectations
    >>> qk_product_expectations(n=32, N=384, sigma2_K=0.02, sigma2_Q=0.05).symmetric_ratio
    0.5013020833333334
    """
    n = check_integer(n, "n")
    N = check_integer(N, "N")
    return _expectations(n, N, check_positive(sigma2_K, "sigma2_K") * check_positive(sigma2_Q, "sigma2_Q"))


def gaussian_head_ratio_expectations(n: int, N: int) -> RatioExpectations:
    """Proposition 6: E[||S||^2/||L||^2] = (N+1)/(2N), E[||T||^2/||L||^2] = (N-1)/(2N).

    For Gaussian W_K, W_Q (n x N, any nonzero variances); independent of n
    (docs/mathematics.md §5).

    Parameters
    ----------
    n : int
        Head dimension, 1 <= n <= N.
    N : int
        Residual width.

    Returns
    -------
    RatioExpectations
        The exact expectations of s and of 1 - s.

    Raises
    ------
    QKEnergyError
        n or N not a positive integer, or n > N.

    Examples
    --------
    >>> from qkenergy.math.baselines import gaussian_head_ratio_expectations
    >>> gaussian_head_ratio_expectations(32, 384).symmetric == 385 / 768
    True
    """
    n = check_integer(n, "n")
    N = check_integer(N, "N")
    if n > N:
        raise QKEnergyError(f"n must satisfy n <= N for Proposition 6, got n={n} > N={N}")
    return RatioExpectations(symmetric=symmetric_ratio(N), skew=skew_ratio(N))


# Short aliases named after the spec items, for tables that cite them.
corollary1 = iid_square_expectations
corollary2 = qk_product_expectations
proposition6 = gaussian_head_ratio_expectations


def gaussian_square_law(N: int) -> stats.rv_continuous:
    """Exact law of s = ||S||^2/||L||^2 for an iid Gaussian N x N L (Corollary 1).

    s ~ Beta(N(N+1)/4, N(N-1)/4), since ||S||^2 and ||T||^2 are independent
    scaled chi-squares with N(N+1)/2 and N(N-1)/2 degrees of freedom; its mean
    is (N+1)/(2N) (docs/mathematics.md §5).

    Parameters
    ----------
    N : int
        Size of L, N >= 2 (for N = 1, s = 1 surely).

    Returns
    -------
    scipy.stats.rv_continuous
        The frozen Beta law.

    Examples
    --------
    >>> from qkenergy.math.baselines import gaussian_square_law
    >>> float(gaussian_square_law(2).mean())
    0.75
    """
    N = check_integer(N, "N")
    if N < 2:
        raise QKEnergyError("N must be >= 2 for gaussian_square_law (for N = 1, s = 1 surely)")
    from scipy import stats

    return stats.beta(N * (N + 1) / 4, N * (N - 1) / 4)


def rank_one_law(N: int) -> stats.rv_continuous:
    """Exact law of s for a rank-one Gaussian head (n = 1, Proposition 6).

    s = (1 + cos^2 theta)/2 with cos^2 theta ~ Beta(1/2, (N-1)/2): a Beta law with
    loc = 1/2 and scale = 1/2, of mean (N+1)/(2N) (docs/mathematics.md §6).

    Parameters
    ----------
    N : int
        Residual width, N >= 2 (for N = 1, s = 1 surely).

    Returns
    -------
    scipy.stats.rv_continuous
        The frozen law of s.
    """
    N = check_integer(N, "N")
    if N < 2:
        raise QKEnergyError("N must be >= 2 for rank_one_law (for N = 1, s = 1 surely)")
    from scipy import stats

    return stats.beta(0.5, (N - 1) / 2, loc=0.5, scale=0.5)

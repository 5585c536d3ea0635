"""The normalised spectrum of S and what it carries: lobe imbalance, overlap, the involution, moments.

For a head whose S has k nonzero eigenvalues (k = 2n when [W_K; W_Q] has full
rank 2n), lambda is the vector of those eigenvalues divided by ||S||, sorted
increasingly: a unit vector. Its positive lobe lambda_+ (the positive entries,
largest first) and its negative lobe lambda_- (the absolute values of the
negative entries, largest first), zero-padded to equal length, give

    I = ||lambda_+||^2 - ||lambda_-||^2      (lobe imbalance, in [-1, 1])
    C = <lambda_+, lambda_->                 (lobe overlap, 0 <= 2C <= 1, Lemma 7)
    P = 1 - ||lambda_+ - lambda_-|| = 1 - sqrt(1 - 2C)   (the pairing)

and the involution (iota lambda)_i = -lambda_{k+1-i} (the spectrum of -S,
Lemma 8). Because lambda is a unit vector with at least two nonzero entries,
|lambda_i| < 1 for every i, so the moment statistics

    O = sum_i lambda_i/(1 - lambda_i^2),  E = sum_i lambda_i^2/(1 - lambda_i^2),
    R = sum_i 1/(1 - lambda_i)

are finite (Lemma 9: O = (R - R o iota)/2, k + E = (R + R o iota)/2). They
are sums over the k nonzero eigenvalues only: a zero eigenvalue would add 1
to R and nothing to O or E. With one nonzero eigenvalue (|lambda_1| = 1) or
none they are undefined (NaN).

On the Gram route (Lemma 10) with M = [W_K; W_Q], G = M M^T and J the block
swap, S = M^T J M/2 and tr(S^j) = tr((JG/2)^j), so lambda is the nonzero
spectrum of the 2n x 2n matrix H = JG/(2||S||), ||S||^2 = tr((JG)^2)/4, and
O, E, R are traces of rational functions of H (:func:`trace_moments`).
"""

from __future__ import annotations

import numpy as np

from qkenergy.math.energies import divide_or_nan
from qkenergy.math.spectrum import eigenvalue_tolerance

__all__ = [
    "MOMENT_STATISTICS",
    "gram_operator",
    "involution",
    "lobe_moments",
    "moment_statistics",
    "normalised_spectrum",
    "trace_moments",
]

MOMENT_STATISTICS: tuple[str, ...] = ("lobe_imbalance", "lobe_overlap", "moment_O", "moment_E", "moment_R")
"""The statistics of the normalised spectrum, in table order."""


def normalised_spectrum(eigs: np.ndarray, *, zero_tol: float = 1e-9) -> tuple[np.ndarray, np.ndarray]:
    """The eigenvalues of S over the norm of those kept, and the mask of those kept (docs/mathematics.md §9).

    Kept: |eigenvalue| above zero_tol * max|eigenvalue| (the counts n_pos, n_neg);
    the others are 0 in lambda.

    Parameters
    ----------
    eigs : (..., m) ndarray
        Eigenvalues of S.
    zero_tol : float
        Relative tolerance below which an eigenvalue counts as 0.

    Returns
    -------
    lam : (..., m) ndarray
        In the order of ``eigs``, ||lambda|| = 1 (0 for a head with no eigenvalue kept).
    kept : (..., m) ndarray of bool
    """
    eigs = np.asarray(eigs, dtype=np.float64)
    kept = np.abs(eigs) > eigenvalue_tolerance(eigs, zero_tol)
    values = np.where(kept, eigs, 0.0)
    norm = np.sqrt(np.sum(values * values, axis=-1, keepdims=True))
    return values / np.where(norm > 0, norm, 1.0), kept


def involution(lam: np.ndarray) -> np.ndarray:
    """(iota lambda)_i = -lambda_{k+1-i}: the spectrum of -S (Lemma 8, docs/mathematics.md §9).

    Parameters
    ----------
    lam : (..., k) ndarray
        Increasingly sorted spectra.

    Returns
    -------
    (..., k) ndarray
        Increasingly sorted again.

    Examples
    --------
    >>> import numpy as np
    >>> from qkenergy.math.moments import involution
    >>> involution(np.array([-0.6, 0.0, 0.8])).tolist()
    [-0.8, -0.0, 0.6]
    """
    return -np.flip(np.asarray(lam, dtype=np.float64), axis=-1)


def _one_minus_square(lam: np.ndarray, kept: np.ndarray) -> np.ndarray:
    """1 - lambda_i^2 = sum_{j != i} lambda_j^2 for unit lambda, without the cancellation of 1 - lambda^2.

    Only the largest |lambda_i| can exceed 1/sqrt(2); for it the sum of the
    other squares is taken directly, for the rest 1 - lambda_i^2 loses nothing.
    (For a head whose spectrum is nearly one eigenvalue, 1 - lambda_1^2 = 1e-12
    by subtraction would keep only four digits.)
    """
    sq = np.where(kept, lam * lam, 0.0)
    out = 1.0 - sq
    largest = np.argmax(sq, axis=-1)[..., None]
    others = np.arange(sq.shape[-1]) != largest
    np.put_along_axis(out, largest, np.sum(np.where(others, sq, 0.0), axis=-1, keepdims=True), axis=-1)
    return out


def moment_statistics(lam: np.ndarray, kept: np.ndarray) -> dict[str, np.ndarray]:
    """moment_O, moment_E, moment_R of normalised spectra (Lemma 9), over the kept entries only.

    Parameters
    ----------
    lam : (..., m) ndarray
        Normalised spectra (:func:`normalised_spectrum`).
    kept : (..., m) ndarray of bool
        The entries counted.

    Returns
    -------
    dict of str to (...) ndarray
        NaN where fewer than two entries are kept (then |lambda_1| = 1 or lambda = 0).
    """
    lam = np.asarray(lam, dtype=np.float64)
    defined = np.sum(kept, axis=-1) >= 2
    use = kept & defined[..., None]
    q = np.where(use, _one_minus_square(lam, kept), 1.0)  # 1 - lambda^2 > 0 where used
    # 1 - lambda = (1 - lambda^2)/(1 + lambda) for lambda > 0, where 1 - lambda would cancel
    one_minus = np.where(lam > 0, q / np.where(lam > 0, 1.0 + lam, 1.0), 1.0 - lam)
    terms = {"moment_O": lam / q, "moment_E": lam * lam / q, "moment_R": 1.0 / one_minus}
    return {
        name: np.where(defined, np.sum(np.where(use, t, 0.0), axis=-1), np.nan) for name, t in terms.items()
    }


def lobe_moments(
    eigs: np.ndarray, alpha: np.ndarray, beta: np.ndarray, *, zero_tol: float = 1e-9
) -> dict[str, np.ndarray]:
    """The MOMENT_STATISTICS of heads from their eigenvalues of S and lobes (any common unit).

    I = (||alpha||^2 - ||beta||^2)/(||alpha||^2 + ||beta||^2) and
    C = <alpha, beta>/(||alpha||^2 + ||beta||^2): the lobes of lambda are
    alpha, beta over their joint norm (Lemma 7); O, E, R by :func:`moment_statistics`
    (docs/mathematics.md §9).

    Parameters
    ----------
    eigs : (..., m) ndarray
        Eigenvalues of S.
    alpha, beta : (..., k) ndarray
        The positive and negative lobes, decreasing magnitudes, zero-padded.
    zero_tol : float
        Eigenvalues below zero_tol * max|eigenvalue| count as 0.

    Returns
    -------
    dict of str to (...) ndarray
        One array per name of MOMENT_STATISTICS; NaN for S = 0.
    """
    a2 = np.sum(alpha * alpha, axis=-1)
    b2 = np.sum(beta * beta, axis=-1)
    total = a2 + b2
    lam, kept = normalised_spectrum(eigs, zero_tol=zero_tol)
    return {
        "lobe_imbalance": divide_or_nan(a2 - b2, total),
        "lobe_overlap": divide_or_nan(np.sum(alpha * beta, axis=-1), total),
        **moment_statistics(lam, kept),
    }


def gram_operator(G: np.ndarray) -> np.ndarray:
    """H = J G/(2||S||), J the block swap, ||S||^2 = tr((JG)^2)/4 (Lemma 10).

    Its nonzero eigenvalues are the normalised nonzero spectrum lambda of S
    (docs/mathematics.md §9, "The Gram route for the moments").

    Parameters
    ----------
    G : (..., 2n, 2n) ndarray
        Gram matrices of C = [W_K; W_Q] (:func:`qkenergy.math.gram.head_gram`).

    Returns
    -------
    (..., 2n, 2n) ndarray
    """
    G = np.asarray(G, dtype=np.float64)
    n = G.shape[-1] // 2
    JG = np.concatenate([G[..., n:, :], G[..., :n, :]], axis=-2)
    norm_s = 0.5 * np.sqrt(np.einsum("...ij,...ji->...", JG, JG))
    H: np.ndarray = JG / (2.0 * norm_s[..., None, None])
    return H


def trace_moments(H: np.ndarray, nonzero: np.ndarray) -> dict[str, np.ndarray]:
    """O, E, R as traces (Lemma 10): tr(H (I - H^2)^-1), tr(H^2 (I - H^2)^-1), tr((I - H)^-1) - (m - k).

    A reference route: two m x m solves (docs/mathematics.md §9, "The Gram route for the moments").

    Parameters
    ----------
    H : (..., m, m) ndarray
        :func:`gram_operator` of the heads.
    nonzero : (...) ndarray of int
        k, the nonzero eigenvalues of H (each of the m - k zero eigenvalues adds 1 to
        tr((I - H)^-1)).

    Returns
    -------
    dict of str to (...) ndarray
        moment_O, moment_E, moment_R.
    """
    H = np.asarray(H, dtype=np.float64)
    m = H.shape[-1]
    eye = np.eye(m)
    H2 = H @ H
    inverse = np.linalg.inv(eye - H2)
    return {
        "moment_O": np.trace(H @ inverse, axis1=-2, axis2=-1),
        "moment_E": np.trace(H2 @ inverse, axis1=-2, axis2=-1),
        "moment_R": np.trace(np.linalg.inv(eye - H), axis1=-2, axis2=-1) - (m - np.asarray(nonzero)),
    }

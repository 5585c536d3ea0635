"""Directionality of a bilinear form, exactly as Saponati et al. 2025 define it.

Saponati et al. 2025 ("The underlying structures of self-attention: symmetry,
directionality, and emergent dynamics in Transformer training") score a layer's
matrix M = W_Q^T W_K = L^T (rows: query-side features, columns: key-side
features) by the norms of its rows and columns that stand out:

    r_i = ||M_{i,:}||,  c_j = ||M_{:,j}||,
    t_r = mean(r) + 2 sd(r),  t_c = mean(c) + 2 sd(c)   (sample sd, ddof = 1),
    R = sum_{r_i > t_r} (r_i - t_r),  C = sum_{c_j > t_c} (c_j - t_c)   (excess over the threshold),
    raw = (C - R) / (C + R)   (0 when C + R = 0).

Their published tables report the NEGATIVE of the raw score:
``directionality = -raw = (R - C) / (R + C)``. So a positive published
directionality means a few query-side features (rows of M, columns of L) stand
out more than key-side ones; a positive raw score means key-side features
(columns of M, rows of L) dominate. A zero or non-finite form has no score (NaN).

Everything is vectorised over leading batch axes (the null sampler scores many
random forms at once).
"""

from __future__ import annotations

import numpy as np

from qkenergy.math.energies import divide_or_nan

__all__ = [
    "DIRECTIONALITY_GAMMA",
    "dense_norms",
    "directionality",
    "directionality_raw",
    "outlier_excess",
]

DIRECTIONALITY_GAMMA = 2.0
"""Outlier threshold of the directionality score: norms above mean + gamma * sd (ddof = 1)."""


def outlier_excess(norms: np.ndarray, *, gamma: float = DIRECTIONALITY_GAMMA) -> np.ndarray:
    """Sum over the last axis of (x - t)_+ with t = mean(x) + gamma * sd(x) (ddof = 1).

    The R (or C) of Saponati et al.: the excess of the outlying norms above the
    threshold, not the norms themselves.

    Parameters
    ----------
    norms : (..., N) ndarray
        Row or column norms.
    gamma : float
        Threshold in standard deviations above the mean.

    Returns
    -------
    (...) ndarray
        The excess, >= 0.
    """
    x = np.asarray(norms, dtype=np.float64)
    threshold = np.mean(x, axis=-1, keepdims=True) + gamma * np.std(x, axis=-1, ddof=1, keepdims=True)
    return np.sum(np.maximum(x - threshold, 0.0), axis=-1)


def directionality_raw(
    row_norms: np.ndarray, column_norms: np.ndarray, *, gamma: float = DIRECTIONALITY_GAMMA
) -> np.ndarray | float:
    """Raw score (C - R)/(C + R) of M from its row norms r and column norms c.

    R and C are the excesses of the outlying norms (:func:`outlier_excess`).
    Positive: key-side features (columns of M = W_Q^T W_K) stand out.

    Parameters
    ----------
    row_norms : (..., N) ndarray
        r_i = ||M_{i,:}||.
    column_norms : (..., N) ndarray
        c_j = ||M_{:,j}||.
    gamma : float
        Threshold t = mean + gamma sd of each set of norms.

    Returns
    -------
    (...) ndarray or float
        The score in [-1, 1]; 0 when no norm exceeds its threshold (C + R = 0), NaN when
        M = 0 or a norm is not finite (a float for 1-d norms).
    """
    r = np.asarray(row_norms, dtype=np.float64)
    c = np.asarray(column_norms, dtype=np.float64)
    rows, cols = outlier_excess(r, gamma=gamma), outlier_excess(c, gamma=gamma)
    total = rows + cols
    raw = np.where(total > 0, divide_or_nan(cols - rows, total), 0.0)
    undefined = (
        ~np.all(np.isfinite(r), axis=-1) | ~np.all(np.isfinite(c), axis=-1) | ~(np.sum(r, axis=-1) > 0)
    )
    raw = np.where(undefined, np.nan, raw)
    return float(raw) if raw.ndim == 0 else raw


def directionality(
    row_norms: np.ndarray, column_norms: np.ndarray, *, gamma: float = DIRECTIONALITY_GAMMA
) -> np.ndarray | float:
    """Published directionality of Saponati et al. 2025: -(C - R)/(C + R) = (R - C)/(R + C).

    Positive: query-side features (rows of M = W_Q^T W_K) stand out; the
    negative of :func:`directionality_raw`, which says when it is 0 or NaN.

    Parameters
    ----------
    row_norms : (..., N) ndarray
        r_i = ||M_{i,:}||.
    column_norms : (..., N) ndarray
        c_j = ||M_{:,j}||.
    gamma : float
        Threshold t = mean + gamma sd of each set of norms.

    Returns
    -------
    (...) ndarray or float
        The score in [-1, 1] (a float for 1-d norms).

    Examples
    --------
    >>> import numpy as np
    >>> from qkenergy.math.directionality import dense_norms, directionality
    >>> L = np.eye(8)
    >>> L[0, :] = 5.0  # one row of L (a column of M, key side) stands out
    >>> float(directionality(*dense_norms(L)))
    -1.0
    """
    return -directionality_raw(row_norms, column_norms, gamma=gamma)


def dense_norms(form: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Row and column norms of M = L^T from a dense L: the column and row norms of L.

    Parameters
    ----------
    form : (..., N, N) ndarray
        The bilinear form L = W_K^T W_Q.

    Returns
    -------
    row_norms : (..., N) ndarray
        r_i = ||M_{i,:}|| (query-side features).
    column_norms : (..., N) ndarray
        c_j = ||M_{:,j}|| (key-side features).
    """
    L = np.asarray(form, dtype=np.float64)
    return np.sqrt(np.einsum("...ij,...ij->...j", L, L)), np.sqrt(np.einsum("...ij,...ij->...i", L, L))

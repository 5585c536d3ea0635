"""Lemma 5: symmetric and skew energies of a dense bilinear form L.

For L in M_N(R) with S = (L + L^T)/2 and T = (L - L^T)/2 (Frobenius norms):

    ||L||^2 = ||S||^2 + ||T||^2,
    ||S||^2 = 1/2 ||L||^2 + 1/2 tr(L^2),
    ||T||^2 = 1/2 ||L||^2 - 1/2 tr(L^2).

Everything is batched over the leading axes of L. L = 0 has no ratios: they
are NaN, never 0 or 1/2 (docs/mathematics.md §2).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from qkenergy.base.small_floats import as_float


@dataclass(frozen=True)
class Energies:
    """Energies of L (Lemma 5, docs/mathematics.md §2), arrays of the batch shape.

    Parameters
    ----------
    norm_l_sq, norm_s_sq, norm_t_sq : (...) ndarray
        ||L||^2, ||S||^2 and ||T||^2.
    trace_l_sq : (...) ndarray
        tr(L^2).
    symmetric_ratio, skew_ratio : (...) ndarray
        ||S||^2/||L||^2 and ||T||^2/||L||^2 (NaN where L = 0).
    """

    norm_l_sq: np.ndarray
    norm_s_sq: np.ndarray
    norm_t_sq: np.ndarray
    trace_l_sq: np.ndarray
    symmetric_ratio: np.ndarray
    skew_ratio: np.ndarray


def divide_or_nan(numerator: np.ndarray, denominator: np.ndarray) -> np.ndarray:
    """numerator / denominator, NaN where the denominator is 0 (no warning).

    Parameters
    ----------
    numerator, denominator : ndarray
        Broadcast against each other.

    Returns
    -------
    ndarray
    """
    numerator, denominator = np.broadcast_arrays(
        np.asarray(numerator, dtype=np.float64), np.asarray(denominator, dtype=np.float64)
    )
    out = np.full(numerator.shape, np.nan)
    with np.errstate(invalid="ignore"):  # inf/inf of a non-finite L is NaN already
        np.divide(numerator, denominator, out=out, where=denominator != 0)
    return out


def power_of_two_scale(max_abs: np.ndarray) -> np.ndarray:
    """Exponent e with max_abs * 2**-e in [0.5, 1); 0 where max_abs is 0 or not finite.

    Scaling by a power of two is exact in binary floating point, so a rescaled
    matrix carries exactly the same ratios as the original (s and the other ratios
    are scale-free: docs/mathematics.md §2).

    Parameters
    ----------
    max_abs : ndarray
        The largest absolute entry of each matrix.

    Returns
    -------
    ndarray of int
        e, of the shape of ``max_abs``.
    """
    max_abs = np.asarray(max_abs, dtype=np.float64)
    return np.frexp(np.where(np.isfinite(max_abs), max_abs, 0.0))[1]


def scale_by_power_of_two(x: np.ndarray, exponent: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """x * 2**exponent (exponent broadcast against x), bitwise equal to ``np.ldexp(x, exponent)``.

    Multiplying by a power of two that the dtype of x can represent (subnormal
    included) is one correctly rounded product, as ldexp is, so the result is
    the same bit for bit; a multiplication is several times faster than ldexp.
    Exponents whose power is not representable (2**132 for a subnormal
    bfloat16 weight scaled up in float32) take np.ldexp.

    Parameters
    ----------
    x : ndarray
        The values.
    exponent : ndarray of int
        Broadcast against ``x``.
    out : ndarray, optional
        Where to write the result.

    Returns
    -------
    ndarray
    """
    exponent = np.asarray(exponent)
    info = np.finfo(x.dtype)
    lowest = info.minexp - info.nmant  # exponent of the smallest subnormal
    if exponent.size and lowest <= exponent.min() and exponent.max() <= info.maxexp - 1:
        scaled: np.ndarray = np.multiply(x, np.ldexp(np.ones((), x.dtype), exponent), out=out)
    else:
        scaled = np.ldexp(x, exponent, out=out)
    return scaled


def rescale_by_power_of_two(x: np.ndarray, axes: tuple[int, ...] = (-2, -1)) -> tuple[np.ndarray, np.ndarray]:
    """(x * 2**-e, e) with e = power_of_two_scale(max|x| over ``axes``), one e per matrix.

    The rescaled entries have largest magnitude in [0.5, 1), so their squares
    and products neither overflow nor underflow; ratios are unchanged exactly.
    Non-finite matrices are returned unscaled (e = 0).

    Parameters
    ----------
    x : ndarray
        A batch of matrices.
    axes : tuple of int
        The axes of one matrix.

    Returns
    -------
    scaled : ndarray
        x * 2**-e, of the shape of ``x``.
    exponent : ndarray of int
        e, of the batch shape.
    """
    x = as_float(x, np.float64)  # bfloat16 bits too (base.small_floats)
    with np.errstate(invalid="ignore"):
        max_abs = np.max(np.abs(x), axis=axes, initial=0.0, keepdims=True)
    exponent = power_of_two_scale(max_abs)
    return scale_by_power_of_two(x, -exponent), np.squeeze(exponent, axis=axes)


def energies(L: np.ndarray) -> Energies:
    """Lemma 5 on dense L of shape (..., N, N): ||L||^2, ||S||^2, ||T||^2, tr(L^2) and ratios.

    ||S||^2 and ||T||^2 are summed from S and T themselves (not from the
    identities), so the identities of Lemma 5 are a genuine check, and a
    symmetric or antisymmetric L gives an exactly zero T or S. L is rescaled by
    a power of two before squaring: the ratios are exact for entries of any
    size; the energies themselves are scaled back (and may overflow to inf).

    Parameters
    ----------
    L : (..., N, N) ndarray
        Dense bilinear forms.

    Returns
    -------
    Energies

    Examples
    --------
    >>> import numpy as np
    >>> from qkenergy.math.energies import energies
    >>> e = energies(np.array([[1.0, 2.0], [0.0, 1.0]]))  # S = [[1, 1], [1, 1]], T = [[0, 1], [-1, 0]]
    >>> float(e.norm_l_sq), float(e.norm_s_sq), float(e.norm_t_sq), float(e.symmetric_ratio)
    (6.0, 4.0, 2.0, 0.6666666666666666)
    """
    L = np.asarray(L, dtype=np.float64)
    if L.ndim < 2 or L.shape[-1] != L.shape[-2]:
        raise ValueError(f"energies: L must have shape (..., N, N), got {L.shape}")
    L, exponent = rescale_by_power_of_two(L)
    Lt = np.swapaxes(L, -1, -2)
    S = 0.5 * (L + Lt)
    T = 0.5 * (L - Lt)
    norm_l_sq = np.sum(L * L, axis=(-2, -1))
    norm_s_sq = np.sum(S * S, axis=(-2, -1))
    norm_t_sq = np.sum(T * T, axis=(-2, -1))
    # sum_ij L_ij L_ji = tr(L^2)
    trace_l_sq = np.sum(L * Lt, axis=(-2, -1))
    symmetric_ratio = divide_or_nan(norm_s_sq, norm_l_sq)
    skew_ratio = divide_or_nan(norm_t_sq, norm_l_sq)
    unscale = 2 * exponent
    return Energies(
        norm_l_sq=np.ldexp(norm_l_sq, unscale),
        norm_s_sq=np.ldexp(norm_s_sq, unscale),
        norm_t_sq=np.ldexp(norm_t_sq, unscale),
        trace_l_sq=np.ldexp(trace_l_sq, unscale),
        symmetric_ratio=symmetric_ratio,
        skew_ratio=skew_ratio,
    )


def energies_from_invariants(norm_l_sq: np.ndarray, trace_l_sq: np.ndarray) -> Energies:
    """Lemma 5 from the two invariants ||L||^2 and tr(L^2).

    ||S||^2 = (||L||^2 + tr(L^2))/2, ||T||^2 = (||L||^2 - tr(L^2))/2; the
    ratios are 1/2 +- tr(L^2)/(2||L||^2) (NaN where ||L||^2 = 0). Used by the
    Gram route, which knows only these invariants.

    Parameters
    ----------
    norm_l_sq : (...) ndarray
        ||L||^2.
    trace_l_sq : (...) ndarray
        tr(L^2).

    Returns
    -------
    Energies
    """
    norm_l_sq = np.asarray(norm_l_sq, dtype=np.float64)
    trace_l_sq = np.asarray(trace_l_sq, dtype=np.float64)
    norm_s_sq = 0.5 * (norm_l_sq + trace_l_sq)
    norm_t_sq = 0.5 * (norm_l_sq - trace_l_sq)
    return Energies(
        norm_l_sq=norm_l_sq,
        norm_s_sq=norm_s_sq,
        norm_t_sq=norm_t_sq,
        trace_l_sq=trace_l_sq,
        symmetric_ratio=divide_or_nan(norm_s_sq, norm_l_sq),
        skew_ratio=divide_or_nan(norm_t_sq, norm_l_sq),
    )

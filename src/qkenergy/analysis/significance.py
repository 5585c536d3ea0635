"""Columns that judge a statistic against a null law: mean, sd, z, empirical p, Beta tail, BH.

Shared by the two per-head nulls of :mod:`qkenergy.analysis.analyze` (the
Gaussian law of a head of the same shape, and the rotation null that keeps the
head's own spectra) and by the per-layer null. The empirical p-value stops at
its floor 2/(K + 1); ``symmetric_energy``'s ``..._p_tail`` (a Beta law matched
to the null's mean and variance, :mod:`qkenergy.math.tails`, an approximation)
takes its place in the Benjamini-Hochberg adjustment where the empirical p is at
that floor.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from qkenergy.math.tails import TAIL_STATISTICS, beta_p_two_sided

if TYPE_CHECKING:  # pragma: no cover
    from qkenergy.math.nulls import NullLaw

__all__ = ["TAIL_STATISTICS", "bh", "bh_with_tail", "judge"]


def judge(law: NullLaw, name: str, values: np.ndarray) -> dict[str, np.ndarray]:
    """null_mean, null_sd, z, p (empirical, two-sided) and, for TAIL_STATISTICS, p_tail and floor.

    Undefined values stay NaN (the empirical p would otherwise call them 1).
    ``floor`` is a boolean array: the empirical p sits at its floor 2/(1 + K), K the law's
    defined samples (the smallest two-sided empirical p it can give).

    Parameters
    ----------
    law : NullLaw
        The null law of the heads' shape.
    name : str
        The statistic.
    values : ndarray, shape (m,)
        The heads' values of it.

    Returns
    -------
    dict
        Column -> ndarray of shape (m,).
    """
    x = np.asarray(values, dtype=np.float64)
    defined = np.isfinite(x)
    z = np.full(x.shape, np.nan)
    p = np.full(x.shape, np.nan)
    z[defined] = law.z(name, x[defined])
    p[defined] = law.p_two_sided(name, x[defined])
    out = {
        "null_mean": np.full(x.shape, law.mean(name)),
        "null_sd": np.full(x.shape, law.sd(name)),
        "z": z,
        "p": p,
    }
    if name in TAIL_STATISTICS:
        out["p_tail"] = np.asarray(beta_p_two_sided(x, law.mean(name), law.sd(name) ** 2), dtype=np.float64)
        floor = 2.0 / (1 + int(np.isfinite(law.samples(name)).sum()))
        out["floor"] = defined & (p <= floor * (1 + 1e-12))
    return out


def bh(p: np.ndarray) -> np.ndarray:
    """Benjamini-Hochberg adjusted p-values over the finite entries; NaN stays NaN.

    With the m finite p-values sorted, p_(1) <= ... <= p_(m), the adjusted value
    of p_(i) is min(1, min over j >= i of m p_(j) / j): the smallest false
    discovery rate at which the step-up procedure rejects it. (What
    scipy.stats.false_discovery_control computes; the tests hold the two equal.
    Written out here because importing scipy.stats costs about 0.5 s, more than
    a whole analysis of a small model.)

    Parameters
    ----------
    p : ndarray, shape (...)
        The p-values.

    Returns
    -------
    ndarray, shape (...)
        The adjusted p-values.
    """
    out = np.full(p.shape, np.nan)
    finite = np.isfinite(p)
    values = p[finite]
    if m := values.size:
        order = np.argsort(values, kind="stable")
        scaled = values[order] * (m / np.arange(1, m + 1))
        adjusted = np.empty(m)
        adjusted[order] = np.minimum(np.minimum.accumulate(scaled[::-1])[::-1], 1.0)
        out[finite] = adjusted
    return out


def bh_with_tail(p: np.ndarray, p_tail: np.ndarray, floor: np.ndarray) -> np.ndarray:
    """BH over p, where each empirical p at its floor is replaced by its tail approximation.

    Returns the adjusted p-values; an entry keeps its empirical p when the tail
    approximation is undefined (NaN).

    Parameters
    ----------
    p : ndarray, shape (m,)
        The empirical p-values.
    p_tail : ndarray, shape (m,)
        Their tail approximations.
    floor : ndarray of bool, shape (m,)
        Where the empirical p is at its floor.

    Returns
    -------
    ndarray, shape (m,)
        The adjusted p-values.
    """
    use_tail = floor & np.isfinite(p_tail)
    return bh(np.where(use_tail, p_tail, p))

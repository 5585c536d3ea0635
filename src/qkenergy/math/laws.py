"""One statistic's null law as a frozen distribution: mean, std, sf, cdf, ppf, pvalue, rvs.

A :class:`Law` holds the null samples of one statistic (K draws, NaN left out)
and answers in the vocabulary of frozen ``scipy.stats`` distributions. Its
mean is exact where the mathematics gives it ((N+1)/(2N) for the symmetric
energy of a Gaussian head, Proposition 6, docs/mathematics.md §6), else the
Monte Carlo mean. Tail probabilities are the table's: the two-sided empirical
p, min(1, 2 min(1 + #{null <= x}, 1 + #{null >= x}) / (1 + K)), never 0
(docs/mathematics.md §7), and :meth:`Law.p_tail`, the Beta tail beyond its
floor 2/(K + 1) (:mod:`qkenergy.math.tails`); :meth:`Law.pvalue` gives by
default the p the table's BH adjustment takes (the tail where the empirical p
sits at its floor, for the statistics with a tail column). A law that
knows how to draw (the Gaussian null of a head shape) also gives fresh draws,
:meth:`Law.rvs`; the others (the rotation null, a law read from a cache)
hold their samples only.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, Literal

import numpy as np
from numpy.typing import ArrayLike

from qkenergy.base.errors import QKEnergyError, check_integer
from qkenergy.math.tails import TAIL_STATISTICS, beta_p_two_sided

__all__ = ["Law", "Sampler"]

Tail = Literal["auto", "empirical", "beta"]
"""Which p :meth:`Law.pvalue` gives (its ``tail`` argument)."""

Sampler = Callable[[np.random.Generator, int], np.ndarray]
"""``sampler(rng, size) -> (size,)`` fresh draws of a law's statistic."""


def _scalar_or_array(values: np.ndarray) -> Any:
    return float(values) if values.ndim == 0 else values


class Law:
    """The null law of one statistic, frozen: its samples, exact mean when known, a sampler when drawable.

    Parameters
    ----------
    name : str
        The statistic, a column name of the head table (``"symmetric_energy"``, ``"pairing"``, ...).
    samples : (K,) array_like
        The null draws (NaN, an undefined statistic, is kept here and left out of every summary).
    exact_mean : float, optional
        The exact null mean where the mathematics gives it (Proposition 6), else None.
    sampler : callable, optional
        ``sampler(rng, size) -> (size,)`` fresh draws; None when the law cannot be drawn.
    description : str
        How the law came about, for ``repr`` (e.g. ``"Gaussian head n=32, N=384"``).

    Examples
    --------
    >>> import numpy as np
    >>> law = Law("x", np.arange(1.0, 100.0))
    >>> law.mean(), law.ppf(0.5)
    (50.0, 50.0)
    >>> law.pvalue(1.0)  # the smallest draw: 2 (1 + 1) / (1 + 99)
    0.04
    """

    def __init__(
        self,
        name: str,
        samples: ArrayLike,
        *,
        exact_mean: float | None = None,
        sampler: Sampler | None = None,
        description: str = "",
    ) -> None:
        values = np.array(samples, dtype=np.float64).reshape(-1)
        values.flags.writeable = False
        self.name = name
        self._samples = values
        self._finite = values[np.isfinite(values)]  # in draw order: the moments sum as NullLaw's do
        self._sorted = np.sort(self._finite)
        self._exact_mean = exact_mean
        self._sampler = sampler
        self.description = description

    def __repr__(self) -> str:
        about = f", {self.description}" if self.description else ""
        return f"Law({self.name!r}, {self.size} samples{about})"

    @property
    def samples(self) -> np.ndarray:
        """(K,) the null draws, read-only, NaN included."""
        return self._samples

    @property
    def size(self) -> int:
        """K, the number of draws (NaN included)."""
        return int(self._samples.size)

    @property
    def drawable(self) -> bool:
        """Whether :meth:`rvs` can draw fresh samples (a Gaussian null law can; a rotation null cannot)."""
        return self._sampler is not None

    def mean(self) -> float:
        """Null mean: exact where known ((N+1)/(2N) for s, Proposition 6), else the Monte Carlo mean.

        Returns
        -------
        float
        """
        if self._exact_mean is not None:
            return float(self._exact_mean)
        return float(np.mean(self._finite)) if self._finite.size else math.nan

    @property
    def defined(self) -> int:
        """The number of finite draws (those the summaries use)."""
        return int(self._finite.size)

    def stderr(self) -> float:
        """Standard error of :meth:`mean`: 0 when exact, else std / sqrt(K).

        Returns
        -------
        float
        """
        if self._exact_mean is not None:
            return 0.0
        x = self._finite
        return float(np.std(x, ddof=1) / math.sqrt(x.size)) if x.size > 1 else math.nan

    def std(self) -> float:
        """Null standard deviation (Monte Carlo, ddof = 1), as the table's ``X_null_sd``.

        Returns
        -------
        float
        """
        return float(np.std(self._finite, ddof=1)) if self._finite.size > 1 else math.nan

    def cdf(self, x: ArrayLike) -> Any:
        """Empirical P(X <= x) = #{null <= x} / K; vectorised, NaN in, NaN out.

        Parameters
        ----------
        x : float or array_like
            Values of the statistic.

        Returns
        -------
        float or ndarray
            Of the shape of ``x``.
        """
        xs = np.asarray(x, dtype=np.float64)
        k = max(self._sorted.size, 1)
        p = np.searchsorted(self._sorted, xs, side="right") / k
        return _scalar_or_array(np.where(np.isnan(xs), np.nan, p))

    def sf(self, x: ArrayLike) -> Any:
        """Empirical P(X > x) = 1 - cdf(x); vectorised, NaN in, NaN out.

        Parameters
        ----------
        x : float or array_like
            Values of the statistic.

        Returns
        -------
        float or ndarray
            Of the shape of ``x``.
        """
        xs = np.asarray(x, dtype=np.float64)
        k = max(self._sorted.size, 1)
        p = (self._sorted.size - np.searchsorted(self._sorted, xs, side="right")) / k
        return _scalar_or_array(np.where(np.isnan(xs), np.nan, p))

    def ppf(self, q: ArrayLike) -> Any:
        """Empirical quantile at probability q in [0, 1] (linear interpolation between draws).

        Parameters
        ----------
        q : float or array_like
            Probabilities in [0, 1].

        Returns
        -------
        float or ndarray
            Of the shape of ``q``.
        """
        qs = np.asarray(q, dtype=np.float64)
        if np.any(~((qs >= 0) & (qs <= 1))):
            raise QKEnergyError(f"q must lie in [0, 1], got {q!r}")
        if self._sorted.size == 0:
            return _scalar_or_array(np.full(qs.shape, np.nan))
        return _scalar_or_array(np.asarray(np.quantile(self._sorted, qs)))

    def pvalue(self, x: ArrayLike, tail: Tail = "auto") -> Any:
        """Two-sided p of x: the p that the table's BH adjustment (``X_p_bh``) takes, or either part of it.

        - ``tail="empirical"``: the table's ``X_p``, min(1, 2 min(1 + #below, 1 + #above)/(1 + K)),
          never 0 and never below its floor 2/(K + 1);
        - ``tail="beta"``: the table's ``X_p_tail``, :meth:`p_tail` (an approximation);
        - ``tail="auto"`` (default): the empirical p, and where it sits at its floor the Beta tail,
          for the statistics whose table has a ``_p_tail`` column (``symmetric_energy``);
          the empirical p for the others and where no Beta law matches.

        Parameters
        ----------
        x : float or array_like
            Values of the statistic.
        tail : {"auto", "empirical", "beta"}
            Which p (above).

        Returns
        -------
        float or ndarray
            Of the shape of ``x``.

        Examples
        --------
        >>> law = Law("symmetric_energy", np.linspace(0.45, 0.55, 99))
        >>> law.pvalue(0.9, tail="empirical")  # beyond every draw: the floor 2 / (K + 1)
        0.02
        >>> law.pvalue(0.9) < 1e-60  # the Beta tail in its place
        True
        """
        if tail not in ("auto", "empirical", "beta"):
            raise QKEnergyError(f"tail must be 'auto', 'empirical' or 'beta', got {tail!r}", parameter="tail")
        if tail == "beta":
            return self.p_tail(x)
        xs = np.asarray(x, dtype=np.float64)
        k = self._sorted.size
        below = np.searchsorted(self._sorted, xs, side="right")
        above = k - np.searchsorted(self._sorted, xs, side="left")
        p = np.minimum(1.0, 2.0 * np.minimum(1 + below, 1 + above) / (1 + k))
        if tail == "auto" and self.name in TAIL_STATISTICS:
            # as analysis.significance.judge marks the floor and bh_with_tail replaces it
            beyond = np.asarray(self.p_tail(xs), dtype=np.float64)
            at_floor = (p <= 2.0 / (1 + k) * (1 + 1e-12)) & np.isfinite(beyond)
            p = np.where(at_floor, beyond, p)
        return _scalar_or_array(np.where(np.isnan(xs), np.nan, p))

    def p_tail(self, x: ArrayLike) -> Any:
        """Two-sided p of x under the Beta law matched to :meth:`mean` and :meth:`std`: the table's ``X_p_tail``.

        min(1, 2 min(F(x), 1 - F(x))), F the Beta law with this law's mean and variance
        (:func:`qkenergy.math.tails.beta_p_two_sided`): an APPROXIMATION of the tail beyond
        the empirical floor 2/(K + 1), for a statistic in [0, 1] (docs/statistics.md).

        Parameters
        ----------
        x : float or array_like
            Values of the statistic.

        Returns
        -------
        float or ndarray
            Of the shape of ``x``; NaN where x is NaN or no Beta law has these moments.
        """
        xs = np.asarray(x, dtype=np.float64)
        return _scalar_or_array(np.asarray(beta_p_two_sided(xs, self.mean(), self.std() ** 2)))

    def z(self, x: ArrayLike) -> Any:
        """(x - mean) / std, the table's ``X_z``.

        Parameters
        ----------
        x : float or array_like
            Values of the statistic.

        Returns
        -------
        float or ndarray
            Of the shape of ``x``.
        """
        with np.errstate(divide="ignore", invalid="ignore"):
            return _scalar_or_array((np.asarray(x, dtype=np.float64) - self.mean()) / self.std())

    def rvs(self, size: int = 1, random_state: int | np.random.Generator | None = None) -> np.ndarray:
        """``size`` fresh draws of the statistic, where the law can be drawn.

        Parameters
        ----------
        size : int
            Draws.
        random_state : int or numpy.random.Generator, optional
            Seed or generator of the draws.

        Returns
        -------
        (size,) ndarray

        Raises
        ------
        QKEnergyError
            For a law that holds its samples only (:attr:`drawable` is False).
        """
        if self._sampler is None:
            raise QKEnergyError(
                f"the law of {self.name!r} ({self.description or 'samples only'}) cannot be drawn"
            )
        size = check_integer(size, "size")
        rng = np.random.default_rng(random_state)  # a Generator comes back as it is
        return np.asarray(self._sampler(rng, size), dtype=np.float64).reshape(size)

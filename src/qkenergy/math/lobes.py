"""Lemma 6 (proportional lobes): two sorted iid samples at scales v and u = rho v
become proportional, D_n = ||beta_n - rho alpha_n|| / ||alpha_n|| -> 0 almost
surely, when X > 0 has a finite nonzero second moment. A Pareto law with tail
index below 2 (infinite second moment) is the contrast case.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from qkenergy.base.errors import QKEnergyError, check_integer, check_memory, check_positive
from qkenergy.math.entry_laws import law_spec, resolve_spec, sample_shape

__all__ = [
    "POSITIVE_LAWS",
    "LobeCurve",
    "PositiveLaw",
    "lobe_departure",
    "lobe_departure_curve",
    "positive_law",
]


@dataclass(frozen=True)
class _Family:
    name: str
    description: str
    defaults: tuple[tuple[str, float], ...]
    raw: Callable[..., np.ndarray] = field(repr=False)
    check: Callable[..., str | None] = field(repr=False)
    second_moment: Callable[..., float] = field(repr=False)


def _pareto(rng: np.random.Generator, shape: tuple[int, ...], alpha: float) -> np.ndarray:
    # Classical Pareto with x_m = 1: P(X > x) = x^-alpha for x >= 1 (numpy's pareto is Lomax).
    return rng.pareto(alpha, size=shape) + 1.0


def _chi(rng: np.random.Generator, shape: tuple[int, ...], k: float) -> np.ndarray:
    return np.sqrt(rng.chisquare(k, size=shape))


POSITIVE_LAWS: Mapping[str, _Family] = {
    f.name: f
    for f in (
        _Family(
            "exponential",
            "Exp(1)",
            (),
            lambda rng, shape: rng.standard_exponential(shape),
            lambda: None,
            lambda: 2.0,
        ),
        _Family(
            "half_normal",
            "|Z|, Z ~ N(0, 1)",
            (),
            lambda rng, shape: np.abs(rng.standard_normal(shape)),
            lambda: None,
            lambda: 1.0,
        ),
        _Family(
            "lognormal",
            "exp(sigma Z)",
            (("sigma", 1.0),),
            lambda rng, shape, sigma: np.exp(sigma * rng.standard_normal(shape)),
            lambda sigma: None if sigma > 0 else f"sigma must be > 0, got {sigma!r}",
            lambda sigma: math.exp(2 * sigma * sigma),
        ),
        _Family(
            "chi",
            "sqrt(chi^2_k)",
            (("k", 1.0),),
            _chi,
            lambda k: None if k > 0 else f"k must be > 0, got {k!r}",
            lambda k: k,
        ),
        _Family(
            "pareto",
            "Pareto, x_m = 1, tail index alpha",
            (("alpha", 1.5),),
            _pareto,
            lambda alpha: None if alpha > 0 else f"alpha must be > 0, got {alpha!r}",
            lambda alpha: alpha / (alpha - 2) if alpha > 2 else math.inf,
        ),
    )
}


@dataclass(frozen=True)
class PositiveLaw:
    """A positive law X > 0 with fixed parameters; ``sample(rng, shape)`` draws it.

    Parameters
    ----------
    family : family of positive laws
        One of ``POSITIVE_LAWS`` (exponential, half_normal, lognormal, chi, pareto).
    params : tuple of (str, float)
        Its parameter values in order.
    """

    family: _Family = field(repr=False)
    params: tuple[tuple[str, float], ...] = ()

    @property
    def name(self) -> str:
        return self.family.name

    @property
    def spec(self) -> str:
        return law_spec(self.family.name, self.params)

    @property
    def second_moment(self) -> float:
        """E[X^2] (inf for Pareto with alpha <= 2): Lemma 6 needs it finite."""
        return float(self.family.second_moment(**dict(self.params)))

    @property
    def finite_second_moment(self) -> bool:
        return math.isfinite(self.second_moment)

    def sample(self, rng: np.random.Generator, shape: int | tuple[int, ...]) -> np.ndarray:
        """Draw float64 samples of X."""
        return self.family.raw(rng, sample_shape(shape), **dict(self.params))

    def __str__(self) -> str:
        return self.spec


def positive_law(name: str | PositiveLaw, **params: float) -> PositiveLaw:
    """Look up a positive law by name or spec: ``"exponential"``, ``"pareto:1.5"``, ``"chi:k=3"``.

    Parameters
    ----------
    name : str or PositiveLaw
        A family name or spec, or a law (returned as it is unless ``params`` change it).
    **params : float
        Parameter values overriding those in the spec.

    Returns
    -------
    PositiveLaw

    Raises
    ------
    QKEnergyError
        An unknown law or parameter, or an invalid value.
    """
    if isinstance(name, PositiveLaw):
        if not params:
            return name
        params = {**dict(name.params), **params}
        name = name.name
    family, values = resolve_spec(name, POSITIVE_LAWS, "positive law", params)
    return PositiveLaw(family, values)


def lobe_departure(alpha: np.ndarray, beta: np.ndarray, rho: float) -> np.ndarray:
    """D = ||beta - rho alpha|| / ||alpha|| over the last axis (Lemma 6, docs/mathematics.md §3).

    Parameters
    ----------
    alpha, beta : (..., n) ndarray
        Two lobes sorted the same way (both decreasing).
    rho : float
        The scale ratio u / v of beta to alpha.

    Returns
    -------
    (...) ndarray
        NaN (or inf) where alpha = 0.

    Examples
    --------
    >>> import numpy as np
    >>> from qkenergy.math.lobes import lobe_departure
    >>> float(lobe_departure(np.array([2.0, 1.0]), np.array([1.0, 0.5]), 0.5))
    0.0
    """
    alpha = np.asarray(alpha, dtype=np.float64)
    beta = np.asarray(beta, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.linalg.norm(beta - rho * alpha, axis=-1) / np.linalg.norm(alpha, axis=-1)


@dataclass(frozen=True, eq=False)
class LobeCurve:
    """D_n for each n in ``ns`` over independent repeats (:func:`lobe_departure_curve`).

    Parameters
    ----------
    law : str
        The positive law's spec.
    rho : float
        The scale ratio of the two lobes.
    ns : (k,) ndarray of int
        The lobe lengths.
    values : (repeats, k) ndarray
        D_n of each repeat.
    mean, stderr, median : (k,) ndarray
        Over the repeats: the mean, its standard error, and the median (robust for heavy
        tails such as Pareto).
    seed : int
        The seed the repeats were drawn from.
    """

    law: str
    rho: float
    ns: np.ndarray
    values: np.ndarray = field(repr=False)
    mean: np.ndarray = field(repr=False)
    stderr: np.ndarray = field(repr=False)
    median: np.ndarray = field(repr=False)
    seed: int = 0

    @property
    def repeats(self) -> int:
        return int(self.values.shape[0])


def lobe_departure_curve(
    law: str | PositiveLaw,
    rho: float,
    ns: Sequence[int] | np.ndarray,
    *,
    seed: int,
    repeats: int = 20,
) -> LobeCurve:
    """Lemma 6: D_n = ||beta_n - rho alpha_n|| / ||alpha_n|| along n for one law.

    alpha_n sorts X_1..X_n (scale v = 1) decreasingly, beta_n sorts rho X'_1..X'_n
    (scale u = rho). Each repeat follows one sample path (the first n of two
    iid sequences), as in the almost-sure statement; repeats are independent,
    each from its own child of ``SeedSequence(seed)``. D_n -> 0 when
    E[X^2] < inf; for Pareto with alpha < 2 it does not (docs/mathematics.md §3,
    "Proportional lobes").

    Parameters
    ----------
    law : str or PositiveLaw
        The law of the lobe entries (:func:`positive_law`).
    rho : float
        The scale ratio, > 0.
    ns : sequence of int
        Lobe lengths, each >= 1.
    seed : int
        Seed of the repeats.
    repeats : int
        Independent pairs of lobes.

    Returns
    -------
    LobeCurve

    Raises
    ------
    QKEnergyError
        An unknown law, rho not positive, ``ns`` empty or not integers >= 1, or lobes too
        large for memory.
    """
    law = positive_law(law)
    rho = check_positive(rho, "rho")
    ns_arr = np.asarray(ns)
    if (
        ns_arr.ndim != 1
        or ns_arr.size == 0
        or not np.issubdtype(ns_arr.dtype, np.integer)
        or np.any(ns_arr < 1)
    ):
        raise QKEnergyError(f"ns must be a non-empty list of integers >= 1, got {ns!r}")
    repeats = check_integer(repeats, "repeats")
    seed = check_integer(seed, "seed", 0)
    ns_arr = ns_arr.astype(np.int64)
    n_max = int(ns_arr.max())
    # two lobes of n_max entries and their sorted copies; one seed sequence per repeat
    check_memory(32 * n_max + 512 * repeats, f"lobes of length {n_max} with {repeats} repeats")

    values = np.empty((repeats, ns_arr.size))
    for r, child in enumerate(np.random.SeedSequence(seed).spawn(repeats)):
        rng = np.random.Generator(np.random.PCG64(child))
        x = law.sample(rng, n_max)
        y = rho * law.sample(rng, n_max)
        for j, n in enumerate(ns_arr):
            # Decreasing sort of both lobes; ascending then reversed pairs the same ranks.
            values[r, j] = lobe_departure(np.sort(x[:n]), np.sort(y[:n]), rho)
    stderr = values.std(axis=0, ddof=1) / math.sqrt(repeats) if repeats > 1 else np.full(ns_arr.size, np.nan)
    return LobeCurve(
        law=law.spec,
        rho=rho,
        ns=ns_arr,
        values=values,
        mean=values.mean(axis=0),
        stderr=stderr,
        median=np.median(values, axis=0),
        seed=seed,
    )

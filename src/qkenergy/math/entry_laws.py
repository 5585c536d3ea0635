"""Centred entry laws for Monte Carlo of the iid-square (Corollary 1) and QK-product
(Corollary 2) models.

Every law is centred exactly (its exact mean is subtracted) and scaled to the
requested variance by its exact variance, so Corollaries 1 and 2 apply verbatim.
The skewed laws (exponential, lognormal, bernoulli) are where the expectation of
the ratio departs from the ratio of expectations (docs/mathematics.md §5).

Specs for the command line: ``"gaussian"``, ``"bernoulli:0.1"``,
``"student_t:5"``, ``"lognormal:sigma=0.5"``; see :func:`entry_law`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Protocol, TypeVar

import numpy as np

from qkenergy.base.errors import QKEnergyError, check_positive

__all__ = [
    "ENTRY_LAWS",
    "EntryLaw",
    "LawFamily",
    "LawKind",
    "entry_law",
    "law_spec",
    "parse_params",
    "resolve_spec",
    "sample_shape",
]

# raw(rng, shape, **params) -> centred draws; variance(**params) -> their exact variance.
RawSampler = Callable[..., np.ndarray]


@dataclass(frozen=True)
class LawKind:
    """A family of centred laws: parameter names with defaults and validity checks.

    Parameters
    ----------
    name, description : str
        The family's name (the spec's first word) and a formula for people.
    defaults : tuple of (str, float)
        Parameter names in order, with their defaults.
    raw : callable
        ``raw(rng, shape, **params)``: centred, unscaled draws.
    variance : callable
        ``variance(**params)``: the exact variance of ``raw``'s draws.
    check : callable
        ``check(**params)``: None for valid parameters, else what is wrong.
    symmetric : bool
        Whether the law is symmetric about 0.
    """

    name: str
    description: str
    defaults: tuple[tuple[str, float], ...]
    raw: RawSampler = field(repr=False)
    variance: Callable[..., float] = field(repr=False)
    check: Callable[..., str | None] = field(repr=False)
    symmetric: bool = False


def _no_check(**_: float) -> str | None:
    return None


def _gaussian(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    return rng.standard_normal(shape)


def _rademacher(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    return rng.integers(0, 2, size=shape, dtype=np.int8).astype(np.float64) * 2.0 - 1.0


def _uniform(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    return rng.uniform(-1.0, 1.0, size=shape)


def _exponential(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    return rng.standard_exponential(shape) - 1.0


def _lognormal(rng: np.random.Generator, shape: tuple[int, ...], sigma: float) -> np.ndarray:
    return np.exp(sigma * rng.standard_normal(shape)) - math.exp(sigma * sigma / 2)


def _lognormal_variance(sigma: float) -> float:
    # (e^{s^2} - 1) e^{s^2}; expm1 keeps it accurate for small sigma.
    return math.expm1(sigma * sigma) * math.exp(sigma * sigma)


def _bernoulli(rng: np.random.Generator, shape: tuple[int, ...], p: float) -> np.ndarray:
    return (rng.random(shape) < p).astype(np.float64) - p


def _student_t(rng: np.random.Generator, shape: tuple[int, ...], nu: float) -> np.ndarray:
    return rng.standard_t(nu, size=shape)


def _check_sigma(sigma: float) -> str | None:
    return None if 0 < sigma <= 10 else f"sigma must be in (0, 10], got {sigma!r}"


def _check_p(p: float) -> str | None:
    return None if 0 < p < 1 else f"p must be in (0, 1), got {p!r}"


def _check_nu(nu: float) -> str | None:
    return (
        None if nu > 2 and math.isfinite(nu) else f"nu must be finite and > 2 (finite variance), got {nu!r}"
    )


ENTRY_LAWS: Mapping[str, LawKind] = {
    k.name: k
    for k in (
        LawKind("gaussian", "standard normal", (), _gaussian, lambda: 1.0, _no_check, True),
        LawKind("rademacher", "random signs +-1", (), _rademacher, lambda: 1.0, _no_check, True),
        LawKind("uniform", "uniform on [-1, 1]", (), _uniform, lambda: 1.0 / 3.0, _no_check, True),
        LawKind("exponential", "centred Exp(1): E - 1", (), _exponential, lambda: 1.0, _no_check),
        LawKind(
            "lognormal",
            "centred lognormal: exp(sigma Z) - exp(sigma^2/2)",
            (("sigma", 1.0),),
            _lognormal,
            _lognormal_variance,
            _check_sigma,
        ),
        LawKind(
            "bernoulli",
            "centred sparse Bernoulli(p): B - p",
            (("p", 0.1),),
            _bernoulli,
            lambda p: p * (1.0 - p),
            _check_p,
        ),
        LawKind(
            "student_t",
            "Student t with nu > 2 degrees of freedom",
            (("nu", 5.0),),
            _student_t,
            lambda nu: nu / (nu - 2.0),
            _check_nu,
            True,
        ),
    )
}


class LawFamily(Protocol):
    """What spec parsing needs of a family of laws (LawKind here, lobes' positive laws)."""

    # read-only members, so that frozen dataclasses satisfy the protocol
    @property
    def name(self) -> str: ...
    @property
    def defaults(self) -> tuple[tuple[str, float], ...]: ...
    @property
    def check(self) -> Callable[..., str | None]: ...


def law_spec(name: str, params: tuple[tuple[str, float], ...]) -> str:
    """Round-trippable spec string of a law, e.g. ``"bernoulli:p=0.1"``.

    Parameters
    ----------
    name : str
        The family's name.
    params : tuple of (str, float)
        Its parameter values in order.

    Returns
    -------
    str
        ``name`` alone without parameters, else ``name:k1=v1,k2=v2``.
    """
    if not params:
        return name
    return name + ":" + ",".join(f"{k}={v:g}" for k, v in params)


def _valid_specs(families: Mapping[str, LawFamily]) -> str:
    return ", ".join(
        f.name + ("" if not f.defaults else ":" + ",".join(p for p, _ in f.defaults))
        for f in families.values()
    )


def sample_shape(shape: int | tuple[int, ...]) -> tuple[int, ...]:
    """A draw shape as a tuple (an int n means (n,)).

    Parameters
    ----------
    shape : int or tuple of int

    Returns
    -------
    tuple of int
    """
    return (shape,) if isinstance(shape, (int, np.integer)) else tuple(shape)


@dataclass(frozen=True)
class EntryLaw:
    """A centred entry law with fixed parameters; ``sample`` draws it at a given variance.

    Parameters
    ----------
    kind : LawKind
        The family (gaussian, rademacher, uniform, exponential, lognormal, bernoulli, student_t).
    params : tuple of (str, float)
        The family's parameter values, as (name, value) pairs in the family's order.
    """

    kind: LawKind = field(repr=False)
    params: tuple[tuple[str, float], ...] = ()

    @property
    def name(self) -> str:
        return self.kind.name

    @property
    def spec(self) -> str:
        """Round-trippable spec string, e.g. ``"bernoulli:p=0.1"``."""
        return law_spec(self.kind.name, self.params)

    @property
    def symmetric(self) -> bool:
        """True when the law is symmetric about 0 (then ratio and expectation agree more closely)."""
        return self.kind.symmetric

    @property
    def raw_variance(self) -> float:
        """Exact variance of the centred, unscaled draws."""
        return float(self.kind.variance(**dict(self.params)))

    def sample(
        self, rng: np.random.Generator, shape: int | tuple[int, ...], variance: float = 1.0
    ) -> np.ndarray:
        """Draw float64 entries with mean 0 and variance ``variance`` (exact scaling)."""
        variance = check_positive(variance, "variance")
        x = self.kind.raw(rng, sample_shape(shape), **dict(self.params))
        scale = math.sqrt(variance / self.raw_variance)
        if scale != 1.0:
            x *= scale
        return x

    def __str__(self) -> str:
        return self.spec


def parse_params(kind: LawFamily, text: str, what: str = "entry law") -> dict[str, float]:
    """Parse ``"0.1"`` (positional) or ``"p=0.1"`` (named) parameter text for ``kind``.

    Parameters
    ----------
    kind : LawFamily
        The family whose parameters the text sets.
    text : str
        Comma-separated values, positional first, then ``name=value``.
    what : str
        The kind of law, for messages ("entry law", "positive law").

    Returns
    -------
    dict of str to float

    Raises
    ------
    QKEnergyError
        Too many values, an unknown name, a value given twice or not a number.
    """
    names = [p for p, _ in kind.defaults]
    out: dict[str, float] = {}
    if not text.strip():
        return out
    for i, item in enumerate(text.split(",")):
        item = item.strip()
        if "=" in item:
            key, _, val = item.partition("=")
            key = key.strip()
        else:
            if i >= len(names):
                raise QKEnergyError(
                    f"{what} {kind.name!r} takes {len(names)} parameter(s)"
                    f"{' (' + ', '.join(names) + ')' if names else ''}, got {text!r}"
                )
            key, val = names[i], item
        try:
            out[key] = float(val)
        except ValueError:
            raise QKEnergyError(
                f"{what} {kind.name!r}: parameter {key!r} must be a number, got {val.strip()!r}"
            ) from None
    return out


F = TypeVar("F", bound=LawFamily)


def resolve_spec(
    spec: object,
    families: Mapping[str, F],
    what: str,
    params: Mapping[str, float],
    aliases: Mapping[str, str] | None = None,
) -> tuple[F, tuple[tuple[str, float], ...]]:
    """Family and checked parameter values of a spec ``"name"`` or ``"name:v1,k=v2"``.

    Shared by :func:`entry_law` and ``lobes.positive_law``.

    Parameters
    ----------
    spec : object
        The spec string (anything else is refused).
    families : mapping of str to family
        The families by name.
    what : str
        The kind of law, for messages.
    params : mapping of str to float
        Keyword values overriding those in the spec.
    aliases : mapping of str to str, optional
        Other names of families.

    Returns
    -------
    family : LawFamily
        The family named.
    values : tuple of (str, float)
        Every parameter of the family in order (defaults filled in), checked.

    Raises
    ------
    QKEnergyError
        Unknown names or parameters, or invalid values (the message lists the valid choices).
    """
    if not isinstance(spec, str):
        raise QKEnergyError(f"{what} must be a name such as {next(iter(families))!r}, got {spec!r}")
    base, _, text = spec.strip().partition(":")
    base = base.strip().lower().replace("-", "_")
    family = families.get((aliases or {}).get(base, base))
    if family is None:
        raise QKEnergyError(f"unknown {what} {spec!r}; valid: {_valid_specs(families)}")
    given = parse_params(family, text, what)
    given.update({k: float(v) for k, v in params.items()})
    names = [p for p, _ in family.defaults]
    unknown = sorted(set(given) - set(names))
    if unknown:
        raise QKEnergyError(
            f"{what} {family.name!r} has no parameter {unknown[0]!r}; "
            f"valid: {', '.join(names) if names else 'none'}"
        )
    values = tuple((p, float(given.get(p, d))) for p, d in family.defaults)
    for p, v in values:
        if not math.isfinite(v):
            raise QKEnergyError(f"{what} {family.name!r}: parameter {p!r} must be finite, got {v!r}")
    problem = family.check(**dict(values))
    if problem is not None:
        raise QKEnergyError(f"{what} {family.name!r}: {problem}")
    return family, values


_ALIASES = {"normal": "gaussian", "exp": "exponential", "t": "student_t", "student": "student_t"}


def entry_law(name: str | EntryLaw, **params: float) -> EntryLaw:
    """Look up a centred entry law by name or spec (``"bernoulli:0.1"``, ``"student_t:nu=5"``).

    The Monte Carlo models of docs/mathematics.md §5 (skewed entries, where E[s]
    departs from the ratio of expectations).

    Parameters
    ----------
    name : str or EntryLaw
        A family name, a spec with positional or named parameters, or a law (returned as it is
        unless ``params`` change it).
    **params : float
        Parameter values overriding those in the spec (see :func:`resolve_spec`).

    Returns
    -------
    EntryLaw

    Raises
    ------
    QKEnergyError
        An unknown law or parameter, or an invalid value (the message lists the valid ones).

    Examples
    --------
    >>> from qkenergy.math.entry_laws import entry_law
    >>> entry_law("bernoulli:0.1").spec
    'bernoulli:p=0.1'
    """
    if isinstance(name, EntryLaw):
        if not params:
            return name
        params = {**dict(name.params), **params}
        name = name.name
    kind, values = resolve_spec(name, ENTRY_LAWS, "entry law", params, _ALIASES)
    return EntryLaw(kind, values)

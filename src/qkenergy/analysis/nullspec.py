"""The settings of a run's null laws, travelling together: one frozen :class:`NullSpec`.

A NullSpec says which null laws a head is judged against and how they are
drawn: ``samples`` Monte Carlo draws of the Gaussian null per head shape (n, N)
with ``seed``, ``kind`` (a registered :class:`NullKind` or a selection of several: "both"),
and ``rotation_samples`` draws of the rotation null per head (docs/mathematics.md §6).
:data:`KINDS` is the one registry of null laws: a new law is its sampler plus one
:func:`register` (columns, settings, judgement, summary follow). The API, the command
line, analyze, the survey (its settings, units and shared laws) and the null-law
cache (whose keys derive from it: :mod:`qkenergy.analysis.null_cache`) read the
same four values from it (the Type II radius only names head types: it is the
:class:`~qkenergy.analysis.type_rule.TypeRule`'s); :mod:`qkenergy.analysis.record` writes
them into a table's or a survey's settings and reads them back.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from qkenergy.base.errors import QKEnergyError, check_integer
from qkenergy.math.defaults import SAMPLES

if TYPE_CHECKING:  # pragma: no cover
    import numpy as np

    from qkenergy.math.nulls import NullLaw

    HeadSampler = Callable[[np.ndarray, int, int, int, Sequence[str]], NullLaw]

__all__ = ["KINDS", "ROTATION_SAMPLES", "SELECTIONS", "NullKind", "NullSpec", "register"]

ROTATION_SAMPLES = 500
"""Default draws of the rotation null per head (one 2n x 2n eigenproblem each)."""


@dataclass(frozen=True)
class NullKind:
    """One null law of a head, as the table, the settings and the summary name it.

    Parameters
    ----------
    name : str
        The ``--null`` choice.
    infix : str
        In its columns' names: ``X_{infix}null_mean``, ``X_{infix}z``, ``X_{infix}p``, ...
    samples : {"samples", "rotation_samples"}
        The NullSpec field (and recorded setting) holding its draws K.
    label, header, verdict : str
        The summary's words: "... under the {label} null", the header's text (``{K}`` draws,
        ``{floor}`` smallest p), the opening of its sentence (None: the Gaussian verdict's).
    sampler : callable, optional
        ``sampler(gram, N, samples, seed, names) -> NullLaw``, one law per head from its
        Gram matrix (None: one law per head shape (n, N), the cached Gaussian null).
    """

    name: str
    infix: str
    samples: str
    label: str
    header: str
    verdict: str | None = None
    sampler: HeadSampler | None = None


def _rotation_sampler(gram: np.ndarray, N: int, samples: int, seed: int, names: Sequence[str]) -> NullLaw:
    from qkenergy.math.rotation import rotation_law  # only when the rotation null is drawn

    return rotation_law(gram, N, samples=samples, seed=seed, names=names)


KINDS: dict[str, NullKind] = {}
"""The registered null laws by name, in the order of their columns (``del KINDS[name]`` unregisters)."""
SELECTIONS: dict[str, tuple[str, ...]] = {"both": ("gaussian", "rotation")}
"""Names of a ``kind`` that select several laws (every registered name selects itself)."""


def register(kind: NullKind) -> None:
    """Register a null law: its sampler and this call are all a new law needs.

    Parameters
    ----------
    kind : NullKind
        The law (a name taken is refused).
    """
    if kind.name in null_kinds():
        raise QKEnergyError(f"null kind {kind.name!r} is already registered", parameter="kind")
    KINDS[kind.name] = kind


def null_kinds() -> tuple[str, ...]:
    """Every ``kind`` a NullSpec accepts: the registered laws, then the selections."""
    return (*KINDS, *SELECTIONS)


def selected(kind: object) -> tuple[NullKind, ...]:
    """The laws a (recorded) ``null_kind`` draws, in registry order; every law for an unknown one."""
    chosen = SELECTIONS.get(kind, (kind,)) if isinstance(kind, str) and kind in null_kinds() else tuple(KINDS)
    return tuple(k for name, k in KINDS.items() if name in chosen)


register(NullKind("gaussian", "", "samples", "Gaussian", "{K} null samples per shape (smallest p {floor})"))
register(NullKind("rotation", "rotation_", "rotation_samples", "rotation",
                  "rotation null {K} draws per head (smallest p {floor})",
                  "Rotation null (each head's own W_K, W_Q, query input space rotated at random)",
                  _rotation_sampler))  # fmt: skip


@dataclass(frozen=True)
class NullSpec:
    """How the null laws of a run are drawn (frozen; checked when made).

    Parameters
    ----------
    samples : int
        Draws of the Gaussian null law per head shape (n, N), at least 2; the
        smallest empirical two-sided p is 2/(samples + 1).
    seed : int
        Seed of every draw (numpy SeedSequence; results do not depend on threads or chunks).
    kind : str
        A registered law (:data:`KINDS`: "gaussian", a Gaussian head of the same shape;
        "rotation", the head's own W_K, W_Q with the query's input space rotated at random)
        or a selection of several (:data:`SELECTIONS`: "both").
    rotation_samples : int
        Draws of the rotation null per head, at least 2 (used when ``kind`` asks for it).

    Examples
    --------
    >>> NullSpec(samples=500).gaussian, [k.name for k in NullSpec(kind="both").kinds]
    (True, ['gaussian', 'rotation'])
    >>> NullSpec(samples=1)
    Traceback (most recent call last):
    ...
    qkenergy.base.errors.QKEnergyError: samples must be an integer >= 2, got 1
    """

    samples: int = SAMPLES
    seed: int = 0
    kind: str = "gaussian"
    rotation_samples: int = ROTATION_SAMPLES

    def __post_init__(self) -> None:
        object.__setattr__(self, "samples", check_integer(self.samples, "samples", 2))
        object.__setattr__(self, "seed", check_integer(self.seed, "seed", 0))
        object.__setattr__(
            self, "rotation_samples", check_integer(self.rotation_samples, "rotation_samples", 2)
        )
        if self.kind not in null_kinds():
            raise QKEnergyError(
                f"kind must be one of {', '.join(null_kinds())}, got {self.kind!r}", parameter="kind"
            )
        # resolved once: a pickled spec carries its laws (samplers by reference) into Dask workers
        self.__dict__["_kinds"] = selected(self.kind)

    @property
    def kinds(self) -> tuple[NullKind, ...]:
        """The laws drawn, in registry order."""
        kinds: tuple[NullKind, ...] = self.__dict__["_kinds"]
        return kinds

    def draws(self, field: str) -> int:
        """The draws of a samples field; 0 when no law drawn uses it.

        Parameters
        ----------
        field : {"samples", "rotation_samples"}
            A NullKind's ``samples``.

        Returns
        -------
        int
        """
        return int(getattr(self, field)) if any(k.samples == field for k in self.kinds) else 0

    @property
    def gaussian(self) -> bool:
        """Whether the Gaussian null (one law per head shape) is drawn."""
        return "gaussian" in (k.name for k in self.kinds)

    def as_dict(self) -> dict[str, Any]:
        """The four values by name.

        Returns
        -------
        dict
            samples, seed, kind, rotation_samples.
        """
        return asdict(self)

    def cache_path(
        self, cache_dir: str | os.PathLike[str], n: int, N: int, names: Sequence[str] | None = None
    ) -> Path:
        """Where the null-law cache keeps this spec's Gaussian law of shape (n, N).

        Parameters
        ----------
        cache_dir : path
            The cache's folder.
        n, N : int
            The head shape.
        names : sequence of str, optional
            The statistics (default: those the table judges).

        Returns
        -------
        pathlib.Path
        """
        from qkenergy.analysis.null_cache import null_cache_path

        return null_cache_path(cache_dir, self, n, N, names)

    def null_law(
        self,
        n: int,
        N: int,
        *,
        names: Sequence[str] | None = None,
        cache_dir: str | os.PathLike[str] | None = None,
        progress: bool = False,
        threads: int | None = 1,
    ) -> NullLaw:
        """This spec's Gaussian null law of head shape (n, N) (kept in ``cache_dir`` when given).

        Parameters
        ----------
        n, N : int
            The head shape.
        names : sequence of str, optional
            The statistics drawn (default: those the table judges).
        cache_dir : path, optional
            The null-law cache.
        progress : bool
            Show a progress bar on stderr.
        threads : int or None
            Threads for the draws (None: every core); the values do not depend on it.

        Returns
        -------
        NullLaw
        """
        from qkenergy.analysis.null_cache import null_law

        return null_law(self, n, N, cache_dir=cache_dir, progress=progress, names=names, threads=threads)

"""The settings of a run's null laws, travelling together: one frozen :class:`NullSpec`.

A NullSpec says which null laws a head is judged against and how they are
drawn: ``samples`` Monte Carlo draws of the Gaussian null per head shape (n, N)
with ``seed``, ``kind`` ("gaussian", "rotation" or "both"), and ``rotation_samples``
draws of the rotation null per head (docs/mathematics.md §6). The API, the command
line, analyze, the survey (its settings, units and shared laws) and the null-law
cache (whose keys derive from it: :mod:`qkenergy.analysis.null_cache`) read the
same four values from it (the Type II radius only names head types: it is the
:class:`~qkenergy.analysis.type_rule.TypeRule`'s); :meth:`NullSpec.from_settings` reads them back from the settings of a
table or a survey.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from qkenergy.base.errors import QKEnergyError, check_integer

if TYPE_CHECKING:  # pragma: no cover
    from qkenergy.math.nulls import NullLaw

__all__ = ["NULL_KINDS", "ROTATION_SAMPLES", "SAMPLES", "NullSpec"]

NULL_KINDS: tuple[str, ...] = ("gaussian", "rotation", "both")
SAMPLES = 2000
"""Default draws of the Gaussian null law per head shape (its smallest p is 2/(SAMPLES + 1))."""
ROTATION_SAMPLES = 500
"""Default draws of the rotation null per head (one 2n x 2n eigenproblem each)."""


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
    kind : {"gaussian", "rotation", "both"}
        The Gaussian head of the same shape, the head's own W_K, W_Q with the query's
        input space rotated at random (Haar), or both.
    rotation_samples : int
        Draws of the rotation null per head, at least 2 (used when ``kind`` asks for it).

    Examples
    --------
    >>> NullSpec(samples=500).gaussian, NullSpec(kind="both").rotation
    (True, True)
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
        if self.kind not in NULL_KINDS:
            raise QKEnergyError(
                f"kind must be one of {', '.join(NULL_KINDS)}, got {self.kind!r}", parameter="kind"
            )

    @property
    def gaussian(self) -> bool:
        """Whether the Gaussian null is drawn."""
        return self.kind in ("gaussian", "both")

    @property
    def rotation(self) -> bool:
        """Whether the rotation null is drawn."""
        return self.kind in ("rotation", "both")

    def as_dict(self) -> dict[str, Any]:
        """The four values by name.

        Returns
        -------
        dict
            samples, seed, kind, rotation_samples.
        """
        return asdict(self)

    def settings(self, *, null: bool = True) -> dict[str, Any]:
        """The four values under the keys of a survey's settings (``null``: whether laws are drawn).

        Parameters
        ----------
        null : bool
            Whether null laws are drawn (the survey's ``null`` key).

        Returns
        -------
        dict
            samples, seed, null, null_kind, rotation_samples.
        """
        return {
            "samples": self.samples,
            "seed": self.seed,
            "null": bool(null),
            "null_kind": self.kind,
            "rotation_samples": self.rotation_samples,
        }

    @classmethod
    def from_settings(cls, settings: Mapping[str, Any]) -> NullSpec | None:
        """The spec a table's settings record (analyze's keys), or None when the run drew no null law.

        Parameters
        ----------
        settings : mapping
            The settings dict an output records (``Analysis.settings``, ``read_settings``).

        Returns
        -------
        NullSpec or None
        """
        if not settings.get("null", True) or settings.get("null_kind") is None:
            return None
        kind = str(settings["null_kind"])
        return cls(
            samples=int(settings.get("samples") or SAMPLES),
            seed=int(settings.get("seed", 0)),
            kind=kind,
            rotation_samples=int(settings.get("rotation_samples") or ROTATION_SAMPLES),
        )

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

"""One attention head of a model: its weights, Gram matrix, spectra, statistics and null laws.

A :class:`Head` is what :meth:`qkenergy.Model.head` returns. Its statistics are
cached properties named after the head table's columns (``symmetric_energy``,
``pairing``, ``head_type``, ...; docs/columns.md), computed on the Gram route
exactly as ``analyze`` computes the table (docs/mathematics.md §4), so a head's
value equals its row's.
"""

from __future__ import annotations

import functools
import os
from typing import TYPE_CHECKING

import numpy as np

from qkenergy.analysis.analyze import rotation_seed
from qkenergy.analysis.nullspec import KINDS, NullSpec
from qkenergy.analysis.type_rule import TypeRule
from qkenergy.base.errors import QKEnergyError
from qkenergy.base.small_floats import as_ml_dtypes
from qkenergy.math.defaults import SAMPLES
from qkenergy.math.energies import power_of_two_scale
from qkenergy.math.gram import head_gram, max_abs
from qkenergy.math.nulls import NULL_STATISTICS, NullLaw
from qkenergy.math.rope import rotate, rotated_gram
from qkenergy.math.spectrum import singular_values
from qkenergy.math.statistics import STATISTICS, HeadStatistics, gram_statistics

if TYPE_CHECKING:  # pragma: no cover
    from qkenergy.math.laws import Law, Tail
    from qkenergy.math.rope import Rope

__all__ = ["Head"]


class Head:
    """One head's bilinear form L = W_K^T W_Q, read from a model (see :meth:`qkenergy.Model.head`).

    Parameters
    ----------
    w_query, w_key : (n, N) ndarray
        The head's row blocks of the query and key projections, as stored (n: head
        dimension, N: residual width), in the checkpoint's dtype.
    layer, head : int
        Where the head sits (0-based).
    kv_head : int, optional
        Its key head under grouped-query attention (default: ``head``).
    stack : str
        The attention stack ("" for a single-stack model).
    offset : int
        RoPE models: the relative offset d of the form L_d = W_K^T R_d W_Q (0: L itself).
    rope : Rope, optional
        The layer's rotary settings (needed for ``offset`` > 0).
    types : TypeRule, optional
        How ``head_type`` is named (default: ``TypeRule()``, as analyze's default; docs/mathematics.md §3).
    model : str
        The model's name (for display).

    Attributes
    ----------
    symmetric_energy, a, b, c, d, b_sym, c_sym, d_sym, balance, n_pos, n_neg, n_zero, rho, pairing, \
pairing_bound, pairing_gap, lobe_departure, trace_ratio, participation_ratio, stable_rank, \
leading_share, limit_b_sym, limit_c_sym, limit_d_sym, limit_distance : float
        The head table's statistics (docs/columns.md), computed once on first use.

    Examples
    --------
    >>> import qkenergy as qk
    >>> head = qk.open().head(2, 3)
    >>> head.w_query.shape, head.gram.shape
    ((32, 384), (64, 64))
    >>> round(head.symmetric_energy, 6), head.head_type
    (0.586826, 'I+')
    >>> alpha, beta = head.lobes
    >>> len(head.singular_values), head.n_zero
    (32, 320.0)
    """

    def __init__(
        self,
        w_query: np.ndarray,
        w_key: np.ndarray,
        *,
        layer: int,
        head: int,
        kv_head: int | None = None,
        stack: str = "",
        offset: int = 0,
        rope: Rope | None = None,
        types: TypeRule | None = None,
        model: str = "",
    ) -> None:
        if w_query.ndim != 2 or w_query.shape != w_key.shape:
            raise QKEnergyError(
                f"w_query and w_key must be (n, N) of one shape, got {w_query.shape} and {w_key.shape}"
            )
        if offset and rope is None:
            raise QKEnergyError(f"offset: {offset} needs a RoPE model (this head has no rotary embedding)")
        self._w_query = w_query
        self._w_key = w_key
        self.layer = int(layer)
        self.head = int(head)
        self.kv_head = int(head if kv_head is None else kv_head)
        self.stack = stack
        self.offset = int(offset)
        self.rope = rope
        self.types = TypeRule() if types is None else types
        self.model = model

    def __repr__(self) -> str:
        where = f"{self.stack} " if self.stack else ""
        at = f", offset {self.offset}" if self.offset else ""
        return f"<Head {where}layer {self.layer} head {self.head}{at}: n={self.n}, N={self.N}>"

    @property
    def n(self) -> int:
        """Head dimension n."""
        return int(self._w_query.shape[0])

    @property
    def N(self) -> int:
        """Residual width N."""
        return int(self._w_query.shape[1])

    @property
    def w_query(self) -> np.ndarray:
        """(n, N) W_Q as stored (bfloat16 as ``ml_dtypes.bfloat16``); at a RoPE offset d, R_d W_Q (float)."""
        if self.offset and self.rope is not None:
            return rotate(self._w_query, self.rope, self.offset)
        return as_ml_dtypes(self._w_query)

    @property
    def w_key(self) -> np.ndarray:
        """(n, N) W_K as stored (bfloat16 as ``ml_dtypes.bfloat16``)."""
        return as_ml_dtypes(self._w_key)

    @functools.cached_property
    def gram(self) -> np.ndarray:
        """(2n, 2n) G = C C^T, C = [W_K; W_Q], each block scaled by a power of two (``gram.head_gram``)."""
        G: np.ndarray = head_gram(self._w_query[None], self._w_key[None])[0]
        if self.offset and self.rope is not None:
            G = rotated_gram(G, self.rope, self.offset)
        G.flags.writeable = False
        return G

    @functools.cached_property
    def statistics(self) -> HeadStatistics:
        """Every statistic of the head (``statistics.gram_statistics``), batch shape (1,)."""
        return gram_statistics(self.gram[None], self.N, **self.types.keywords())

    def _value(self, name: str) -> float:
        return float(getattr(self.statistics, name)[0])

    @property
    def head_type(self) -> str:
        """ "II", "I+", "I-", or "" when undefined (docs/mathematics.md §3)."""
        return str(self.statistics.head_type[0])

    @property
    def reason(self) -> str:
        """ "" for a fine head, else why its statistics are NaN."""
        return str(self.statistics.reason[0])

    @property
    def lobes(self) -> tuple[np.ndarray, np.ndarray]:
        """(alpha, beta): the positive and negative eigenvalue magnitudes of S, decreasing, in units of ||L||."""
        alpha = np.asarray(self.statistics.alpha[0], dtype=np.float64)
        beta = np.asarray(self.statistics.beta[0], dtype=np.float64)
        return alpha[alpha > 0], beta[beta > 0]  # without the zero padding, as the table's lists

    @property
    def profile(self) -> tuple[float, float, float, float]:
        """(a, b, c, d): the shares of ||L||^2, a + b + c + d = 1 (docs/mathematics.md §3)."""
        a, b, c, d = (self._value(x) for x in ("a", "b", "c", "d"))
        return a, b, c, d

    @functools.cached_property
    def singular_values(self) -> np.ndarray:
        """(n,) singular values of L = W_K^T W_Q (of L_d at an offset), descending, in the weights' units."""
        h = singular_values(self.gram[None])[0]
        scale = (
            power_of_two_scale(max_abs(self._w_key[None]))[0]
            + power_of_two_scale(max_abs(self._w_query[None]))[0]
        )
        values: np.ndarray = np.ldexp(h, int(scale))
        return values

    def null_law(
        self,
        samples: int = SAMPLES,
        seed: int = 0,
        kind: str = "gaussian",
        *,
        cache_dir: str | os.PathLike[str] | None = None,
        statistics: tuple[str, ...] | None = None,
    ) -> NullLaw:
        """The null law of this head, every statistic at once (``law["pairing"]`` is one :class:`Law`).

        Parameters
        ----------
        samples : int
            Draws (the table's setting the kind names: ``samples`` for "gaussian",
            ``rotation_samples`` for "rotation").
        seed : int
            The table's seed: the same draws as its null columns.
        kind : str
            A registered null (:data:`~qkenergy.analysis.nullspec.KINDS`): "gaussian", a Gaussian head
            of the same shape (n, N) (docs/mathematics.md §6); "rotation", this head's own W_K, W_Q
            with the query's input space rotated at random.
        cache_dir : path, optional
            Keep a Gaussian law on disk (the null-law cache).
        statistics : tuple of str, optional
            The statistics drawn (default: those the table judges; for "gaussian" every
            statistic of ``STATISTICS`` may be asked for).

        Returns
        -------
        NullLaw

        Raises
        ------
        QKEnergyError
            An unknown ``kind``, or samples or seed out of range (the message names the parameter).
        """
        law = KINDS.get(kind)
        if law is None:
            raise QKEnergyError(
                f"kind must be one of {', '.join(map(repr, KINDS))}, got {kind!r}", parameter="kind"
            )
        spec = NullSpec(seed=seed, kind=kind, **{law.samples: samples})  # checks samples and seed
        names = NULL_STATISTICS if statistics is None else statistics
        if law.sampler is None:
            return spec.null_law(self.n, self.N, names=names, cache_dir=cache_dir)
        return law.sampler(self.gram, self.N, samples, rotation_seed(spec.seed, self.layer, self.head), names)

    def null(
        self,
        samples: int = SAMPLES,
        seed: int = 0,
        kind: str = "gaussian",
        *,
        statistic: str = "symmetric_energy",
        cache_dir: str | os.PathLike[str] | None = None,
    ) -> Law:
        """The null law of one statistic of this head (default the symmetric energy), as a frozen :class:`Law`.

        ``law.pvalue(head.symmetric_energy)`` is the p the table's BH adjustment takes (the
        Beta tail ``symmetric_energy_p_tail`` where the empirical ``symmetric_energy_p`` sits at
        its floor); ``tail="empirical"`` and ``tail="beta"`` give each column (:meth:`pvalue`).

        Parameters
        ----------
        samples, seed : int
            As :meth:`null_law`'s.
        kind : str
            A registered null (:meth:`null_law`).
        statistic : str
            The statistic's column name.
        cache_dir : path, optional
            As :meth:`null_law`'s.

        Returns
        -------
        Law
            mean, std, cdf, sf, ppf, pvalue, p_tail, z; ``rvs`` for a Gaussian law.

        Examples
        --------
        >>> import qkenergy as qk
        >>> head = qk.open().head(2, 3)
        >>> law = head.null(samples=200)
        >>> law.mean() == 385 / 768  # (N + 1) / (2N), exact
        True
        >>> float(law.pvalue(head.symmetric_energy, tail="empirical"))  # beyond every draw: 2 / (K + 1)
        0.009950248756218905
        >>> law.pvalue(head.symmetric_energy) == law.p_tail(head.symmetric_energy) < 1e-30  # the tail
        True
        """
        names = (statistic,) if statistic not in NULL_STATISTICS else None
        return self.null_law(samples, seed, kind, cache_dir=cache_dir, statistics=names)[statistic]

    def pvalue(
        self,
        samples: int = SAMPLES,
        seed: int = 0,
        kind: str = "gaussian",
        *,
        statistic: str = "symmetric_energy",
        tail: Tail = "auto",
        cache_dir: str | os.PathLike[str] | None = None,
    ) -> float:
        """Two-sided p of this head's statistic under its null law, as the table computes it.

        ``head.pvalue()`` is ``head.null().pvalue(head.symmetric_energy)``: by default the p that
        the table's BH adjustment takes, the Beta tail (``symmetric_energy_p_tail``) where the
        empirical p (``symmetric_energy_p``) sits at its floor 2/(K + 1); ``tail="empirical"``
        and ``tail="beta"`` give each column (:meth:`qkenergy.math.laws.Law.pvalue`).

        Parameters
        ----------
        samples, seed : int
            As :meth:`null_law`'s (the table's).
        kind : str
            A registered null (:meth:`null_law`).
        statistic : str
            The statistic's column name.
        tail : {"auto", "empirical", "beta"}
            Which p.
        cache_dir : path, optional
            As :meth:`null_law`'s.

        Returns
        -------
        float

        Examples
        --------
        >>> import qkenergy as qk
        >>> head = qk.open().head(2, 9)
        >>> head.pvalue(samples=200, tail="empirical"), head.pvalue(samples=200) < 1e-300
        (0.009950248756218905, True)
        """
        law = self.null(samples, seed, kind, statistic=statistic, cache_dir=cache_dir)
        return float(law.pvalue(self._value(statistic), tail=tail))


def _statistic_property(name: str) -> property:
    def get(self: Head) -> float:
        return self._value(name)

    return property(get, doc=f"The head table's ``{name}`` (docs/columns.md).")


for _name in STATISTICS:
    setattr(Head, _name, _statistic_property(_name))

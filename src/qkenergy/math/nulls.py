"""Exact null laws of the per-head statistics for a random Gaussian head.

For W_K, W_Q with iid centred Gaussian entries (Proposition 6 setting), the
Gram matrix G = C C^T of C = [W_K; W_Q] (2n x N) is Wishart_2n(N, I) after
rescaling; unequal variances of W_K and W_Q change no normalized statistic, so
one standard Wishart serves every head of shape (n, N). For N >= 2n it is
sampled by the Bartlett decomposition in O(n^3) per sample, independent of N;
for N < 2n (G singular) by forming C C^T. Feeding these G to
``qkenergy.math.statistics.gram_statistics`` gives the null law of every statistic.
See docs/mathematics.md §6, "The null laws of a head".
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from qkenergy.base.errors import QKEnergyError, check_integer, check_memory
from qkenergy.base.parallel import resolve_threads, single_threaded_blas
from qkenergy.math.baselines import gaussian_head_ratio_expectations
from qkenergy.math.defaults import SAMPLES
from qkenergy.math.moments import MOMENT_STATISTICS
from qkenergy.math.spectrum import CORE_STACK, CoreBuffers, core_eigenvalues, fill_core

if TYPE_CHECKING:  # pragma: no cover
    from qkenergy.math import montecarlo
    from qkenergy.math.entry_laws import EntryLaw
    from qkenergy.math.laws import Law

__all__ = [
    "NULL_STATISTICS",
    "NullLaw",
    "bartlett_gram",
    "bartlett_spectra",
    "check_null_memory",
    "direct_gram",
    "null_gram",
    "null_law",
    "null_law_blocks",
    "null_law_from_blocks",
    "null_statistics_sampler",
]

NULL_STATISTICS: tuple[str, ...] = ("symmetric_energy", "pairing", "lobe_departure", *MOMENT_STATISTICS)
"""The statistics a trained head is judged on against its null laws (analysis, plots, surveys):
s, pairing, lobe_departure and the shape of the normalised spectrum (lobe_imbalance,
lobe_overlap, moment_O, moment_E, moment_R; Lemmas 7 to 10)."""

# Sub-batches keep the temporary arrays near this many float64 values (32 MiB);
# they depend only on (n, N), so seeded results never depend on memory settings.
_MAX_BATCH_VALUES = 1 << 22
_BARTLETT_BATCH_VALUES = 1 << 20  # 8 MiB of normals, reused across sub-batches
_MIRROR_TILE = 32  # rows per strip of the symmetrising copy (32 x 8 B x 2n: in L1 cache)
_STRICT_LOWER = np.tri(_MIRROR_TILE, k=-1, dtype=bool)
_LAUUM_MIN_P = 32  # below this 2n, batched matmul beats per-matrix dlauum calls (measured)


def _check_shape(n: object, N: object) -> tuple[int, int]:
    return check_integer(n, "n"), check_integer(N, "N")


def _mirror_upper(src: np.ndarray, dst: np.ndarray) -> None:
    """dst[:, i, j] = src[:, min(i, j), max(i, j)]: full symmetric matrices from upper triangles.

    The strict lower triangle of ``src`` is never read (it belongs to another
    sample). Works in strips of _MIRROR_TILE rows: the transposed copy of a
    strip reads only that many source rows at a time, which stays in L1 cache
    (a whole-matrix transposed copy is cache- and TLB-bound and slower).
    """
    p = src.shape[-1]
    for a in range(0, p, _MIRROR_TILE):
        e = min(p, a + _MIRROR_TILE)
        dst[:, a:e, a:] = src[:, a:e, a:]  # strip of the upper triangle (diagonal block fixed below)
        dst[:, e:, a:e] = np.swapaxes(src[:, a:e, e:], 1, 2)  # its mirror image
        np.copyto(
            dst[:, a:e, a:e], np.swapaxes(src[:, a:e, a:e], 1, 2), where=_STRICT_LOWER[: e - a, : e - a]
        )


def _bartlett_batches(
    rng: np.random.Generator, n: int, N: int, size: int
) -> Iterator[tuple[int, int, np.ndarray, np.ndarray]]:
    """The Bartlett draws of :func:`bartlett_gram`, one sub-batch at a time: (lo, hi, upper, lower).

    ``upper`` (pairs, p, p) holds the factors U of samples lo..lo+pairs-1 in
    its upper triangle, ``lower`` (full, p, p) the factors L of the next
    samples up to hi in its lower triangle (G = L^T L); the two overlap in one
    buffer (the other triangle of each belongs to the other sample), which is
    reused: use a batch before asking for the next.
    """
    n, N = _check_shape(n, N)
    size = check_integer(size, "size", minimum=0)
    p = 2 * n
    if p > N:
        raise QKEnergyError(
            f"the Bartlett sampler needs N >= 2n, got n={n}, N={N}; use direct_gram or null_gram"
        )
    # Sub-batches of pairs depend only on (n, N) and size: seeded values do not
    # depend on memory settings or chunking (montecarlo.draw passes whole blocks).
    step = max(1, _BARTLETT_BATCH_VALUES // (p * (p + 1)))  # pairs per sub-batch
    buffer = np.empty((min(step, -(-size // 2)), p + 1, p))
    dof = (N - p + 1 + np.arange(p)).astype(np.float64)  # chi^2(N - p + i), i = 1..p
    diag = np.arange(p)
    for lo in range(0, size, 2 * step):
        hi = min(size, lo + 2 * step)
        pairs = -(-(hi - lo) // 2)
        X = buffer[:pairs]
        rng.standard_normal(out=X)
        chi = np.sqrt(rng.chisquare(dof, size=(pairs, 2, p)))
        upper, lower = X[:, :p, :], X[:, 1:, :]  # overlapping views, disjoint triangles
        # The diagonal draws of X are overwritten: they are independent of everything kept.
        upper[:, diag, diag] = chi[:, 0]
        lower[:, diag, diag] = chi[:, 1]
        full = (hi - lo) // 2  # pairs whose L is used; an odd tail draws one L unused
        yield lo, hi, upper, lower[:full]


def bartlett_gram(rng: np.random.Generator, n: int, N: int, size: int) -> np.ndarray:
    """Wishart_2n(N, I) samples of shape (size, 2n, 2n) by the Bartlett decomposition.

    G = U U^T with U (p x p, p = 2n) upper triangular, U_ii^2 ~ chi^2(N - p + i)
    (i = 1..p) and iid standard normal entries above the diagonal; equivalently
    G = L^T L with L = U^T lower triangular. This is the textbook Bartlett
    factor G = L L^T, L_ii^2 ~ chi^2(N - i + 1), conjugated by the index
    reversal J (J G J ~ Wishart_p(N, I) again). O(n^3) per sample, independent
    of N; valid for N >= 2n (docs/mathematics.md §6).

    Two samples share one (p + 1) x p buffer of normals: its upper triangle
    (diagonal included) of rows 0..p-1 holds one U, its lower triangle of rows
    1..p holds another L, and the two regions tile the buffer exactly. So the
    normals are drawn straight into place with no scatter, and LAPACK dlauum
    forms U U^T (and L^T L) in place reading and writing only its own triangle,
    with p^3/3 flops where a general product needs 2 p^3 (syrk p^3).
    The null laws never form G: see :func:`bartlett_spectra`.

    Parameters
    ----------
    rng : numpy.random.Generator
        The source of the draws.
    n : int
        Head dimension (G is 2n x 2n).
    N : int
        Residual width, N >= 2n.
    size : int
        Samples.

    Returns
    -------
    (size, 2n, 2n) ndarray
    """
    n, N = _check_shape(n, N)
    size = check_integer(size, "size", minimum=0)
    p = 2 * n
    out = np.empty((size, p, p))
    if p >= _LAUUM_MIN_P:
        _load_scipy_blas()
    # Many small products: BLAS threads only contend there (on a busy 2-core
    # machine the dlauum loop ran over 100 times slower with 2 threads).
    with single_threaded_blas():
        for lo, hi, upper, lower in _bartlett_batches(rng, n, N, size):
            pairs = len(upper)
            if p < _LAUUM_MIN_P:
                # Tiny matrices: one LAPACK call per matrix costs more than the
                # arithmetic, so form the zero-padded factors and use batched products.
                U, L = np.triu(upper), np.tril(lower)
                np.matmul(U, np.swapaxes(U, 1, 2), out=out[lo : lo + pairs])
                np.matmul(np.swapaxes(L, 1, 2), L, out=out[lo + pairs : hi])
                continue
            from scipy.linalg.lapack import dlauum

            # A C-ordered matrix seen by Fortran is its transpose: the Fortran lower
            # triangle of upper[k].T is U^T, so lower=1 gives (U^T)^T U^T = U U^T; likewise
            # lower=0 on lower[k].T gives L^T L. Both run in place (overwrite_c=1).
            for k in range(pairs):
                dlauum(upper[k].T, lower=1, overwrite_c=1)
                if k < len(lower):
                    dlauum(lower[k].T, lower=0, overwrite_c=1)
            # Outputs of a sub-batch in the order U_1..U_pairs, L_1..L_full (all iid):
            # contiguous destinations copy faster than interleaved ones.
            _mirror_upper(upper, out[lo : lo + pairs])
            _mirror_upper(np.swapaxes(lower, 1, 2), out[lo + pairs : hi])
    return out


def _load_scipy_blas() -> None:
    """Import scipy.linalg's BLAS and LAPACK (~0.25 s, only when sampling) before BLAS is held at one thread.

    It is a second OpenBLAS: loaded inside ``single_threaded_blas`` it would
    escape the limit and run spinning threads beside each sample's product.
    """
    import scipy.linalg.blas  # noqa: F401


def bartlett_spectra(
    rng: np.random.Generator, n: int, N: int, size: int, *, with_h: bool = False
) -> dict[str, np.ndarray | None]:
    """Spectra of ``size`` Wishart_2n(N, I) heads, read straight from the Bartlett draws (N >= 2n).

    The same draws, in the same order, as :func:`bartlett_gram` (U, then L^T
    for the samples drawn as G = L^T L), so this route and the Gram route see
    the same G. Each factor is read in place in the draw buffer by
    ``spectrum.fill_core`` (one triangular product per sample, G never formed
    nor re-factored) and their eigenvalues taken a stack at a time (docs/mathematics.md §6).

    Parameters
    ----------
    rng : numpy.random.Generator
        The source of the draws.
    n : int
        Head dimension.
    N : int
        Residual width, N >= 2n.
    size : int
        Samples.
    with_h : bool
        Also the singular values h of L.

    Returns
    -------
    dict of str to ndarray or None
        ``eigs`` (size, 2n), ``norm_s_sq``, ``norm_l_sq``, ``trace_l`` (size,), ``h`` (size, n)
        with ``with_h``, else None.
    """
    p = 2 * n
    _load_scipy_blas()
    eigs, h = np.empty((size, p)), np.empty((size, n)) if with_h else None
    norm_s_sq, norm_l_sq, trace_l = np.empty(size), np.empty(size), np.empty(size)
    buffers = CoreBuffers.for_head_dim(n)
    # Many small products: BLAS threads only contend there.
    with single_threaded_blas():
        for lo, _, upper, lower in _bartlett_batches(rng, n, N, size):
            start = lo
            for factors, transposed in ((upper, False), (lower, True)):
                # cores in stacks: one eigvalsh per stack (numpy releases the GIL for a stack only)
                for first in range(0, len(factors), CORE_STACK):
                    stack = factors[first : first + CORE_STACK]
                    for slot, factor in enumerate(stack):
                        i = start + first + slot
                        norm_s_sq[i], norm_l_sq[i], trace_l[i], h_i = fill_core(
                            factor, transposed=transposed, buffers=buffers, slot=slot, with_h=with_h
                        )
                        if h is not None:
                            h[i] = h_i
                    rows = slice(start + first, start + first + len(stack))
                    eigs[rows] = core_eigenvalues(buffers, len(stack), transposed=transposed)
                start += len(factors)
    return {"eigs": eigs, "norm_s_sq": norm_s_sq, "norm_l_sq": norm_l_sq, "trace_l": trace_l, "h": h}


def direct_gram(
    rng: np.random.Generator, n: int, N: int, size: int, law: EntryLaw | None = None
) -> np.ndarray:
    """Gram matrices G = C C^T (size, 2n, 2n), C = [W_K; W_Q] (2n x N) with iid entries.

    With the default Gaussian entries G ~ Wishart_2n(N, I): the reference
    route, O(n^2 N) per sample, and the route for N < 2n where G is singular
    (rank N). ``law`` (an entry_laws.EntryLaw, unit variance) gives the random
    heads of any other entry law (the non-Gaussian baselines).

    Parameters
    ----------
    rng : numpy.random.Generator
        The source of the draws.
    n : int
        Head dimension.
    N : int
        Residual width.
    size : int
        Samples.
    law : EntryLaw, optional
        The entry law (default Gaussian).

    Returns
    -------
    (size, 2n, 2n) ndarray
    """
    n, N = _check_shape(n, N)
    size = check_integer(size, "size", minimum=0)
    p = 2 * n
    out = np.empty((size, p, p))
    step = max(1, _MAX_BATCH_VALUES // (p * N))
    for lo in range(0, size, step):
        hi = min(size, lo + step)
        shape = (hi - lo, p, N)
        C = rng.standard_normal(shape) if law is None else law.sample(rng, shape)
        np.matmul(C, np.swapaxes(C, 1, 2), out=out[lo:hi])
    return out


def null_gram(rng: np.random.Generator, n: int, N: int, size: int) -> np.ndarray:
    """Gram matrices (size, 2n, 2n) of a random Gaussian head: Bartlett if N >= 2n, else C C^T.

    Parameters
    ----------
    rng : numpy.random.Generator
        The source of the draws.
    n : int
        Head dimension.
    N : int
        Residual width.
    size : int
        Samples.

    Returns
    -------
    (size, 2n, 2n) ndarray
        Wishart_2n(N, I) draws (docs/mathematics.md §6).
    """
    n, N = _check_shape(n, N)
    if 2 * n <= N:
        return bartlett_gram(rng, n, N, size)
    return direct_gram(rng, n, N, size)


def _statistic_names(names: Sequence[str] | None = None) -> tuple[str, ...]:
    from qkenergy.math.statistics import STATISTICS as every

    if names is None:
        return every
    names = tuple(names)
    unknown = [name for name in names if name not in every]
    if unknown or not names:
        raise QKEnergyError(f"unknown statistic {unknown[0] if unknown else ''!r}; valid: {', '.join(every)}")
    return names


def null_statistics_sampler(n: int, N: int, names: Sequence[str]) -> montecarlo.Sampler:
    """A montecarlo sampler of the statistics ``names`` of Gaussian heads (n, N): rows (size, len(names)).

    For N >= 2n the Bartlett factors are read in place (:func:`bartlett_spectra`:
    G is never formed nor re-factored, the singular values of L only when
    ``names`` need them) into ``statistics.spectra_statistic_columns``. For
    N < 2n, G = C C^T (:func:`direct_gram`) into ``statistics.statistic_columns``.
    A subset of names gives bitwise the same columns as all of them.

    Parameters
    ----------
    n, N : int
        The head shape.
    names : sequence of str
        The statistics drawn (numbers: the Type II radius, which only names head types, plays no part).

    Returns
    -------
    callable
        ``sampler(rng, size) -> (size, len(names)) ndarray``.
    """
    from qkenergy.math import statistics

    names = _statistic_names(names)
    with_h = any(name in statistics.SINGULAR_VALUE_STATISTICS for name in names)

    def sample(rng: np.random.Generator, size: int) -> np.ndarray:
        if 2 * n > N:
            return statistics.statistic_columns(direct_gram(rng, n, N, size), N, names)
        spectra = bartlett_spectra(rng, n, N, size, with_h=with_h)
        return statistics.spectra_statistic_columns(spectra, N, names)

    return sample


@dataclass(frozen=True, eq=False)
class NullLaw:
    """Null samples of every scalar statistic for a random Gaussian head of shape (n, N).

    ``values`` has shape (size, len(names)). ``mean`` is exact where the spec
    gives it: (N+1)/(2N) for symmetric_energy (Proposition 6, 1 <= n <= N).
    Tail probabilities are empirical, (1 + count)/(1 + K) form, never 0.
    NaN null samples (undefined statistics) are left out of every summary.
    ``law[name]`` is that statistic's :class:`~qkenergy.math.laws.Law` (mean, std,
    sf, cdf, ppf, pvalue; ``rvs`` fresh draws for the Gaussian null, ``kind``
    "gaussian"; the rotation and layer nulls hold their samples only).

    Parameters
    ----------
    n, N : int
        The head shape: head dimension and residual width.
    seed : int
        The seed of the draws.
    names : tuple of str
        The statistics drawn, one column of ``values`` each.
    values : (size, len(names)) ndarray
        The null samples.
    kind : str
        "gaussian", "rotation" or "layer" (docs/mathematics.md §6, §8).
    """

    n: int
    N: int
    seed: int
    names: tuple[str, ...]
    values: np.ndarray = field(repr=False)
    kind: str = "gaussian"

    def __getitem__(self, name: str) -> Law:
        """The null law of the statistic ``name`` alone (a frozen :class:`~qkenergy.math.laws.Law`, made once).

        Every summary below (mean, stderr, sd, quantiles, z, p) is that Law's.
        """
        laws: dict[str, Law] = self.__dict__.setdefault("_laws", {})
        if name not in laws:
            from qkenergy.math.laws import Law

            sampler = None
            if self.kind == "gaussian":
                draw = null_statistics_sampler(self.n, self.N, (name,))

                def sampler(rng: np.random.Generator, size: int) -> np.ndarray:
                    return draw(rng, size)[:, 0]

            laws[name] = Law(
                name,
                self.samples(name),
                exact_mean=self.exact_mean(name),
                sampler=sampler,
                description=f"{self.kind} null, n={self.n}, N={self.N}, seed {self.seed}",
            )
        return laws[name]

    def __contains__(self, name: object) -> bool:
        return name in self.names

    @property
    def size(self) -> int:
        """Number of null samples drawn (K, before leaving out NaN)."""
        return int(self.values.shape[0])

    def _index(self, name: str) -> int:
        try:
            return self.names.index(name)
        except ValueError:
            raise QKEnergyError(f"unknown statistic {name!r}; valid: {', '.join(self.names)}") from None

    def samples(self, name: str) -> np.ndarray:
        """All null samples of ``name`` (read-only view, NaN included).

        Parameters
        ----------
        name : str
            One of :attr:`names`.

        Returns
        -------
        (K,) ndarray
        """
        x = self.values[:, self._index(name)]
        x.flags.writeable = False
        return x

    def exact_mean(self, name: str) -> float | None:
        """The spec's exact null mean of ``name``, or None when only Monte Carlo is available.

        Parameters
        ----------
        name : str
            One of :attr:`names`.

        Returns
        -------
        float or None
        """
        self._index(name)
        if name == "symmetric_energy" and self.n <= self.N:
            return gaussian_head_ratio_expectations(self.n, self.N).symmetric
        return None

    def mean(self, name: str) -> float:
        """Null mean: exact (N+1)/(2N) for symmetric_energy (Proposition 6), else Monte Carlo (:meth:`Law.mean`).

        Parameters
        ----------
        name : str
            One of :attr:`names`.

        Returns
        -------
        float
        """
        return self[name].mean()

    def stderr(self, name: str) -> float:
        """Standard error of :meth:`mean`: 0 when exact, else sd/sqrt(K) (:meth:`Law.stderr`).

        Parameters
        ----------
        name : str
            One of :attr:`names`.

        Returns
        -------
        float
        """
        return self[name].stderr()

    def sd(self, name: str) -> float:
        """Null standard deviation (Monte Carlo, ddof = 1; :meth:`Law.std`).

        Parameters
        ----------
        name : str
            One of :attr:`names`.

        Returns
        -------
        float
        """
        return self[name].std()

    def quantiles(self, name: str, qs: float | Sequence[float] | np.ndarray) -> np.ndarray:
        """Empirical null quantiles of ``name`` at probabilities ``qs`` (:meth:`Law.ppf`).

        Parameters
        ----------
        name : str
            One of :attr:`names`.
        qs : float or sequence of float
            Probabilities in [0, 1].

        Returns
        -------
        ndarray
            One quantile per probability.
        """
        return np.asarray(self[name].ppf(qs))

    def z(self, name: str, x: float | np.ndarray) -> np.ndarray | float:
        """z-score (x - mean)/sd against the null law; NaN in, NaN out (:meth:`Law.z`).

        Parameters
        ----------
        name : str
            One of :attr:`names`.
        x : float or ndarray
            Values of the statistic.

        Returns
        -------
        ndarray or float
            Of the shape of ``x``.
        """
        return self[name].z(x)

    def p_two_sided(self, name: str, x: float | np.ndarray) -> np.ndarray | float:
        """Empirical two-sided tail probability of x under the null (:meth:`Law.pvalue`).

        p = min(1, 2 min(1 + #{null <= x}, 1 + #{null >= x}) / (1 + K)), never 0;
        vectorised over x; NaN in, NaN out.

        Parameters
        ----------
        name : str
            One of :attr:`names`.
        x : float or ndarray
            Values of the statistic.

        Returns
        -------
        ndarray or float
            Of the shape of ``x``, in (0, 1].
        """
        return self[name].pvalue(x, tail="empirical")


def null_law(
    n: int,
    N: int,
    *,
    samples: int = SAMPLES,
    seed: int = 0,
    progress: bool = False,
    chunk_size: int | None = None,
    names: Sequence[str] | None = None,
    threads: int | None = 1,
) -> NullLaw:
    """Null law of the statistics ``names`` (default: every one of ``statistics.STATISTICS``), Gaussian head (n, N).

    Draws G ~ Wishart_2n(N, I) through :func:`montecarlo.draw` (seeded,
    chunk-invariant) and evaluates the statistics on them with
    :func:`null_statistics_sampler` (Bartlett factors read in place, no G formed, for N >= 2n).
    This module does no I/O:
    :func:`qkenergy.analysis.null_cache.null_law` (same parameters plus ``cache_dir``)
    keeps the samples on disk and calls this function on a miss.

    Parameters
    ----------
    n : int
        Head dimension.
    N : int
        Residual width.
    samples : int
        Null draws K.
    seed : int
        Seed of the draws.
    progress : bool
        Show a progress bar on stderr.
    chunk_size : int, optional
        As :func:`montecarlo.draw`'s; the values do not depend on it.
    names : sequence of str, optional
        The statistics drawn.
    threads : int or None
        Threads for the seeded blocks, BLAS on one thread each (None: every core); the values
        do not depend on it.

    Returns
    -------
    NullLaw
        ``kind`` "gaussian"; the exact mean (N+1)/(2N) of symmetric_energy (Proposition 6,
        docs/mathematics.md §6).

    Examples
    --------
    >>> from qkenergy.math.nulls import null_law
    >>> law = null_law(4, 16, samples=200, seed=0, names=["symmetric_energy", "pairing"])
    >>> law.mean("symmetric_energy") == 17 / 32, law["pairing"].size
    (True, 200)
    """
    n, N = _check_shape(n, N)
    samples = check_integer(samples, "samples", minimum=2)
    seed = check_integer(seed, "seed", minimum=0)
    check_null_memory(n, N, samples)
    names = _statistic_names(names)
    # the sampling engine, imported to draw only (a run without null laws skips it)
    from qkenergy.math import montecarlo

    values = montecarlo.draw(
        null_statistics_sampler(n, N, names),
        samples,
        seed=seed,
        chunk_size=montecarlo.BLOCK_SIZE if chunk_size is None else chunk_size,
        progress=progress,
        description=f"null law n={n} N={N}",
        threads=resolve_threads(threads),
    )
    values.flags.writeable = False
    return NullLaw(n=n, N=N, seed=seed, names=names, values=values)


def null_law_blocks(
    n: int,
    N: int,
    first: int,
    last: int,
    *,
    samples: int = SAMPLES,
    seed: int = 0,
    names: Sequence[str] | None = None,
) -> np.ndarray:
    """Rows of seeded blocks ``first`` to ``last - 1`` of :func:`null_law`'s values, bitwise.

    Every block draws from its own generator (:func:`montecarlo.draw_blocks`),
    so the blocks of one law can be drawn by different processes (a survey's
    Dask workers) and joined by :func:`null_law_from_blocks` into exactly the
    law that :func:`null_law` draws in one piece.

    Parameters
    ----------
    n, N : int
        The head shape.
    first, last : int
        The blocks, ``first`` included, ``last`` not.
    samples : int
        The whole law's draws.
    seed : int
        The whole law's seed.
    names : sequence of str, optional
        The statistics drawn.

    Returns
    -------
    ndarray
        The rows of these blocks, one column per name.
    """
    n, N = _check_shape(n, N)
    samples = check_integer(samples, "samples", minimum=2)
    seed = check_integer(seed, "seed", minimum=0)
    check_null_memory(n, N, samples)
    sampler = null_statistics_sampler(n, N, _statistic_names(names))
    from qkenergy.math import montecarlo

    return montecarlo.draw_blocks(sampler, samples, first, last, seed=seed)


def null_law_from_blocks(
    n: int, N: int, blocks: Sequence[np.ndarray], *, seed: int = 0, names: Sequence[str] | None = None
) -> NullLaw:
    """The :class:`NullLaw` whose values are ``blocks`` (from :func:`null_law_blocks`, in block order).

    Parameters
    ----------
    n, N : int
        The head shape.
    blocks : sequence of ndarray
        The rows of every block, in block order.
    seed : int
        The law's seed.
    names : sequence of str, optional
        The statistics, one column each.

    Returns
    -------
    NullLaw
    """
    values = np.concatenate(blocks, axis=0) if len(blocks) > 1 else np.array(blocks[0])
    names = _statistic_names(names)
    if values.ndim != 2 or values.shape[1] != len(names):
        raise QKEnergyError(f"null-law blocks of shape {values.shape} do not hold {len(names)} statistics")
    values.flags.writeable = False
    return NullLaw(n=int(n), N=int(N), seed=int(seed), names=names, values=values)


def check_null_memory(n: int, N: int, samples: int) -> None:
    """Refuse (QKEnergyError) a null law whose memory would be absurd, before anything is allocated.

    Counts the samples of every statistic with a sorted copy, one block of
    2n x 2n matrices with the statistics' work space (about three times the
    block), and the direct route's C (2n x N) for N < 2n or non-Gaussian heads.

    Parameters
    ----------
    n, N : int
        The head shape.
    samples : int
        Null samples.

    Raises
    ------
    QKEnergyError
        When the law would not fit in memory (``base.errors.check_memory``).
    """
    n, N = _check_shape(n, N)
    samples = check_integer(samples, "samples", minimum=2)
    p = 2 * n
    from qkenergy.math import montecarlo

    chunk = montecarlo.BLOCK_SIZE
    needed = 16 * samples * len(_statistic_names()) + 3 * 8 * chunk * p * p + 8 * p * N
    check_memory(needed, f"the null law of a head n={n}, N={N} with {samples} samples")

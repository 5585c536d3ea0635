"""Seeded, chunk-invariant Monte Carlo engine and the energy experiments of
Corollaries 1 and 2 (ratio of expectations) and Corollary 1 / Proposition 6
(expectation of the ratio).

Reproducibility contract: ``numpy.random.SeedSequence(seed)`` is spawned into
fixed blocks of :data:`BLOCK_SIZE` samples; block ``b`` always draws from its
own child generator (spawn key ``(b,)``), whatever the chunk size. A chunk is a
group of consecutive blocks whose raw draws are concatenated and passed through
an optional row-wise ``transform`` at once (vectorisation), bounding memory to
one chunk. Results are therefore bitwise identical for every ``chunk_size``.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass

import numpy as np

from qkenergy.base.errors import QKEnergyError, check_integer, check_memory
from qkenergy.base.formatting import progress_bar
from qkenergy.base.parallel import single_threaded_blas
from qkenergy.math import baselines
from qkenergy.math.energies import energies_from_invariants
from qkenergy.math.entry_laws import EntryLaw, entry_law

__all__ = [
    "BLOCK_SIZE",
    "DEFAULT_CHUNK_BLOCKS",
    "MODELS",
    "EnergyEstimates",
    "Estimate",
    "block_count",
    "block_generator",
    "draw",
    "draw_blocks",
    "energy_expectations",
    "energy_samples",
    "estimate_mean",
    "estimate_ratio",
]

BLOCK_SIZE = 256
"""Samples per random block. Changing it changes every seeded result.

Small enough that one block of 256 x 256 Gram matrices (n = 128) is 128 MiB."""

DEFAULT_CHUNK_BLOCKS = 16
"""Blocks per chunk when ``chunk_size`` is None."""

# Per-block sub-batches keep peak memory near this many float64 values; they
# depend only on the model's shape, never on the chunk size.
_MAX_BATCH_VALUES = 1 << 23

MODELS = ("square", "qk")

# numpy.random in quotes: evaluating it here would import it (~8 ms) into every run, drawing or not
Sampler = Callable[["np.random.Generator", int], np.ndarray]
Transform = Callable[[np.ndarray], np.ndarray]


def block_generator(seed: int, block: int) -> np.random.Generator:
    """Generator of block ``block``: the ``block``-th child of ``SeedSequence(seed)``.

    Same stream as ``SeedSequence(seed).spawn(block + 1)[block]``, built lazily
    so that millions of samples need no list of children.

    Parameters
    ----------
    seed : int
        The draw's seed.
    block : int
        The block's index, from 0.

    Returns
    -------
    numpy.random.Generator
    """
    root = np.random.SeedSequence(seed)
    child = np.random.SeedSequence(root.entropy, spawn_key=(*root.spawn_key, block), pool_size=root.pool_size)
    return np.random.Generator(np.random.PCG64(child))


def block_count(samples: int) -> int:
    """Number of seeded blocks that ``samples`` draws span (the last one may be partial).

    Parameters
    ----------
    samples : int

    Returns
    -------
    int
        ceil(samples / BLOCK_SIZE).
    """
    return -(-check_integer(samples, "samples") // BLOCK_SIZE)


def draw_blocks(
    sampler: Sampler,
    samples: int,
    first: int,
    last: int,
    *,
    seed: int,
    transform: Transform | None = None,
) -> np.ndarray:
    """Rows ``first * BLOCK_SIZE`` up to ``last * BLOCK_SIZE`` (at most ``samples``) of :func:`draw`.

    Blocks ``first`` to ``last - 1``, each from its own generator, then
    ``transform`` on them at once: bitwise the rows that :func:`draw` puts
    there, so the blocks of one draw can be computed anywhere (threads, Dask
    tasks) and concatenated.

    Parameters
    ----------
    sampler : callable
        As :func:`draw`'s.
    samples : int
        The whole draw's rows.
    first, last : int
        The blocks, ``first`` included, ``last`` not.
    seed : int
        The whole draw's seed.
    transform : callable, optional
        As :func:`draw`'s.

    Returns
    -------
    ndarray
        The rows of these blocks.
    """
    if not 0 <= first < last <= block_count(samples):
        raise QKEnergyError(
            f"blocks [{first}, {last}) outside the {block_count(samples)} blocks of {samples}"
        )
    parts = []
    for b in range(first, last):
        size = min(BLOCK_SIZE, samples - b * BLOCK_SIZE)
        rows = np.asarray(sampler(block_generator(seed, b), size))
        if rows.ndim == 0 or rows.shape[0] != size:
            raise ValueError(f"sampler returned shape {rows.shape}, expected leading axis {size}")
        parts.append(rows)
    chunk = parts[0] if len(parts) == 1 else np.concatenate(parts, axis=0)
    return chunk if transform is None else np.asarray(transform(chunk))


def draw(
    sampler: Sampler,
    samples: int,
    *,
    seed: int,
    chunk_size: int | None = None,
    transform: Transform | None = None,
    progress: bool = False,
    description: str = "sampling",
    threads: int = 1,
) -> np.ndarray:
    """Draw ``samples`` rows: ``sampler(rng, size)`` per block, then ``transform`` per chunk.

    Every block of BLOCK_SIZE rows draws from its own generator
    (:func:`block_generator`), so the rows depend on ``seed`` only: neither on
    ``chunk_size`` nor on ``threads``.

    Parameters
    ----------
    sampler : callable
        ``sampler(rng, size)`` returns an array of shape ``(size, ...)``.
    samples : int
        Rows drawn.
    seed : int
        The draw's seed.
    chunk_size : int, optional
        Samples per chunk handed to ``transform`` (rounded up to whole blocks).
    transform : callable, optional
        Maps a chunk of sampler rows to rows of output, row by row (it must treat rows
        independently, as batched numpy code does).
    progress : bool
        A rich progress bar when there is more than one chunk.
    description : str
        The progress bar's text.
    threads : int
        Chunks run on this many threads (BLAS on one thread each; sampler and transform
        must be thread-safe, as numpy code without shared state is).

    Returns
    -------
    (samples, ...) ndarray

    Examples
    --------
    >>> from qkenergy.math.montecarlo import draw
    >>> rows = draw(lambda rng, size: rng.standard_normal((size, 2)), 5000, seed=0)
    >>> rows.shape, bool((rows == draw(lambda rng, size: rng.standard_normal((size, 2)), 5000, seed=0, chunk_size=1)).all())
    ((5000, 2), True)
    """
    samples = check_integer(samples, "samples")
    seed = check_integer(seed, "seed", 0)
    threads = check_integer(threads, "threads")
    if chunk_size is None:
        chunk_blocks = DEFAULT_CHUNK_BLOCKS
    else:
        chunk_blocks = max(1, -(-check_integer(chunk_size, "chunk_size") // BLOCK_SIZE))
    check_memory(8 * samples, f"{samples} Monte Carlo samples")  # at least one float64 each
    n_blocks = block_count(samples)
    n_chunks = -(-n_blocks // chunk_blocks)

    def run_chunk(c: int) -> tuple[int, np.ndarray]:
        first = c * chunk_blocks
        last = min(n_blocks, first + chunk_blocks)
        return first * BLOCK_SIZE, draw_blocks(sampler, samples, first, last, seed=seed, transform=transform)

    out: np.ndarray | None = None
    bar = progress_bar("{task.description}", remaining=True) if progress and n_chunks > 1 else None
    with bar if bar is not None else contextlib.nullcontext():
        task = bar.add_task(description, total=samples) if bar is not None else None
        for start, chunk in _chunks_in_threads(run_chunk, n_chunks, threads):
            if out is None:
                check_memory(samples * chunk[:1].nbytes, f"{samples} Monte Carlo samples")
                out = np.empty((samples, *chunk.shape[1:]), dtype=chunk.dtype)
            out[start : start + chunk.shape[0]] = chunk
            if bar is not None and task is not None:
                bar.update(task, advance=chunk.shape[0])
    assert out is not None
    return out


def _chunks_in_threads(
    run_chunk: Callable[[int], tuple[int, np.ndarray]], n_chunks: int, threads: int
) -> Iterator[tuple[int, np.ndarray]]:
    """run_chunk(c) for every chunk: inline with one thread, else as they finish on a thread pool."""
    if threads <= 1 or n_chunks <= 1:
        for c in range(n_chunks):
            yield run_chunk(c)
        return
    with single_threaded_blas(), ThreadPoolExecutor(max_workers=min(threads, n_chunks)) as pool:
        futures = [pool.submit(run_chunk, c) for c in range(n_chunks)]
        try:
            for future in as_completed(futures):
                yield future.result()
        finally:
            for future in futures:
                future.cancel()


@dataclass(frozen=True)
class Estimate:
    """A Monte Carlo estimate: value, standard error, confidence interval, sample count.

    Parameters
    ----------
    value, stderr : float
        The estimate and its standard error.
    ci_low, ci_high : float
        The confidence interval's ends.
    samples : int
        The draws it rests on.
    """

    value: float
    stderr: float
    ci_low: float
    ci_high: float
    samples: int

    def within(self, target: float, k: float = 5.0) -> bool:
        """True when |value - target| <= k standard errors."""
        return bool(abs(self.value - target) <= k * self.stderr)

    def __str__(self) -> str:
        return f"{self.value:.6g} ± {self.stderr:.2g}"


def _estimate(value: float, stderr: float, confidence: float, samples: int) -> Estimate:
    if not 0 < confidence < 1:
        raise QKEnergyError(f"confidence must be in (0, 1), got {confidence!r}")
    # Student t with K-1 degrees of freedom; equals the normal interval for large K.
    from scipy import stats  # ~0.7 s to import: only when an interval is asked for

    q = float(stats.t.ppf(0.5 + confidence / 2, samples - 1)) if samples > 1 else math.nan
    return Estimate(value, stderr, value - q * stderr, value + q * stderr, samples)


def _as_samples(x: np.ndarray, name: str) -> np.ndarray:
    x = np.asarray(x, dtype=np.float64).ravel()
    if x.size == 0:
        raise QKEnergyError(f"{name} has no samples")
    return x


def estimate_mean(x: np.ndarray, confidence: float = 0.95) -> Estimate:
    """Sample mean with stderr sd/sqrt(K) (ddof = 1) and a Student-t interval.

    Parameters
    ----------
    x : (K,) ndarray
        Samples; NaN samples propagate (drop them first if intended).
    confidence : float
        Level of the interval.

    Returns
    -------
    Estimate
    """
    x = _as_samples(x, "x")
    k = x.size
    value = float(np.mean(x))
    stderr = float(np.std(x, ddof=1) / math.sqrt(k)) if k > 1 else math.nan
    return _estimate(value, stderr, confidence, k)


def estimate_ratio(num: np.ndarray, den: np.ndarray, confidence: float = 0.95) -> Estimate:
    """Ratio of expectations R = mean(num)/mean(den), delta-method stderr.

    stderr^2 = Var(num - R den) / (K mean(den)^2): the first-order error of
    the ratio estimator of E[num]/E[den] (e.g. E||S||^2/E||L||^2, Corollary 1).

    Parameters
    ----------
    num, den : (K,) ndarray
        Paired samples of the numerator and denominator.
    confidence : float
        Level of the interval (as :func:`estimate_mean`'s).

    Returns
    -------
    Estimate
    """
    num = _as_samples(num, "num")
    den = _as_samples(den, "den")
    if num.shape != den.shape:
        raise QKEnergyError(f"num and den must have the same length, got {num.size} and {den.size}")
    k = num.size
    mden = float(np.mean(den))
    if mden == 0.0:
        raise QKEnergyError("den has mean 0: the ratio of expectations is undefined")
    value = float(np.mean(num)) / mden
    stderr = float(np.std(num - value * den, ddof=1) / (math.sqrt(k) * abs(mden))) if k > 1 else math.nan
    return _estimate(value, stderr, confidence, k)


@dataclass(frozen=True)
class EnergyEstimates:
    """Monte Carlo energies of a random model with its closed-form baseline (:func:`energy_expectations`).

    Parameters
    ----------
    model : str
        "square" (an iid N x N L, Corollary 1) or "qk" (L = W_K^T W_Q, Corollary 2).
    law : str
        The entry law's spec.
    N : int
        Residual width (size of L).
    n : int or None
        Head dimension of the "qk" model.
    samples, seed : int
        Draws and their seed.
    total, symmetric, skew : Estimate
        E||L||^2, E||S||^2, E||T||^2.
    ratio_of_expectations : Estimate
        E||S||^2/E||L||^2 (Corollaries 1, 2: (N+1)/(2N) for every law).
    expectation_of_ratio : Estimate
        E[||S||^2/||L||^2] (Corollary 1 Gaussian, Proposition 6; differs for skewed laws).
    baseline : EnergyExpectations
        The closed forms.
    """

    model: str
    law: str
    N: int
    n: int | None
    samples: int
    seed: int
    total: Estimate
    symmetric: Estimate
    skew: Estimate
    ratio_of_expectations: Estimate
    expectation_of_ratio: Estimate
    baseline: baselines.EnergyExpectations


def _sub_batches(size: int, per_sample: int) -> list[tuple[int, int]]:
    step = max(1, _MAX_BATCH_VALUES // max(1, per_sample))
    return [(i, min(size, i + step)) for i in range(0, size, step)]


def _square_energies(law: EntryLaw, N: int, sigma2: float) -> Sampler:
    def sampler(rng: np.random.Generator, size: int) -> np.ndarray:
        out = np.empty((size, 2))
        for lo, hi in _sub_batches(size, N * N):
            L = law.sample(rng, (hi - lo, N, N), variance=sigma2)
            # Lemma 5: ||S||^2 = (||L||^2 + tr L^2)/2 with tr L^2 = sum L * L^T.
            out[lo:hi, 0] = np.einsum("bij,bij->b", L, L)
            out[lo:hi, 1] = np.einsum("bij,bji->b", L, L)
        return out

    return sampler


def _qk_energies(law: EntryLaw, n: int, N: int, sigma2_K: float, sigma2_Q: float) -> Sampler:
    def sampler(rng: np.random.Generator, size: int) -> np.ndarray:
        out = np.empty((size, 2))
        for lo, hi in _sub_batches(size, 2 * n * N):
            wk = law.sample(rng, (hi - lo, n, N), variance=sigma2_K)
            wq = law.sample(rng, (hi - lo, n, N), variance=sigma2_Q)
            # the Gram route (docs/mathematics.md §4), never forming the N x N matrix L:
            # ||L||^2 = sum G_KK * G_QQ, tr L^2 = sum G_QK * G_QK^T.
            gkk = wk @ np.swapaxes(wk, 1, 2)
            gqq = wq @ np.swapaxes(wq, 1, 2)
            gqk = wq @ np.swapaxes(wk, 1, 2)
            out[lo:hi, 0] = np.einsum("bij,bij->b", gkk, gqq)
            out[lo:hi, 1] = np.einsum("bij,bji->b", gqk, gqk)
        return out

    return sampler


def _finish_energies(raw: np.ndarray) -> np.ndarray:
    """(||L||^2, tr L^2) rows -> (||L||^2, ||S||^2, ||T||^2, s) rows by Lemma 5; s is NaN for L = 0."""
    e = energies_from_invariants(raw[:, 0], raw[:, 1])
    return np.stack([e.norm_l_sq, e.norm_s_sq, e.norm_t_sq, e.symmetric_ratio], axis=1)


def _closed_form(
    model: str, N: int, n: int | None, sigma2: float, sigma2_K: float, sigma2_Q: float
) -> baselines.EnergyExpectations:
    """Validate the model's arguments; its closed-form energies (Corollary 1 or Corollary 2)."""
    if model not in MODELS:
        raise QKEnergyError(f"unknown model {model!r}; valid: {', '.join(MODELS)}")
    if model == "square":
        if n is not None:
            raise QKEnergyError("n must be None for model 'square' (L is N x N)")
        return baselines.iid_square_expectations(N, sigma2)
    if n is None:
        raise QKEnergyError("n (head dimension) is required for model 'qk'")
    return baselines.qk_product_expectations(n, N, sigma2_K, sigma2_Q)


def energy_samples(
    model: str,
    law: str | EntryLaw,
    N: int,
    n: int | None = None,
    *,
    samples: int,
    seed: int,
    sigma2: float = 1.0,
    sigma2_K: float = 1.0,
    sigma2_Q: float = 1.0,
    chunk_size: int | None = None,
    progress: bool = False,
) -> np.ndarray:
    """Per-sample (||L||^2, ||S||^2, ||T||^2, s) of a random model.

    ``model="square"``: L is N x N with iid entries of variance ``sigma2`` (Corollary 1).
    ``model="qk"``: L = W_K^T W_Q, n x N factors of variances ``sigma2_K``, ``sigma2_Q``
    (Corollary 2). Energies use Lemma 5, without loops over entries.

    Parameters
    ----------
    model : str
        "square" or "qk".
    law : str or EntryLaw
        The entry law.
    N : int
        Residual width.
    n : int, optional
        Head dimension, for "qk".
    samples, seed : int
        Draws and their seed.
    sigma2, sigma2_K, sigma2_Q : float
        Entry variances.
    chunk_size : int, optional
        As :func:`draw`'s.
    progress : bool
        Show a progress bar.

    Returns
    -------
    (samples, 4) ndarray
    """
    _closed_form(model, N, n, sigma2, sigma2_K, sigma2_Q)  # validates every argument
    law = entry_law(law)
    N = int(N)
    if model == "square":
        sampler = _square_energies(law, N, float(sigma2))
    else:
        n = int(n)  # type: ignore[arg-type]
        sampler = _qk_energies(law, n, N, float(sigma2_K), float(sigma2_Q))
    return draw(
        sampler,
        samples,
        seed=seed,
        chunk_size=chunk_size,
        transform=_finish_energies,
        progress=progress,
        description=f"{model} {law.spec} N={N}" + (f" n={n}" if n is not None else ""),
    )


def energy_expectations(
    model: str,
    law: str | EntryLaw,
    N: int,
    n: int | None = None,
    *,
    samples: int,
    seed: int,
    sigma2: float = 1.0,
    sigma2_K: float = 1.0,
    sigma2_Q: float = 1.0,
    chunk_size: int | None = None,
    progress: bool = False,
    confidence: float = 0.95,
) -> EnergyEstimates:
    """Estimate E||L||^2, E||S||^2, E||T||^2, E||S||^2/E||L||^2 and E[||S||^2/||L||^2].

    Compare with Corollary 1 (``model="square"``) or Corollary 2 (``model="qk"``)
    in ``.baseline``; the expectation of the ratio equals (N+1)/(2N) for
    Gaussian entries (Corollary 1, Proposition 6) but not for skewed laws
    (docs/mathematics.md §5).

    Parameters
    ----------
    model : str
        "square" or "qk" (see :func:`energy_samples`).
    law : str or EntryLaw
        The entry law (:func:`qkenergy.math.entry_laws.entry_law`).
    N : int
        Residual width.
    n : int, optional
        Head dimension, for "qk".
    samples, seed : int
        Draws and their seed.
    sigma2, sigma2_K, sigma2_Q : float
        Entry variances of the square L, of W_K and of W_Q.
    chunk_size : int, optional
        As :func:`draw`'s.
    progress : bool
        Show a progress bar.
    confidence : float
        Level of the intervals.

    Returns
    -------
    EnergyEstimates
    """
    law = entry_law(law)
    x = energy_samples(
        model,
        law,
        N,
        n,
        samples=samples,
        seed=seed,
        sigma2=sigma2,
        sigma2_K=sigma2_K,
        sigma2_Q=sigma2_Q,
        chunk_size=chunk_size,
        progress=progress,
    )
    base = _closed_form(model, N, n, sigma2, sigma2_K, sigma2_Q)
    s = x[:, 3]
    return EnergyEstimates(
        model=model,
        law=law.spec,
        N=int(N),
        n=None if n is None else int(n),
        samples=int(samples),
        seed=int(seed),
        total=estimate_mean(x[:, 0], confidence),
        symmetric=estimate_mean(x[:, 1], confidence),
        skew=estimate_mean(x[:, 2], confidence),
        ratio_of_expectations=estimate_ratio(x[:, 1], x[:, 0], confidence),
        expectation_of_ratio=estimate_mean(s[np.isfinite(s)], confidence),
        baseline=base,
    )

"""The on-disk cache of null laws: one ``.npz`` file per head shape (n, N) and :class:`NullSpec`.

A law's file name and key derive from the shape, the statistics drawn and the
spec's ``samples`` and ``seed`` (its ``kind`` and ``rotation_samples`` do not
change the Gaussian law, nor does the type rule's radius); the names and keys
are those of the files written before the spec existed, so older caches stay valid.

The cache lives on a disk other processes (and people) can write to, so a
file is trusted only when it is exactly what :func:`save_cached` writes: a
regular file of the expected size, an uncompressed zip of the three members
``values.npy`` (float64, shape (samples, statistics)), ``names.npy`` (the
statistic names) and ``version.npy``. Anything else (a FIFO or device, a
compressed or oversized member, an array header announcing another shape or
dtype, a pickle) is a miss: the law is recomputed and the file replaced.
Nothing is read beyond the expected size and nothing is unpickled.

An unwritable cache directory is not an error: one :class:`NullCacheWarning`
(the CLI prints it as one line) and the run goes on without caching.

The sampling itself is :func:`qkenergy.math.nulls.null_law` (pure); this module
wraps it with the file I/O.
"""

from __future__ import annotations

import functools
import hashlib
import io
import os
import stat
import warnings
import zipfile
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from qkenergy.base.atomic import OutputError, atomic_path
from qkenergy.base.errors import check_integer
from qkenergy.math import layer_null, montecarlo, nulls
from qkenergy.math.directionality import DIRECTIONALITY_GAMMA
from qkenergy.math.statistics import STATISTICS

if TYPE_CHECKING:  # pragma: no cover
    from qkenergy.analysis.nullspec import NullSpec

__all__ = [
    "CACHE_FORMAT_VERSION",
    "NullCacheWarning",
    "cached_null_law",
    "layer_null_cache_path",
    "layer_null_law",
    "load_cached",
    "null_cache_path",
    "null_law",
    "save_cached",
    "store_null_law",
]

CACHE_FORMAT_VERSION = 2
"""Bumped whenever the cached arrays or the sampling scheme change meaning."""

_MEMBERS = ("values.npy", "names.npy", "version.npy")
# Room for the zip directory, three .npy headers and the names, beyond values' own bytes.
_OVERHEAD_BYTES = 1 << 16


class NullCacheWarning(UserWarning):
    """The null-law cache could not be written; the run goes on without it."""


def _key(*parts: object) -> str:
    """The file key: the first 16 hex digits of the SHA-256 of the parts' repr (as format 2 hashed them)."""
    return hashlib.sha256(repr(parts).encode()).hexdigest()[:16]


def null_cache_path(
    cache_dir: str | os.PathLike[str], spec: NullSpec, n: int, N: int, names: Sequence[str] | None = None
) -> Path:
    """Path of the cached Gaussian null law of shape (n, N) drawn as ``spec`` says (the file may not
    exist); ``names``: the statistics drawn, None = all.

    Parameters
    ----------
    cache_dir : str or path-like
        The cache directory.
    spec : NullSpec
        The draws: samples, seed.
    n : int
        Head dimension.
    N : int
        Residual width.
    names : sequence of str or None, optional
        The statistics; None for all.

    Returns
    -------
    Path
        The file (it may not exist).
    """
    # format 2 hashed the spec's Type II radius, which never changed a law (it only names head
    # types): its default 0.02 stands here, so the files of every earlier run stay valid
    names = tuple(STATISTICS) if names is None else tuple(names)
    key = _key(
        CACHE_FORMAT_VERSION, "gaussian", n, N, spec.samples, spec.seed, names, 0.02, montecarlo.BLOCK_SIZE
    )
    return Path(cache_dir) / (
        f"null-v{CACHE_FORMAT_VERSION}-gaussian-n{n}-N{N}-K{spec.samples}-seed{spec.seed}-{key}.npz"
    )


def _read_regular_file(path: Path, limit: int) -> bytes | None:
    """The bytes of ``path`` if it is a regular file of at most ``limit`` bytes, else None.

    Opened non-blocking (a FIFO would otherwise block the open until a writer
    comes) and checked with fstat on the open descriptor, so a FIFO, device or
    a symlink to one is never read, whatever the path turns into meanwhile.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError:
        return None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_size > limit:
            return None
        with os.fdopen(fd, "rb", closefd=False) as fh:
            data = fh.read(limit + 1)
        return data if len(data) <= limit else None
    except OSError:
        return None
    finally:
        os.close(fd)


def _read_member(archive: zipfile.ZipFile, name: str, dtype_kind: str, shape: tuple[int, ...]) -> np.ndarray:
    """One stored .npy member as an array, after checking its header against ``dtype_kind`` and ``shape``.

    Raises ValueError for anything else: compressed members, other shapes or
    dtypes, object arrays, Fortran order, or bytes that do not match the header.
    """
    info = archive.getinfo(name)
    if info.compress_type != zipfile.ZIP_STORED or info.file_size != info.compress_size:
        raise ValueError(f"{name} is compressed")
    raw = archive.read(info)  # bounded: the whole archive is in memory already
    stream = io.BytesIO(raw)
    version = np.lib.format.read_magic(stream)
    if version == (1, 0):
        header_shape, fortran, dtype = np.lib.format.read_array_header_1_0(stream)
    elif version == (2, 0):
        header_shape, fortran, dtype = np.lib.format.read_array_header_2_0(stream)
    else:
        raise ValueError(f"{name}: .npy version {version}")
    if fortran or dtype.hasobject or dtype.kind != dtype_kind or tuple(header_shape) != shape:
        raise ValueError(f"{name}: unexpected array header")
    count = int(np.prod(shape, dtype=np.int64))
    if len(raw) - stream.tell() != count * dtype.itemsize:
        raise ValueError(f"{name}: size does not match its header")
    return np.frombuffer(raw, dtype=dtype, count=count, offset=stream.tell()).reshape(shape)


def load_cached(path: str | os.PathLike[str], names: tuple[str, ...], samples: int) -> np.ndarray | None:
    """The cached ``values`` (samples, len(names)) at ``path``, or None for anything but our own file.

    Parameters
    ----------
    path : str or path-like
        The cache file.
    names : tuple of str
        The statistics the file must hold, in order.
    samples : int
        The samples it must hold.

    Returns
    -------
    ndarray, shape (samples, len(names)), or None
        The values, or None when the file is missing or not exactly ours.
    """
    limit = samples * len(names) * 8 + _OVERHEAD_BYTES
    data = _read_regular_file(Path(path), limit)
    if data is None:
        return None
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            if sorted(archive.namelist()) != sorted(_MEMBERS):
                return None
            version = _read_member(archive, "version.npy", "i", ())
            stored = _read_member(archive, "names.npy", "U", (len(names),))
            values = _read_member(archive, "values.npy", "f", (samples, len(names)))
    except (ValueError, KeyError, EOFError, OSError, zipfile.BadZipFile, zipfile.LargeZipFile):
        return None
    if int(version) != CACHE_FORMAT_VERSION or tuple(str(s) for s in stored) != names:
        return None
    if values.dtype != np.float64:
        return None
    return values.astype(np.float64, copy=True)  # owned and native-endian, not a view of the file bytes


def save_cached(path: str | os.PathLike[str], values: np.ndarray, names: tuple[str, ...]) -> bool:
    """Write the law atomically (temporary file + os.replace); False, with a warning, if it cannot be written.

    Parameters
    ----------
    path : str or path-like
        The cache file.
    values : ndarray, shape (samples, len(names))
        The law's samples.
    names : tuple of str
        The statistics, one per column of ``values``.

    Returns
    -------
    bool
        True when written.
    """
    path = Path(path)
    try:
        # the cache file's name is replaced whatever is there (a link, a FIFO): never written through
        with atomic_path(path, replace_any=True) as temporary, temporary.open("wb") as fh:
            np.savez(
                fh,
                values=np.ascontiguousarray(values, dtype="<f8"),
                names=np.array(names, dtype=np.str_),
                version=np.int64(CACHE_FORMAT_VERSION),
            )
        return True
    except (OSError, OutputError) as exc:
        why = exc.reason if isinstance(exc, OutputError) else exc.strerror or type(exc).__name__
        warnings.warn(
            f"null-law cache {str(path.parent)!r} is not writable ({why}); continuing without caching",
            NullCacheWarning,
            stacklevel=2,
        )
        return False


def cached_null_law(
    spec: NullSpec,
    n: int,
    N: int,
    *,
    cache_dir: str | os.PathLike[str],
    names: Sequence[str] | None = None,
) -> nulls.NullLaw | None:
    """The law :func:`null_law` would return from the cache under ``cache_dir``, or None on a miss.

    A law of some ``names`` is also read from the cached law of every
    statistic (same draws), when present.

    Parameters
    ----------
    spec : NullSpec
        The draws: samples, seed.
    n : int
        Head dimension.
    N : int
        Residual width.
    cache_dir : str or path-like
        The cache directory.
    names : sequence of str or None, optional
        The statistics; None for all.

    Returns
    -------
    NullLaw or None
        The cached law, or None on a miss.
    """
    n, N = check_integer(n, "n"), check_integer(N, "N")
    every = tuple(STATISTICS)
    names = every if names is None else tuple(names)
    values = load_cached(null_cache_path(cache_dir, spec, n, N, names), names, spec.samples)
    if values is None and names != every and set(names) <= set(every):
        whole = load_cached(null_cache_path(cache_dir, spec, n, N), every, spec.samples)
        if whole is not None:
            values = whole[:, [every.index(name) for name in names]]
    if values is None:
        return None
    values.flags.writeable = False
    return nulls.NullLaw(n=n, N=N, seed=spec.seed, names=names, values=values)


def store_null_law(law: nulls.NullLaw, spec: NullSpec, cache_dir: str | os.PathLike[str]) -> bool:
    """Keep ``law`` (drawn as ``spec`` says) where :func:`cached_null_law` finds it.

    Parameters
    ----------
    law : NullLaw
        The law drawn.
    spec : NullSpec
        How it was drawn.
    cache_dir : str or path-like
        The cache directory.

    Returns
    -------
    bool
        True when written (see :func:`save_cached`).
    """
    path = null_cache_path(cache_dir, spec, law.n, law.N, law.names)
    return save_cached(path, law.values, law.names)


def null_law(
    spec: NullSpec,
    n: int,
    N: int,
    *,
    cache_dir: str | os.PathLike[str] | None = None,
    progress: bool = False,
    chunk_size: int | None = None,
    names: Sequence[str] | None = None,
    threads: int | None = 1,
) -> nulls.NullLaw:
    """:func:`qkenergy.math.nulls.null_law` with ``spec``'s samples and seed, kept on disk
    under ``cache_dir`` (None: no cache).

    A cached file that is not exactly what this module writes is a miss: the
    law is drawn again and the file replaced. A law of some ``names`` is also
    read from the cached law of every statistic (same draws), when present.

    Parameters
    ----------
    spec : NullSpec
        The draws: samples, seed.
    n : int
        Head dimension.
    N : int
        Residual width.
    cache_dir : str or path-like or None, optional
        The cache directory; None for no cache.
    progress : bool, optional
        Show a progress bar while drawing.
    chunk_size : int or None, optional
        Samples drawn per chunk (None: chosen by size).
    names : sequence of str or None, optional
        The statistics; None for all.
    threads : int or None, optional
        Threads that draw (None: all cores).

    Returns
    -------
    NullLaw
        The Gaussian null law of shape (n, N).
    """
    draw = functools.partial(
        nulls.null_law, n, N, samples=spec.samples, seed=spec.seed, progress=progress, chunk_size=chunk_size
    )
    if cache_dir is None:
        return draw(names=names, threads=threads)
    names = tuple(STATISTICS) if names is None else tuple(names)
    law = cached_null_law(spec, n, N, cache_dir=cache_dir, names=names)
    if law is not None:
        return law
    law = draw(names=names, threads=threads)
    store_null_law(law, spec, cache_dir)
    return law


def layer_null_cache_path(
    cache_dir: str | os.PathLike[str], spec: NullSpec, group_sizes: tuple[int, ...], head_dim: int, N: int
) -> Path:
    """Path of the cached per-layer null law (:mod:`qkenergy.math.layer_null`) of this layer shape,
    drawn with ``spec``'s samples and seed.

    Parameters
    ----------
    cache_dir : str or path-like
        The cache directory.
    spec : NullSpec
        The draws: samples and seed.
    group_sizes : tuple of int
        Query heads per key head of the layer (GQA groups).
    head_dim : int
        Head dimension.
    N : int
        Residual width.

    Returns
    -------
    Path
        The file (it may not exist).
    """
    samples, seed = spec.samples, spec.seed
    n = sum(1 for m in group_sizes if m > 0) * head_dim
    route = layer_null.layer_null_route(n, N)
    key = _key(
        CACHE_FORMAT_VERSION,
        "gaussian-layer",
        tuple(group_sizes),
        head_dim,
        N,
        samples,
        seed,
        layer_null.LAYER_NULL_STATISTICS,
        route,
        DIRECTIONALITY_GAMMA,
        montecarlo.BLOCK_SIZE,
    )
    return Path(cache_dir) / f"null-v{CACHE_FORMAT_VERSION}-layer-n{n}-N{N}-K{samples}-seed{seed}-{key}.npz"


def layer_null_law(
    spec: NullSpec,
    group_sizes: tuple[int, ...],
    head_dim: int,
    N: int,
    *,
    cache_dir: str | os.PathLike[str] | None = None,
    progress: bool = False,
) -> nulls.NullLaw:
    """:func:`qkenergy.math.layer_null.layer_null_law` with ``spec``'s samples and seed, kept on disk
    under ``cache_dir`` (None: no cache).

    Parameters
    ----------
    spec : NullSpec
        The draws: samples and seed.
    group_sizes : tuple of int
        Query heads per key head of the layer (GQA groups).
    head_dim : int
        Head dimension.
    N : int
        Residual width.
    cache_dir : str or path-like or None, optional
        The cache directory; None for no cache.
    progress : bool, optional
        Show a progress bar while drawing.

    Returns
    -------
    NullLaw
        The per-layer null law (kind "layer").
    """
    group_sizes = tuple(int(m) for m in group_sizes)
    draw = functools.partial(
        layer_null.layer_null_law,
        group_sizes,
        head_dim,
        N,
        samples=spec.samples,
        seed=spec.seed,
        progress=progress,
    )
    if cache_dir is None:
        return draw()
    names = layer_null.LAYER_NULL_STATISTICS
    path = layer_null_cache_path(cache_dir, spec, group_sizes, head_dim, N)
    values = load_cached(path, names, spec.samples)
    if values is not None:
        values.flags.writeable = False
        n = sum(1 for m in group_sizes if m > 0) * head_dim
        return nulls.NullLaw(n=n, N=N, seed=spec.seed, names=names, values=values, kind="layer")
    law = draw()
    save_cached(path, law.values, law.names)
    return law

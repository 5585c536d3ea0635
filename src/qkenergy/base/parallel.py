"""Using the machine's cores in-process: threads over independent work, BLAS on one thread each.

numpy's products and LAPACK calls release the GIL, so a standard-library
thread pool runs one head group (or one null block) per core. Each of those
calls is small (2n x 2n eigenproblems, n x N products), where a multi-threaded
BLAS only adds synchronisation: with a busy neighbour on a 2-core machine it
made runs several times slower. So while work is spread over threads, BLAS
is held at one thread (threadpoolctl), and the thread count never exceeds the
cores this process may run on. Process-level parallelism (a cluster, many
models) belongs to Dask; callers there pass ``threads=1``.
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import TypeVar

from threadpoolctl import ThreadpoolController

from qkenergy.base.errors import check_integer

__all__ = ["available_cores", "blas_libraries", "resolve_threads", "single_threaded_blas", "thread_map"]

T = TypeVar("T")
R = TypeVar("R")

_lock = threading.Lock()
_depth = 0
_limiters: list[object] = []  # limits set since depth 0, outermost first
_limited_at = 0  # len(sys.modules) when the last limit was set


def available_cores() -> int:
    """Cores this process may run on (its CPU affinity), at least 1.

    Returns
    -------
    int
        The number of cores in the affinity mask (``os.cpu_count()`` where there is none), at least 1.
    """
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # pragma: no cover - platforms without affinity
        return max(1, os.cpu_count() or 1)


def resolve_threads(threads: int | None, name: str = "threads") -> int:
    """``threads`` checked (an integer >= 1), or every available core when None.

    Parameters
    ----------
    threads : int or None
        The number of threads asked for; None for every available core.
    name : str
        The argument's name in the error message.

    Returns
    -------
    int
        The number of threads, >= 1.

    Raises
    ------
    QKEnergyError
        ``threads`` is not an integer >= 1.
    """
    return available_cores() if threads is None else check_integer(threads, name)


_controller_cache: tuple[int, ThreadpoolController] | None = None


def _controller() -> ThreadpoolController:
    """The BLAS libraries loaded so far; call with ``_lock`` held.

    Inspecting them costs ~0.5 ms, so the controller is kept until modules
    are imported: a new extension may bring its own BLAS (scipy.linalg loads
    a second OpenBLAS, which a stale controller would leave on all cores).
    """
    global _controller_cache
    if _controller_cache is None or _controller_cache[0] != len(sys.modules):
        _controller_cache = (len(sys.modules), ThreadpoolController())
    return _controller_cache[1]


def blas_libraries() -> list[str]:
    """The BLAS libraries loaded in this process, as "openblas 0.3.31.188.0 (Haswell kernels)".

    What a table's products were computed with (the settings' ``blas``): the
    library, its version and, for OpenBLAS, the kernels it chose or was given
    (:mod:`qkenergy.base.blas_kernels`). The products' rounding depends on them.

    Returns
    -------
    list of str
        One description per distinct BLAS library loaded, in the order threadpoolctl finds them.
    """
    with _lock:
        found = _controller().info()
    described = (
        f"{lib['internal_api']} {lib['version']}"
        + (f" ({lib['architecture']} kernels)" if lib.get("architecture") else "")
        for lib in found
        if lib.get("user_api") == "blas"
    )
    return list(dict.fromkeys(described))  # numpy's and scipy's OpenBLAS are often the same build


@contextmanager
def single_threaded_blas() -> Iterator[None]:
    """Hold BLAS at one thread inside this block; nestable and safe to enter from several threads.

    threadpoolctl limits are process-wide, so the first thread to enter sets
    the limit and the last to leave restores the previous settings. A limit
    covers the BLAS libraries loaded when it is set, so an entry that finds
    modules imported since the last limit (scipy.linalg brings a second
    OpenBLAS) limits again: import such a module before entering.
    """
    global _depth, _limited_at
    with _lock:
        if _depth == 0 or _limited_at != len(sys.modules):
            _limiters.append(_controller().limit(limits=1, user_api="blas"))
            _limited_at = len(sys.modules)
        _depth += 1
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0:
                for limiter in reversed(_limiters):  # the innermost first: the outermost saw the originals
                    limiter.restore_original_limits()  # type: ignore[attr-defined]
                _limiters.clear()


def thread_map(func: Callable[[T], R], items: Iterable[T], threads: int) -> list[R]:
    """``[func(x) for x in items]`` over ``threads`` threads, BLAS on one thread, results in order.

    Items are handed out one at a time, so a core slowed by a busy neighbour
    simply takes fewer of them. With one thread (or one item) it runs inline.

    Parameters
    ----------
    func : callable
        Called once per item; it should release the GIL for the threads to help (numpy, BLAS).
    items : iterable
        The items (consumed into a list first).
    threads : int
        The most threads to use; <= 1 runs inline.

    Returns
    -------
    list
        ``func(item)`` for each item, in the items' order.
    """
    work = list(items)
    with single_threaded_blas():
        if threads <= 1 or len(work) <= 1:
            return [func(item) for item in work]
        with ThreadPoolExecutor(max_workers=min(threads, len(work))) as pool:
            return list(pool.map(func, work))

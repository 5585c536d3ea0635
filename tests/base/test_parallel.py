"""parallel: threads over independent work with BLAS held at one thread, restored afterwards."""

from __future__ import annotations

import os

import pytest
from threadpoolctl import threadpool_info

from qkenergy.base.errors import QKEnergyError
from qkenergy.base.parallel import available_cores, resolve_threads, single_threaded_blas, thread_map


def _blas_threads() -> list[int]:
    return [lib["num_threads"] for lib in threadpool_info() if lib["user_api"] == "blas"]


def test_thread_map_keeps_order_and_limits_blas() -> None:
    before = _blas_threads()
    seen = thread_map(lambda x: (x * x, _blas_threads()), range(7), threads=2)
    assert [value for value, _ in seen] == [x * x for x in range(7)]
    assert all(threads == [1] * len(before) for _, threads in seen)
    assert _blas_threads() == before  # restored once the last user leaves
    with single_threaded_blas(), single_threaded_blas():  # nestable
        assert _blas_threads() == [1] * len(before)
    assert _blas_threads() == before


def test_thread_counts() -> None:
    assert available_cores() == len(os.sched_getaffinity(0))
    assert resolve_threads(None) == available_cores()
    assert resolve_threads(3) == 3
    with pytest.raises(QKEnergyError, match="--threads"):
        resolve_threads(0, "--threads")

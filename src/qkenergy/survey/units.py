"""What a Dask worker runs: one (model, layer) unit, one shared null law, the tensor fingerprint.

These functions are shipped to workers by reference (module and name), so a
worker needs qkenergy importable and the checkpoint files at the same paths
as the client (a shared filesystem). Each runs with one BLAS thread: the
parallelism of a survey is one process per core.
"""

from __future__ import annotations

import hashlib
import os
import time
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = ["UnitResult", "UnitSpec", "layer_fingerprint", "run_null_law", "run_unit"]

_CHUNK = 1 << 24  # bytes hashed per read: bounded memory whatever the tensor size


@dataclass(frozen=True)
class UnitSpec:
    """Everything a worker needs to analyse one layer of one model."""

    model: str  # the survey's model name
    layer: int
    path: str  # the resolved checkpoint (directory or file), opened by the worker
    fold_norm: bool
    per_layer: bool
    null: bool
    samples: int
    seed: int
    radius: float
    null_kind: str
    rotation_samples: int
    # When set: first compare the tensors' fingerprint with it and analyse only if they changed.
    expected_fingerprint: str | None = None


@dataclass(frozen=True)
class UnitResult:
    """A unit's tables (None when ``unchanged``), the fingerprint of the tensors read, and who ran it."""

    spec: UnitSpec
    fingerprint: str
    heads: Any  # pandas.DataFrame | None
    layers: Any  # pandas.DataFrame | None
    worker: str
    started: float  # unix seconds, measured on the worker
    finished: float
    unchanged: bool = False


class _Recorder:
    """A TensorReader that records which tensors are read and hands back zero-stride stand-ins.

    ``layouts.read_layer`` run on it names exactly the tensors a unit reads,
    without reading a byte of them.
    """

    def __init__(self, tensors: Any) -> None:
        self._tensors = tensors
        self.read: set[str] = set()
        self.location = tensors.location

    @property
    def names(self) -> Collection[str]:
        return self._tensors.names

    def shape(self, name: str) -> tuple[int, ...]:
        return self._tensors.shape(name)

    def tensor(self, name: str) -> np.ndarray:
        self.read.add(name)
        return np.broadcast_to(np.zeros((), self._tensors.dtype(name)), self._tensors.shape(name))


def _hash_range(digest: Any, path: os.PathLike | str, begin: int, end: int) -> None:
    with open(path, "rb", buffering=0) as fh:
        position = begin
        while position < end:
            block = os.pread(fh.fileno(), min(_CHUNK, end - position), position)
            if not block:
                raise OSError(f"{path}: file ends before byte {end}")
            digest.update(block)
            position += len(block)


def layer_fingerprint(path: str, layer: int, *, fold_norm: bool) -> str:
    """sha256 over the name, dtype, shape and bytes of every tensor that analysing ``layer`` reads."""
    from qkenergy.weights.checkpoint import open_model
    from qkenergy.weights.layouts import architecture, find_prefix, read_layer
    from qkenergy.weights.safetensors_io import show_path

    with open_model(path) as source:
        arch = architecture(source.config, show_path(source.config_path))
        recorder = _Recorder(source.tensors)
        read_layer(recorder, arch, layer, fold_norm=fold_norm, prefix=find_prefix(source.tensors, arch))
        digest = hashlib.sha256()
        for name in sorted(recorder.read):
            info = source.tensors.info(name)
            digest.update(repr((name, info.dtype, info.shape)).encode())
            _hash_range(digest, source.tensors.file_of(name).path, info.begin, info.end)
    return digest.hexdigest()


def _worker_name() -> str:
    try:
        from distributed import get_worker

        return f"{get_worker().address} pid {os.getpid()}"
    except ValueError:  # not inside a Dask worker (a direct call)
        return f"local pid {os.getpid()}"


def run_null_law(n: int, N: int, *, samples: int, seed: int, radius: float, cache_dir: str | None) -> Any:
    """The NullLaw of shape (n, N), drawn once per survey (or read from the null cache)."""
    from threadpoolctl import threadpool_limits

    from qkenergy.analysis.null_cache import null_law

    with threadpool_limits(limits=1):
        return null_law(n, N, samples=samples, seed=seed, radius=radius, cache_dir=cache_dir)


def run_unit(spec: UnitSpec, laws: Mapping[tuple[int, int], Any] | None = None) -> UnitResult:
    """Analyse one layer of one model (analyze_model on that layer, one BLAS thread).

    ``laws``: the survey's shared null laws by (n, N). With
    ``spec.expected_fingerprint`` equal to the tensors' fingerprint the layer
    is not analysed (``unchanged``).
    """
    from threadpoolctl import threadpool_limits

    from qkenergy.analysis.analyze import analyze_model

    started = time.time()
    with threadpool_limits(limits=1):
        fingerprint = layer_fingerprint(spec.path, spec.layer, fold_norm=spec.fold_norm)
        if fingerprint == spec.expected_fingerprint:
            return UnitResult(spec, fingerprint, None, None, _worker_name(), started, time.time(), True)
        analysis = analyze_model(
            spec.path,
            layers=[spec.layer],
            per_layer=spec.per_layer,
            fold_norm=spec.fold_norm,
            samples=spec.samples,
            seed=spec.seed,
            radius=spec.radius,
            null=spec.null,
            null_kind=spec.null_kind,
            rotation_samples=spec.rotation_samples,
            null_laws=laws,
            threads=1,  # one core per Dask worker thread: no nested thread pools
        )
    return UnitResult(
        spec, fingerprint, analysis.heads, analysis.layers, _worker_name(), started, time.time()
    )

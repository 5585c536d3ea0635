"""What a Dask worker runs: one (model, layer) unit, one shared null law, the tensor fingerprint.

These functions are shipped to workers by reference (module and name), so a
worker needs qkenergy importable and the checkpoint files at the same paths
as the client (a shared filesystem). Each runs with one BLAS thread: the
parallelism of a survey is one process per core.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

import numpy as np

if TYPE_CHECKING:  # pragma: no cover
    from qkenergy.analysis.nullspec import NullSpec
    from qkenergy.analysis.type_rule import TypeRule

__all__ = ["UnitResult", "UnitSpec", "files_fingerprint", "layer_fingerprint", "run_null_blocks", "run_unit"]


@dataclass(frozen=True)
class UnitSpec:
    """Everything a worker needs to analyse one layer of one model.

    Parameters
    ----------
    model : str
        The survey's model name.
    layer : int
        The layer.
    path : str
        The resolved checkpoint.
    fold_norm : bool
        Fold the query/key norms into the weights.
    per_layer : bool
        Also the layer form.
    null : bool
        Draw null laws.
    null_spec : NullSpec
        Their samples, seed, kind and rotation samples.
    types : TypeRule
        The head-type rule and its radius.
    expected_fingerprint : str or None, optional
        Analyse only when the tensors' fingerprint differs from it.
    cache_dir : str or None, optional
        The null-law cache shared with the client.
    """

    model: str  # the survey's model name
    layer: int
    path: str  # the resolved checkpoint (directory or file), opened by the worker
    fold_norm: bool
    per_layer: bool
    null: bool  # whether null laws are drawn, as ``null_spec`` says
    null_spec: NullSpec
    types: TypeRule
    expected_fingerprint: str | None = None
    # The null-law cache shared with the client: with per_layer, a layer's null law (a dense N x N
    # problem per draw, about a minute at N = 384) is drawn by the first unit of its shape, not by every one.
    cache_dir: str | None = None


@dataclass(frozen=True)
class UnitResult:
    """A unit's tables and settings (None when ``unchanged``), the fingerprint of the tensors read,
    and who ran it.

    Parameters
    ----------
    spec : UnitSpec
        The unit.
    fingerprint : str
        The fingerprint of the tensors read.
    heads : DataFrame or None
        The head table.
    layers : DataFrame or None
        The layer table.
    settings : dict or None
        The analysis settings of the layer.
    worker : str
        The worker that ran it.
    started : float
        Unix seconds, on the worker.
    finished : float
        Unix seconds, on the worker.
    unchanged : bool, optional
        The tensors matched the expected fingerprint; nothing was analysed.
    """

    spec: UnitSpec
    fingerprint: str
    heads: Any  # pandas.DataFrame | None
    layers: Any  # pandas.DataFrame | None
    settings: dict[str, Any] | None  # analyze_model's settings (provenance) of this layer
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
        return cast(Collection[str], self._tensors.names)

    def shape(self, name: str) -> tuple[int, ...]:
        return cast(tuple[int, ...], self._tensors.shape(name))

    def tensor(self, name: str) -> np.ndarray:
        self.read.add(name)
        return np.broadcast_to(np.zeros((), self._tensors.dtype(name)), self._tensors.shape(name))


def files_fingerprint(files: list[dict[str, Any]]) -> str:
    """The unit's fingerprint from provenance.fingerprint_files entries: sha256 over each file's digest
    (its header and the tensors read) and the names of those tensors.

    Parameters
    ----------
    files : list of dict
        The entries of the files read.

    Returns
    -------
    str
        The hex digest.
    """
    text = json.dumps([(f["sha256"], f["tensors"]) for f in files])
    return hashlib.sha256(text.encode()).hexdigest()


def layer_fingerprint(path: str, layer: int, *, fold_norm: bool, cache_dir: str | None = None) -> str:
    """The fingerprint of the tensors that analysing ``layer`` reads (as run_unit records it).

    Parameters
    ----------
    path : str
        The checkpoint.
    layer : int
        The layer.
    fold_norm : bool
        Whether the norms are folded (more tensors are read).
    cache_dir : str or None, optional
        The survey's cache (a hub model's byte ranges are kept in its ``hub/``).

    Returns
    -------
    str
        The fingerprint.
    """
    from qkenergy.formats.provenance import fingerprint_files
    from qkenergy.weights.architecture import architectures
    from qkenergy.weights.checkpoint import open_model
    from qkenergy.weights.reading import present_stacks, read_layer

    with open_model(path, hub_cache=None if cache_dir is None else os.path.join(cache_dir, "hub")) as source:
        found = architectures(source.config, source.config_where, layout=source.layout)
        recorder = _Recorder(source.tensors)
        for arch, prefix in present_stacks(source.tensors, found):  # every stack, as analyze reads them
            if arch.has_layer(layer):
                read_layer(recorder, arch, layer, fold_norm=fold_norm, prefix=prefix)
        return files_fingerprint(fingerprint_files(source.tensors, sorted(recorder.read)))


def _worker_name() -> str:
    try:
        from distributed import get_worker

        return f"{get_worker().address} pid {os.getpid()}"
    except ValueError:  # not inside a Dask worker (a direct call)
        return f"local pid {os.getpid()}"


def run_null_blocks(n: int, N: int, first: int, last: int, spec: NullSpec) -> Any:
    """Seeded blocks ``first`` to ``last - 1`` of the null law of shape (n, N), one BLAS thread.

    Only the statistics analyze judges against the law (``NULL_STATISTICS``):
    the blocks joined in order are bitwise the law analyze draws (and caches).

    Parameters
    ----------
    n : int
        Head dimension.
    N : int
        Residual width.
    first : int
        The first block.
    last : int
        One past the last block.
    spec : NullSpec
        Samples and seed of the law.

    Returns
    -------
    ndarray
        The rows of these blocks, one column per statistic of ``NULL_STATISTICS``.
    """
    from qkenergy.base.parallel import single_threaded_blas
    from qkenergy.math.nulls import NULL_STATISTICS, null_law_blocks

    with single_threaded_blas():
        return null_law_blocks(n, N, first, last, samples=spec.samples, seed=spec.seed, names=NULL_STATISTICS)


def run_unit(spec: UnitSpec, laws: Mapping[tuple[int, int], Any] | None = None) -> UnitResult:
    """Analyse one layer of one model (analyze_run on that layer, one BLAS thread).

    ``laws``: the survey's shared null laws by (n, N). With
    ``spec.expected_fingerprint`` equal to the tensors' fingerprint the layer
    is not analysed (``unchanged``).

    Parameters
    ----------
    spec : UnitSpec
        The unit.
    laws : mapping or None, optional
        (n, N) -> the survey's null law.

    Returns
    -------
    UnitResult
        The unit's tables, or ``unchanged``.
    """
    from threadpoolctl import threadpool_limits

    from qkenergy.analysis.analyze import analyze_run
    from qkenergy.analysis.run_config import Reading, RunConfig, Selection

    started = time.time()
    with threadpool_limits(limits=1):
        if spec.expected_fingerprint is not None:
            fingerprint = layer_fingerprint(
                spec.path, spec.layer, fold_norm=spec.fold_norm, cache_dir=spec.cache_dir
            )
            if fingerprint == spec.expected_fingerprint:
                return UnitResult(
                    spec, fingerprint, None, None, None, _worker_name(), started, time.time(), True
                )
        config = RunConfig(
            selection=Selection(layers=[spec.layer]),
            reading=Reading(fold_norm=spec.fold_norm),
            null=spec.null,
            spec=spec.null_spec,
            types=spec.types,
            per_layer=spec.per_layer,
            cache_dir=spec.cache_dir,
            threads=1,  # one core per Dask worker thread: no nested thread pools
        )
        analysis = analyze_run(spec.path, config, null_laws=laws)
    # analyze fingerprints the weight files it read (provenance): the same digest, no second pass.
    fingerprint = files_fingerprint(analysis.settings["model_source"]["files"])
    return UnitResult(
        spec,
        fingerprint,
        analysis.heads,
        analysis.layers,
        analysis.settings,
        _worker_name(),
        started,
        time.time(),
    )

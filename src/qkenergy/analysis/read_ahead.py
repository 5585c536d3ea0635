"""Reading ahead: the layers of a run, each read by a helper thread while the one before is analysed.

One layer of read-ahead (and of fingerprint hashing, :mod:`qkenergy.formats.provenance`): at
most two layers' Q/K weights are in memory. With ``progress``, a bar of the layers and, for a
hub model, one of the bytes fetched.
"""

from __future__ import annotations

import contextlib
from collections.abc import Generator, Iterator
from concurrent import futures
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from qkenergy.base.parallel import available_cores
from qkenergy.weights.reading import LayerWeights, layer_tensors, read_layer

if TYPE_CHECKING:  # pragma: no cover
    from qkenergy.weights.architecture import Architecture
    from qkenergy.weights.source import ModelSource

__all__ = ["LayerItem", "RunPlan", "read_ahead"]

LayerItem = tuple["Architecture", str, int, list[int]]
"""One layer to analyse: its stack, the stack's tensor prefix, the layer, the query heads asked for."""


@dataclass(frozen=True)
class RunPlan:
    """What a run reads, known from the config and headers before any weight.

    Parameters
    ----------
    label : str
        The model's name in every output.
    stacks : list of (Architecture, str)
        The attention stacks present, with their tensor prefixes.
    rope_plans : dict
        id(stack) -> (layer -> Rope, offsets) or None, as :func:`~qkenergy.analysis.rope_offsets.plan_stacks`.
    rope_info : object
        The RoPE description the settings record.
    layer_ids, head_ids : list of int
        The layers and query heads asked for.
    todo : list of LayerItem
        The layers to read, in order.
    """

    label: str
    stacks: list[tuple[Architecture, str]]
    rope_plans: dict[int, Any]
    rope_info: Any
    layer_ids: list[int]
    head_ids: list[int]
    todo: list[LayerItem]

    @property
    def offsets(self) -> list[int] | None:
        """The RoPE offsets read (None: offset 0 only)."""
        return next((plan[1] for plan in self.rope_plans.values() if plan is not None), None)


def read_ahead(
    source: ModelSource, tensors: Any, todo: list[LayerItem], *, fold_norm: bool, progress: bool
) -> Generator[tuple[LayerItem, LayerWeights], None, None]:
    """Each layer of ``todo`` with its weights, the next one read by a helper thread meanwhile.

    The caller drops its reference to a layer's weights before asking for the next (``del``):
    the layer after next is read only then. Close the iterator (``contextlib.closing``) to stop early.

    Parameters
    ----------
    source : ModelSource
        The opened model (its tensors are released after each layer).
    tensors : TensorReader
        What the layers are read from (the fingerprinting recorder over ``source.tensors``).
    todo : list of LayerItem
        The layers, in order.
    fold_norm : bool
        Fold the norm gains into W_Q, W_K.
    progress : bool
        Show progress bars on stderr.

    Yields
    ------
    (LayerItem, LayerWeights)
    """

    def read(item: LayerItem) -> LayerWeights:
        return read_layer(tensors, item[0], item[2], fold_norm=fold_norm, prefix=item[1])

    fetching = fetch_plan(source, tensors, todo)
    with layer_progress(progress, len(todo), fetching) as advance, ThreadPoolExecutor(1) as reader:
        with split_reads(source.tensors):  # nothing to overlap the first layer's read with
            ahead = reader.submit(read, todo[0])
            futures.wait([ahead])
        for i, item in enumerate(todo):
            weights = ahead.result()  # read by the helper thread (or failed to read: raise now)
            if i + 1 < len(todo):
                # One layer of read-ahead: the next layer is read (and hashed for the
                # fingerprints) while this layer's statistics run; at most two layers in memory.
                ahead = reader.submit(read, todo[i + 1])
            yield item, weights
            del weights  # release this layer before the one after next is read
            source.tensors.release()
            advance()
        ahead.result()


def split_reads(tensors: Any) -> contextlib.AbstractContextManager[None]:
    """Large reads split over the available cores inside the block (safetensors files; in memory: nothing)."""
    split = getattr(tensors, "split_reads", None)
    return contextlib.nullcontext() if split is None else split(available_cores())


@contextlib.contextmanager
def layer_progress(enabled: bool, total: int, fetching: tuple[Any, int] | None = None) -> Iterator[Any]:
    """A rich progress bar over layers (on stderr), or a no-op; for a hub model a second bar,
    of the bytes fetched against the bytes the layers need (``fetching``: the repository and that total)."""
    if not enabled:
        yield lambda: None
        return
    from qkenergy.base.formatting import progress_bar

    with progress_bar("{task.description}", stderr=True) as bar:
        task = bar.add_task("analysing layers", total=total)
        if fetching is not None:
            repo, needed = fetching
            # counted in MB: the bar's count column shows whole numbers
            fetched = bar.add_task("fetching from the Hub (MB)", total=needed / 1e6)
            done = [0]

            def advanced(n: int) -> None:
                done[0] += n
                if done[0] > needed:  # a tensor the plan did not foresee (a norm gain): the total grows
                    bar.update(fetched, total=done[0] / 1e6)
                bar.advance(fetched, n / 1e6)

            repo.on_bytes = advanced
        try:
            yield lambda: bar.advance(task)
        finally:
            if fetching is not None:
                fetching[0].on_bytes = None


def fetch_plan(source: ModelSource, tensors: Any, todo: list[LayerItem]) -> Any:
    """For a hub model: (its repository, the bytes of the query and key tensors of ``todo`` not fetched yet)."""
    repo = source.remote
    if repo is None:
        return None
    stored = getattr(source.tensors, "stored_names", lambda name: [name])
    ranges = []
    for arch, prefix, layer, _ in todo:
        for name in layer_tensors(tensors, arch, layer, prefix=prefix):
            for part in stored(name):
                sf = source.tensors.file_of(part)
                info = sf.info(part)
                ranges.append((sf.path, info.begin, info.end))
    return repo, repo.missing_bytes(ranges)

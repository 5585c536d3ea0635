"""Head statistics: the rows of one layer's selected heads (per RoPE offset), and their nulls per head.

The statistics of all the layer's heads come from one batched Gram-route call
(docs/mathematics.md §4); GQA keys are never copied per query head.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from qkenergy.analysis.judgement import head_null_rows
from qkenergy.formats.columns import Columns, broadcast, concat, list_column
from qkenergy.math.gram import head_gram
from qkenergy.math.rope import rotated_gram
from qkenergy.math.statistics import HeadStatistics, gram_statistics, head_statistics

if TYPE_CHECKING:  # pragma: no cover
    from qkenergy.analysis.run_config import RunConfig
    from qkenergy.math.rope import Rope
    from qkenergy.weights.architecture import Architecture
    from qkenergy.weights.reading import LayerWeights

__all__ = ["head_rows", "with_quantization"]


def _trimmed(lobes: np.ndarray) -> list[list[float]]:
    """Each row's positive entries (the lobe without its zero padding; NaN rows give [])."""
    return [row[row > 0].tolist() for row in np.asarray(lobes, dtype=np.float64)]


def head_rows(
    run: RunConfig,
    model: str,
    arch: Architecture,
    weights: LayerWeights,
    head_ids: list[int],
    *,
    rope: Rope | None = None,
    offsets: Sequence[int] | None = None,
) -> Columns:
    """The selected heads of one layer (and their nulls per head), per RoPE offset if any;
    GQA keys are never copied per query head.

    Parameters
    ----------
    run : RunConfig
        The type rule, the nulls per head (drawn or not, their draws and seed), the threads.
    model : str
        The model's name (the ``model`` column).
    arch : Architecture
        The layer's stack.
    weights : LayerWeights
        The layer's W_Q, W_K.
    head_ids : list of int
        The query heads asked for.
    rope : Rope, optional
        The layer's rotary embedding (None: no rotation at any offset).
    offsets : sequence of int, optional
        The RoPE offsets d (None: one row per head, no ``offset`` column).

    Returns
    -------
    Columns
        One row per head (and offset).
    """
    types, threads = run.types.keywords(), int(run.threads or 1)
    sel = np.asarray(head_ids)
    N = weights.w_query.shape[-1]
    if offsets is not None:
        # each offset's G_d is a rotation of G (G itself in a NoPE layer): the heads' Gram matrices are formed once
        G = head_gram(weights.w_query, weights.w_key, weights.kv_head)[sel]
        at = ((d, G if rope is None else rotated_gram(G, rope, d)) for d in offsets)  # one G_d at a time
        return concat([_head_columns(run, model, arch, weights, sel, d, G_d) for d, G_d in at])
    if run.null and any(k.sampler for k in run.spec.kinds):
        # a null per head (the rotation null) starts from each head's G
        grams = head_gram(weights.w_query, weights.w_key, weights.kv_head)[sel]
        stats = gram_statistics(grams, int(N), **types)
    else:
        grams = np.empty((len(sel), 0, 0))
        stats = head_statistics(
            weights.w_query, weights.w_key, kv_head=weights.kv_head, heads=sel, threads=threads, **types
        )
    return _head_columns(run, model, arch, weights, sel, None, grams, stats)


def with_quantization(table: Columns, label: str) -> Columns:
    """The head table with its ``quantization`` column (after ``qk_norm``): "" for plain weights.

    Parameters
    ----------
    table : Columns
        One layer's head rows.
    label : str
        How the layer's Q/K weights are stored ("" for plain weights).

    Returns
    -------
    Columns
    """
    out: Columns = {}
    for name, column in table.items():
        out[name] = column
        if name == "qk_norm":
            out["quantization"] = np.full(len(column), label, dtype=object)
    return out


def _head_columns(
    run: RunConfig,
    model: str,
    arch: Architecture,
    weights: LayerWeights,
    sel: np.ndarray,
    offset: int | None,
    grams: np.ndarray,
    stats: HeadStatistics | None = None,
) -> Columns:
    """The rows of one layer's selected heads (at one RoPE offset); ``stats`` default: from ``grams``."""
    n, N = weights.w_query.shape[-2:]
    if stats is None:
        stats = gram_statistics(grams, int(N), **run.types.keywords())
    values: dict[str, Any] = {
        "model": model,
        "stack": arch.stack,
        "layer": weights.layer,
        "head": sel,
        "kv_head": np.asarray(weights.kv_head)[sel],
        **({} if offset is None else {"offset": offset}),
        "n": int(n),
        "N": int(N),
        "positional": arch.layer_positional(weights.layer),
        "qk_norm": arch.qk_norm,
        **stats.columns(),  # STATISTICS (float64), head_type, reason
    }
    table = broadcast(values, len(sel))
    drawn = run.spec if run.null else None  # its laws per head are drawn from the heads' G
    table.update(head_null_rows(grams, int(N), table, weights.layer, drawn, int(run.threads or 1)))
    table["alpha"] = list_column(_trimmed(stats.alpha.reshape(len(sel), -1)))
    table["beta"] = list_column(_trimmed(stats.beta.reshape(len(sel), -1)))
    return table

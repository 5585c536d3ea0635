"""Layer forms: each layer's whole form sum_h W_K^h^T W_Q^h, its statistics and its Gaussian layer null.

Saponati et al. 2025's symmetry score 2s - 1 and directionality beside the head statistics,
judged against the law of a Gaussian layer of the same shape (:mod:`qkenergy.math.layer_null`).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from qkenergy.analysis.significance import judge
from qkenergy.base.extras import require
from qkenergy.formats.columns import with_integer_counts
from qkenergy.math.baselines import symmetric_ratio
from qkenergy.math.directionality import DIRECTIONALITY_GAMMA, directionality_raw
from qkenergy.math.energies import rescale_by_power_of_two
from qkenergy.math.head_types import EDGE_CUT, IMBALANCE_CUT, RADIUS
from qkenergy.math.nulls import NullLaw
from qkenergy.math.rope import Rope, rotate
from qkenergy.math.statistics import STATISTICS, dense_statistics, head_statistics

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd

    from qkenergy.analysis.run_config import RunConfig
    from qkenergy.weights.architecture import Architecture
    from qkenergy.weights.reading import LayerWeights

__all__ = ["LAYER_NULL_MAX_FLOPS", "finite_heads", "layer_form_statistics", "layer_rows", "with_layer_null"]

LAYER_NULL_MAX_FLOPS = 1e12
"""Largest arithmetic (flops) spent on one per-layer null law: about a minute on a 2-core machine."""


def finite_heads(weights: LayerWeights, kept: np.ndarray) -> LayerWeights:
    """The layer with only the query heads ``kept`` (its layer form then sums those alone).

    Parameters
    ----------
    weights : LayerWeights
        The layer.
    kept : ndarray of bool
        One flag per query head.

    Returns
    -------
    LayerWeights
    """
    return dataclasses.replace(
        weights, w_query=weights.w_query[kept], kv_head=np.asarray(weights.kv_head)[kept]
    )


def layer_form_statistics(
    w_query: np.ndarray,
    w_key: np.ndarray,
    *,
    radius: float = RADIUS,
    type_rule: str = "imbalance",
    imbalance_cut: float = IMBALANCE_CUT,
    edge_cut: float = EDGE_CUT,
    gamma: float = DIRECTIONALITY_GAMMA,
    route: str | None = None,
) -> tuple[dict[str, Any], str]:
    """Statistics of a layer's whole form L = sum_h W_K^h^T W_Q^h = W_K^T W_Q.

    Route: the Gram route on the stacked factors when 2Hn <= N (the form is a 'head' with
    n = H*head_dim), else the dense N x N reference route (``dense_statistics``), whichever
    eigenproblem is smaller; both are exact. Adds ``symmetry_score`` = 2s - 1, ``directionality``
    (published sign) and ``directionality_raw`` of Saponati et al. 2025
    (:mod:`qkenergy.math.directionality`; the row/column norms of M = L^T come from Gram
    matrices, never from M, on the Gram route).

    Parameters
    ----------
    w_query : ndarray, shape (H*n, N)
        The layer's query factors stacked over its H heads.
    w_key : ndarray, shape (H*n, N)
        The key factors, expanded to the query heads.
    radius : float, optional
        The radius rule's tolerance on c_sym + d_sym.
    type_rule : {"imbalance", "radius"}, optional
        The head-type rule (:func:`qkenergy.math.head_types.head_types`).
    imbalance_cut : float, optional
        The imbalance rule's cut on |(c - d)/(c + d)|.
    edge_cut : float, optional
        The imbalance rule's tolerance on c + d.
    gamma : float, optional
        The directionality's outlier threshold: norms above mean + gamma * sd.
    route : {"gram", "dense"} or None, optional
        Force one route; None takes the smaller eigenproblem.

    Returns
    -------
    values : dict
        The statistics of the form L (name -> value).
    route : str
        The route taken, "gram" or "dense".
    """
    hn, N = w_query.shape
    types: dict[str, Any] = dict(
        radius=radius, type_rule=type_rule, imbalance_cut=imbalance_cut, edge_cut=edge_cut
    )
    # Each factor scaled by a power of two (exact): the products below cannot overflow.
    wq, wk = rescale_by_power_of_two(w_query)[0], rescale_by_power_of_two(w_key)[0]
    if route is None:
        route = "gram" if 2 * hn <= N else "dense"
    if route not in ("gram", "dense"):
        raise ValueError(f"route must be 'gram', 'dense' or None, got {route!r}")
    if route == "gram":
        stats = head_statistics(wq[None], wk[None], **types)
        # ||M_{i,:}||^2 = (W_Q^T G_KK W_Q)_ii and ||M_{:,j}||^2 = (W_K^T G_QQ W_K)_jj.
        rows2 = np.einsum("rs,si,ri->i", wk @ wk.T, wq, wq, optimize=True)
        cols2 = np.einsum("rs,sj,rj->j", wq @ wq.T, wk, wk, optimize=True)
    else:
        form = wk.T @ wq  # L, N x N; M = L^T
        stats = dense_statistics(form[None], **types)
        rows2 = np.einsum("ij,ij->j", form, form)  # rows of M = columns of L
        cols2 = np.einsum("ij,ij->i", form, form)
        del form
    columns = stats.columns()
    values: dict[str, Any] = {name: float(np.asarray(columns[name])[0]) for name in STATISTICS}
    values["head_type"] = str(np.asarray(columns["head_type"])[0])
    values["reason"] = str(np.asarray(columns["reason"])[0])
    return {**values, **_saponati_scores(values["symmetric_energy"], rows2, cols2, gamma)}, route


def _saponati_scores(s: float, rows2: np.ndarray, cols2: np.ndarray, gamma: float) -> dict[str, float]:
    """symmetry_score 2s - 1, directionality (published sign) and directionality_raw, from M's squared row
    and column norms (Saponati et al. 2025)."""
    if not math.isfinite(s):
        return {"symmetry_score": math.nan, "directionality": -math.nan, "directionality_raw": math.nan}
    rows, cols = np.sqrt(np.clip(rows2, 0, None)), np.sqrt(np.clip(cols2, 0, None))
    raw = float(directionality_raw(rows, cols, gamma=gamma))
    return {"symmetry_score": 2.0 * s - 1.0, "directionality": -raw, "directionality_raw": raw}


def layer_rows(
    model: str,
    arch: Architecture,
    weights: LayerWeights,
    types: Mapping[str, Any],
    rope: Rope | None = None,
    offsets: Sequence[int] | None = None,
) -> list[dict[str, Any]]:
    """The layer's whole form; with RoPE offsets, one row per offset (sum_h W_K^h^T R_d W_Q^h).

    Parameters
    ----------
    model : str
        The model's name.
    arch : Architecture
        The layer's stack.
    weights : LayerWeights
        The layer (the heads its form sums).
    types : mapping
        The type rule's keywords (:meth:`~qkenergy.analysis.type_rule.TypeRule.keywords`).
    rope : Rope, optional
        The layer's rotary embedding.
    offsets : sequence of int, optional
        The RoPE offsets d (None: the form at offset 0, no ``offset`` key).

    Returns
    -------
    list of dict
        One row per offset (private keys ``_group_sizes``, ``_head_dim``: the layer null's shape).
    """
    if offsets is None:
        return [_layer_row(model, arch, weights, types)]
    rows = []
    for offset in offsets:  # a NoPE layer (rope None): the same form at every offset
        rotated = (
            weights
            if rope is None
            else dataclasses.replace(weights, w_query=rotate(weights.w_query, rope, offset))
        )
        rows.append({"offset": offset, **_layer_row(model, arch, rotated, types)})
    return rows


def _layer_row(
    model: str, arch: Architecture, weights: LayerWeights, types: Mapping[str, Any]
) -> dict[str, Any]:
    H, n, N = weights.w_query.shape
    w_query = weights.w_query.reshape(H * n, N)
    w_key = weights.w_key[np.asarray(weights.kv_head)].reshape(H * n, N)
    values, route = layer_form_statistics(w_query, w_key, **types)
    row: dict[str, Any] = {
        "model": model,
        "stack": arch.stack,
        "layer": weights.layer,
        "n_heads": H,
        "n_kv_heads": weights.w_key.shape[0],
        "n": H * n,
        "N": N,
        "positional": arch.layer_positional(weights.layer),
        "qk_norm": arch.qk_norm,
        "route": route,
        # Proposition 6's proof permutes and flips columns only, so GQA's repeated
        # key rows keep the exact mean (N+1)/(2N).
        "symmetric_energy_baseline": symmetric_ratio(N),
    }
    row.update(values)
    # The layer null's shape: query heads per key head, and the head dimension (dropped later).
    row["_group_sizes"] = tuple(np.bincount(weights.kv_head, minlength=weights.w_key.shape[0]).tolist())
    row["_head_dim"] = n
    return row


def _layer_null_columns() -> list[str]:
    from qkenergy.math.layer_null import LAYER_NULL_STATISTICS

    names = [f"{x}_{s}" for x in LAYER_NULL_STATISTICS for s in ("null_mean", "null_sd", "z", "p")]
    return [*names[:4], "symmetric_energy_p_tail", *names[4:]]


def with_layer_null(
    layer_rows: list[dict[str, Any]],
    run: RunConfig,
    *,
    laws: Mapping[tuple[tuple[int, ...], int, int], NullLaw],
    used: dict[tuple[tuple[int, ...], int, int], NullLaw],
) -> pd.DataFrame:
    """Judge each layer's s and directionality against the Gaussian law of a layer of its shape.

    One law per shape (query heads per key head, head dimension, N), taken from
    ``laws`` or drawn and cached like the per-head laws, and recorded in ``used``; a
    shape whose law would cost more than LAYER_NULL_MAX_FLOPS is not drawn, and
    ``null_note`` says so.

    Parameters
    ----------
    layer_rows : list of dict
        The rows of :func:`layer_rows`.
    run : RunConfig
        Whether the Gaussian null is drawn, its spec, the cache and progress.
    laws : mapping
        Layer laws already drawn, by (group sizes, head_dim, N).
    used : dict
        Receives the law of each layer shape judged against.

    Returns
    -------
    DataFrame
        The layer table with null_route, null_note and the null columns.
    """
    require("pandas", "pandas", "the per-layer table")
    import pandas as pd  # the layer forms' own work dwarfs these imports

    null, spec, cache_dir, progress = run.gaussian, run.spec, run.cache_dir, run.progress
    from qkenergy.analysis.null_cache import layer_null_law
    from qkenergy.math.layer_null import LAYER_NULL_STATISTICS, layer_null_flops, layer_null_route

    layers = with_integer_counts(pd.DataFrame(layer_rows))
    extra: dict[str, Any] = {c: np.full(len(layers), np.nan) for c in _layer_null_columns()}
    route = np.full(len(layers), "", dtype=object)
    note = np.full(len(layers), "" if null else "null laws skipped", dtype=object)
    shapes = layers[["_group_sizes", "_head_dim", "N"]]
    if null:
        for groups, head_dim, N in shapes.drop_duplicates().itertuples(index=False):
            rows = np.array(
                [(g, d, m) == (groups, head_dim, N) for g, d, m in shapes.itertuples(index=False)]
            )
            n = sum(1 for m in groups if m > 0) * head_dim
            flops = layer_null_flops(n, N, spec.samples)
            if flops > LAYER_NULL_MAX_FLOPS:
                note[rows] = (
                    f"not drawn: {spec.samples} draws of a form with n = {n}, N = {N} need about {flops:.1e} "
                    f"flops, above the limit of {LAYER_NULL_MAX_FLOPS:.0e}"
                )
                continue
            key = (tuple(int(m) for m in groups), int(head_dim), int(N))
            law = laws.get(key) or layer_null_law(
                spec, groups, head_dim, N, cache_dir=cache_dir, progress=progress
            )
            used[key] = law
            route[rows] = layer_null_route(n, N)
            for x in LAYER_NULL_STATISTICS:
                judged = judge(law, x, layers.loc[rows, x].to_numpy(np.float64))
                for suffix in ("null_mean", "null_sd", "z", "p", "p_tail"):
                    if f"{x}_{suffix}" in extra:
                        extra[f"{x}_{suffix}"][rows] = judged[suffix]
    out = layers.drop(columns=["_group_sizes", "_head_dim"])
    out["null_route"] = route
    out["null_note"] = note
    return pd.concat([out, pd.DataFrame(extra, index=layers.index)], axis=1)

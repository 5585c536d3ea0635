"""The per-head analysis of a checkpoint against the exact null laws, as a pipeline of stages.

:func:`analyze_run` takes one checked :class:`~qkenergy.analysis.run_config.RunConfig` through:

1. the plan: the model's stacks, the layers and heads asked for, RoPE offsets (from the config
   and headers, before any weight);
2. reading ahead (:mod:`qkenergy.analysis.read_ahead`): one layer at a time, the next one read
   by a helper thread (peak memory ~ two layers' Q/K weights);
3. head statistics (:mod:`qkenergy.analysis.head_rows`): every selected head of the layer from
   one batched Gram-route call (docs/mathematics.md §4), heads with non-finite weights refused
   or left out, the rotation null per head when asked for;
4. each null's judgement (:mod:`qkenergy.analysis.judgement`): null mean and sd, z, two-sided
   p and Benjamini-Hochberg adjusted p against the Gaussian law of a head of the same (n, N)
   and the rotation null (docs/mathematics.md §6 and §7);
5. layer forms (:mod:`qkenergy.analysis.layer_forms`), with ``per_layer``;
6. the record (:mod:`qkenergy.analysis.record`): the settings written beside the tables.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Unpack

import numpy as np

from qkenergy.analysis.head_rows import head_rows, with_quantization
from qkenergy.analysis.judgement import rotation_seed, with_bh, with_null_columns
from qkenergy.analysis.layer_forms import finite_heads, layer_form_statistics, layer_rows, with_layer_null
from qkenergy.analysis.nullspec import ROTATION_SAMPLES
from qkenergy.analysis.read_ahead import LayerItem, RunPlan, read_ahead
from qkenergy.analysis.record import layer_list, nothing_left, run_settings
from qkenergy.analysis.rope_offsets import plan_stacks, rope_description
from qkenergy.analysis.run_config import AnalyzeOptions, RunConfig
from qkenergy.base.errors import ArgumentError
from qkenergy.formats import provenance
from qkenergy.formats.columns import Columns, concat, row_count, to_frame
from qkenergy.math.nulls import (
    NULL_STATISTICS,  # judged against their null law: mean / sd / z / p columns
    NullLaw,
)
from qkenergy.math.statistics import REASON_NON_FINITE
from qkenergy.weights.architecture import architectures
from qkenergy.weights.checkpoint import open_model
from qkenergy.weights.finite import bad_heads, nonfinite_error, nonfinite_findings, skip_reason
from qkenergy.weights.layout import Layout
from qkenergy.weights.quantization import stored_quantization
from qkenergy.weights.reading import LayerWeights, layer_tensors, present_stacks, select

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd

    from qkenergy.weights.source import ModelSource

__all__ = [
    "NULL_STATISTICS",
    "ROTATION_SAMPLES",
    "AnalysisResult",
    "analyze_model",
    "analyze_run",
    "layer_form_statistics",
    "rotation_seed",
]


@dataclass(frozen=True)
class AnalysisResult:
    """Result of :func:`analyze_model`: one row per head, optionally one per layer form.

    ``columns`` holds the head table as numpy columns; ``heads`` is the same
    table as a pandas DataFrame, built (and pandas imported) on first use.

    Parameters
    ----------
    columns : Columns
        The head table as numpy columns (name -> array of length heads).
    layers : DataFrame or None
        One row per layer form, or None when the layer forms were not asked for.
    model : str
        The model's name (its directory or file).
    settings : dict, optional
        The settings the analysis ran with (recorded beside the tables).
    null_laws : dict, optional
        (n, N) -> the Gaussian null law the heads of that shape were judged against.
    layer_null_laws : dict, optional
        With ``per_layer``: (query heads per key head, head_dim, N) -> the law of that layer shape.
    """

    columns: Columns
    layers: pd.DataFrame | None
    model: str
    settings: dict[str, Any] = field(default_factory=dict)
    null_laws: dict[tuple[int, int], NullLaw] = field(default_factory=dict)
    """The Gaussian null law of each head shape (n, N) the heads were judged against."""
    layer_null_laws: dict[tuple[tuple[int, ...], int, int], NullLaw] = field(default_factory=dict)
    """With ``per_layer``: the law of each layer shape (query heads per key head, head_dim, N)."""

    @functools.cached_property
    def heads(self) -> pd.DataFrame:
        """The head table: one row per head (per stack and RoPE offset); columns as analyze_model lists."""
        return to_frame(self.columns)

    def head_table(self) -> pd.DataFrame | Columns:
        """What to write: the DataFrame once ``heads`` was built (a caller may have changed it), else the columns."""
        built: pd.DataFrame | None = self.__dict__.get("heads")
        return self.columns if built is None else built


def analyze_model(
    model: Any = None,
    *,
    null_laws: Mapping[tuple[int, int], NullLaw] | None = None,
    layer_null_laws: Mapping[tuple[tuple[int, ...], int, int], NullLaw] | None = None,
    **options: Unpack[AnalyzeOptions],
) -> AnalysisResult:
    """Statistics of every selected head of MODEL, each judged against its exact null law.

    A head whose W_Q or W_K holds a NaN or an infinity (a weight, a scale or a norm gain) is an
    error naming the file, the tensor and the element or block, unless ``skip_nonfinite``.

    Parameters
    ----------
    model : path, str, object or None
        As for :func:`qkenergy.weights.checkpoint.open_model`: None = the embedded all-MiniLM-L6-v2;
        a path, Hugging Face cache folder or hub id; or in memory: a transformers PreTrainedModel,
        a TransformerLens model, or a mapping of tensor names to arrays with ``config``.
    null_laws : mapping of (n, N) to NullLaw, optional
        Gaussian null laws already drawn with these samples and seed (a survey shares
        them between its units); other shapes are drawn here.
    layer_null_laws : mapping of (group sizes, head_dim, N) to NullLaw, optional
        The same for the layer forms of ``per_layer`` (a training run draws each once); the
        laws used are ``Analysis.layer_null_laws``.
    **options
        The keywords of :class:`~qkenergy.analysis.run_config.AnalyzeOptions` (each explained
        there): what is read (``model_type``, ``layout``, ``revision``, ``config``, ``layers``,
        ``heads``, ``rope_offsets``, ``fold_norm``, ``name``, ``skip_nonfinite``), the null
        laws (``null``, ``samples``, ``seed``, ``null_kind``, ``rotation_samples``), the type
        rule (``type_rule``, ``imbalance_cut``, ``edge_cut``, ``radius``) and the run
        (``per_layer``, ``cache_dir``, ``threads``, ``progress``).

    Returns
    -------
    Analysis
        ``heads`` (DataFrame), ``layers`` (DataFrame with ``per_layer``, else None),
        ``settings``, ``null_laws``; the columns below (docs/columns.md).

    Notes
    -----
    Columns of ``heads``: model, stack ("" for a single-stack model, else
    encoder, decoder, cross, text or vision: one row per head per stack),
    layer, head, kv_head, offset (only with ``rope_offsets``), n, N, positional (absolute, rope, alibi,
    relative_bias or none), qk_norm (queries and keys normalised after
    projection, their gains folded in), every name in ``STATISTICS``, head_type, reason, then for X in ``NULL_STATISTICS``
    X_null_mean, X_null_sd, X_z, X_p (two-sided, empirical), then
    symmetric_energy_p_tail (two-sided, from a Beta law matched to the null's
    mean and variance: an approximation, :mod:`qkenergy.math.tails`),
    symmetric_energy_p_bh (Benjamini-Hochberg over the analysed heads with a
    defined p; a p at the Monte Carlo floor 2/(K+1) enters as its p_tail), the
    same under each null per head of :data:`~qkenergy.analysis.nullspec.KINDS` (its infix
    in the names: X_rotation_null_mean, ..., symmetric_energy_rotation_p_bh for the rotation
    null; NaN unless ``null_kind`` asks for it), and the lobes ``alpha``, ``beta`` as lists (zero padding
    trimmed; in units of ||L||, as statistics.HeadStatistics gives them).

    Columns of ``layers`` (``per_layer=True``): (offset, first, with
    ``rope_offsets``), model, stack, layer, n_heads,
    n_kv_heads, n (= H * head_dim), N, positional, qk_norm, route, symmetric_energy_baseline
    ((N+1)/(2N)), every name in ``STATISTICS``, head_type, reason,
    symmetry_score (2s - 1), directionality (published sign) and
    directionality_raw, null_route, null_note, then against the Gaussian law of
    a layer of the same shape (:mod:`qkenergy.math.layer_null`, drawn with the
    Gaussian null, ``samples`` draws, unless its arithmetic exceeds
    LAYER_NULL_MAX_FLOPS, which null_note then says):
    symmetric_energy_{null_mean, null_sd, z, p, p_tail} and
    directionality_{null_mean, null_sd, z, p}.

    Scores of Saponati et al. 2025 ("The underlying structures of
    self-attention: symmetry, directionality, and emergent dynamics in
    Transformer training"), on their matrix M = W_Q^T W_K = L^T (rows:
    query-side features, columns: key-side features), exactly as published:

    - symmetry_score = (||M_s||^2 - ||M_a||^2) / ||M||^2 = 2s - 1, exact
      (Lemma 5, docs/mathematics.md §2);
    - directionality_raw = (C - R)/(C + R), R and C the summed excess of M's
      row / column norms above mean + 2 sd (ddof = 1) of their own list
      (0 when nothing stands out, NaN for L = 0); directionality = -raw, the
      sign of their published tables. See :mod:`qkenergy.math.directionality`.
    """
    return analyze_run(model, RunConfig.of(options), null_laws=null_laws, layer_null_laws=layer_null_laws)


def analyze_run(
    model: Any,
    run: RunConfig,
    *,
    null_laws: Mapping[tuple[int, int], NullLaw] | None = None,
    layer_null_laws: Mapping[tuple[tuple[int, ...], int, int], NullLaw] | None = None,
) -> AnalysisResult:
    """:func:`analyze_model` with its options as one checked :class:`RunConfig`: the stages in order.

    Parameters
    ----------
    model : path, str, object or None
        As for :func:`analyze_model`.
    run : RunConfig
        What is read, how it is judged.
    null_laws, layer_null_laws : mapping, optional
        As for :func:`analyze_model`.

    Returns
    -------
    AnalysisResult
    """
    reading = run.reading
    with (
        open_model(
            model, config=reading.config, revision=reading.revision, hub_cache=run.hub_cache
        ) as source,
        provenance.ReadRecorder(source.tensors) as tensors,  # notes what is read, for the fingerprints
    ):
        plan = _plan(run, source, tensors)
        heads, forms, skipped = _read_heads(run, plan, source, tensors)
        model_source = provenance.model_source(model, source, tensors.fingerprints())
    used: dict[tuple[int, int], NullLaw] = {}
    table = with_bh(with_null_columns(concat(heads), run, laws=null_laws or {}, used=used))
    used_layer_laws: dict[tuple[tuple[int, ...], int, int], NullLaw] = {}
    layer_table = (
        with_layer_null(forms, run, laws=layer_null_laws or {}, used=used_layer_laws)
        if run.per_layer
        else None
    )
    return AnalysisResult(
        columns=table,
        layers=layer_table,
        model=plan.label,
        settings=run_settings(run, plan, source, model_source, table, skipped),
        null_laws=used,
        layer_null_laws=used_layer_laws,
    )


def _plan(run: RunConfig, source: ModelSource, tensors: Any) -> RunPlan:
    """What the run reads, from the config and headers: stacks, layers, heads, RoPE offsets."""
    reading, selection = run.reading, run.selection
    given = reading.layout if isinstance(reading.layout, Layout) else None
    if reading.layout_file is not None:
        from qkenergy.weights.layout_toml import load_layout  # tomllib, for --layout only

        given = load_layout(reading.layout_file)
    found = architectures(
        source.config, source.config_where, model_type=reading.model_type, layout=given or source.layout
    )
    stacks = present_stacks(tensors, found)
    archs = [a for a, _ in stacks]
    layer_ids = select("layers", selection.layers, max(a.n_layers for a in archs), "layers")
    head_ids = select("heads", selection.heads, max(a.n_heads for a in archs), "query heads")
    # One heads list per stack, shared by its layers (a config may claim many layers).
    heads_of = {id(a): [h for h in head_ids if h < a.n_heads] for a in archs}
    todo = [(a, p, layer, heads_of[id(a)]) for a, p in stacks for layer in layer_ids if a.has_layer(layer)]
    if not todo:
        with_attention = sorted({i for a in archs for i in a.attention_layers})
        raise ArgumentError(
            f"layers: none of the layers chosen has softmax attention; the layers with attention are "
            f"{layer_list(with_attention)}",
            parameter="layers",
        )
    return RunPlan(
        label=source.name if reading.name is None else reading.name,
        stacks=stacks,
        rope_plans=plan_stacks(selection.rope_offsets, source.config, archs, source.config_where),
        rope_info=rope_description(source.config, archs, source.config_where),
        layer_ids=list(layer_ids),
        head_ids=list(head_ids),
        todo=todo,
    )


def _read_heads(
    run: RunConfig, plan: RunPlan, source: ModelSource, tensors: Any
) -> tuple[list[Columns], list[dict[str, Any]], list[dict[str, Any]]]:
    """Reading ahead and head statistics, layer by layer: (head tables, layer-form rows, heads skipped)."""
    heads: list[Columns] = []
    forms: list[dict[str, Any]] = []
    skipped: list[dict[str, Any]] = []  # heads left out for non-finite weights (skip_nonfinite)
    layers = read_ahead(source, tensors, plan.todo, fold_norm=run.reading.fold_norm, progress=run.progress)
    with contextlib.closing(layers):
        for item, weights in layers:
            part, form = _layer_heads(run, plan, source, item, weights, skipped)
            heads.append(part)
            forms.extend(form)
            del weights  # released before the layer after next is read
    if skipped and not any(row_count(part) for part in heads):
        raise nothing_left(skipped)
    return heads, forms, skipped


def _layer_heads(
    run: RunConfig,
    plan: RunPlan,
    source: ModelSource,
    item: LayerItem,
    weights: LayerWeights,
    skipped: list[dict[str, Any]],
) -> tuple[Columns, list[dict[str, Any]]]:
    """One layer: its heads' rows (non-finite heads refused or left out) and its whole form's rows."""
    stack, prefix, layer, stack_heads = item
    rope_plan = plan.rope_plans[id(stack)]
    # a NoPE layer of a RoPE model: the same form at every offset
    rope = None if rope_plan is None or stack.layer_positional(layer) != "rope" else rope_plan[0][layer]
    offsets = None if rope_plan is None else rope_plan[1]
    rows = head_rows(run, plan.label, stack, weights, stack_heads, rope=rope, offsets=offsets)
    # found for free by the Gram route (a head's reason); the layer forms sum every head
    bad = sorted(
        {int(h) for h, why in zip(rows["head"], rows["reason"], strict=True) if why == REASON_NON_FINITE}
    )
    form_bad = bad_heads(weights) if run.per_layer else np.zeros(0, dtype=bool)
    if bad or form_bad.any():
        # only now is the layer read again, to say where the values lie
        findings = nonfinite_findings(
            source.tensors, stack, layer, fold_norm=run.reading.fold_norm, prefix=prefix
        )
        if not run.reading.skip_nonfinite:
            raise nonfinite_error(findings, stack, layer, bad or np.flatnonzero(form_bad).tolist())
        skipped.extend(
            {"stack": stack.stack, "layer": layer, "head": h, "why": skip_reason(findings, h)} for h in bad
        )
        kept = ~np.isin(rows["head"], bad)
        rows = {column: values[kept] for column, values in rows.items()}
    read_as = layer_tensors(source.tensors, stack, layer, prefix=prefix)
    part = with_quantization(rows, stored_quantization(source.tensors, read_as))
    if not run.per_layer or form_bad.all():
        return part, []
    form = weights if not form_bad.any() else finite_heads(weights, ~form_bad)
    return part, layer_rows(plan.label, stack, form, run.types.keywords(), rope, offsets)

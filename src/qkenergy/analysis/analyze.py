"""Per-head analysis of a checkpoint against the exact null laws.

One layer is read at a time (peak memory ~ one layer's Q/K weights), the
statistics of all its selected heads come from one batched Gram-route call
(docs/mathematics.md §4), and each trained head is set next to
the null law of a Gaussian head of the same (n, N) (docs/mathematics.md
§6 and §7): null mean and sd, z-score, two-sided
empirical p-value, and Benjamini-Hochberg adjusted p across the analysed heads.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import math
from collections.abc import Iterable, Iterator, Mapping, Sequence
from concurrent import futures
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from qkenergy.analysis.nullspec import NULL_KINDS, ROTATION_SAMPLES, NullSpec
from qkenergy.analysis.rope_offsets import offset_grams, plan_stacks, rope_description
from qkenergy.analysis.significance import TAIL_STATISTICS, bh_with_tail, judge
from qkenergy.analysis.type_rule import TypeRule
from qkenergy.base.errors import ArgumentError, QKEnergyError
from qkenergy.base.parallel import available_cores, resolve_threads, thread_map
from qkenergy.base.version import __version__
from qkenergy.formats import provenance
from qkenergy.formats.columns import (
    Columns,
    broadcast,
    concat,
    list_column,
    row_count,
    to_frame,
    with_integer_counts,
)
from qkenergy.math.baselines import symmetric_ratio
from qkenergy.math.directionality import DIRECTIONALITY_GAMMA, directionality, directionality_raw
from qkenergy.math.energies import rescale_by_power_of_two
from qkenergy.math.gram import head_gram
from qkenergy.math.head_types import EDGE_CUT, IMBALANCE_CUT, RADIUS
from qkenergy.math.nulls import (
    NULL_STATISTICS,  # judged against their null law: mean / sd / z / p columns
    NullLaw,
)
from qkenergy.math.rope import Rope, rotate
from qkenergy.math.statistics import (
    REASON_NON_FINITE,
    STATISTICS,
    HeadStatistics,
    dense_statistics,
    gram_statistics,
    head_statistics,
)
from qkenergy.weights.architecture import Architecture, architectures
from qkenergy.weights.checkpoint import open_model
from qkenergy.weights.families import FAMILIES
from qkenergy.weights.finite import bad_heads, heads_text, nonfinite_error, nonfinite_findings, skip_reason
from qkenergy.weights.layout import Layout
from qkenergy.weights.quantization import stored_quantization
from qkenergy.weights.reading import (
    LayerWeights,
    layer_tensors,
    present_stacks,
    read_layer,
    select,
)

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd

    from qkenergy.weights.source import ModelSource

__all__ = [
    "DIRECTIONALITY_GAMMA",
    "NULL_KINDS",
    "NULL_STATISTICS",
    "ROTATION_SAMPLES",
    "Analysis",
    "NullSpec",
    "TypeRule",
    "analyze_model",
    "directionality",
    "layer_form_statistics",
    "present_stacks",
    "rotation_seed",
    "select",
    "stack_settings",
]

LAYER_NULL_MAX_FLOPS = 1e12
"""Largest arithmetic (flops) spent on one per-layer null law: about a minute on a 2-core machine."""


@dataclass(frozen=True)
class Analysis:
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
    config: Mapping[str, Any] | None = None,
    model_type: str | None = None,
    layout: Layout | str | Path | None = None,
    rope_offsets: Sequence[int | range] | str | None = None,
    layers: Sequence[int | range] | None = None,
    heads: Sequence[int | range] | None = None,
    per_layer: bool = False,
    fold_norm: bool = False,
    samples: int = 2000,
    seed: int = 0,
    radius: float = RADIUS,
    type_rule: str = "imbalance",
    imbalance_cut: float = IMBALANCE_CUT,
    edge_cut: float = EDGE_CUT,
    null: bool = True,
    cache_dir: str | Path | None = None,
    progress: bool = False,
    null_kind: str = "gaussian",
    rotation_samples: int = ROTATION_SAMPLES,
    null_laws: Mapping[tuple[int, int], NullLaw] | None = None,
    layer_null_laws: Mapping[tuple[tuple[int, ...], int, int], NullLaw] | None = None,
    threads: int | None = None,
    name: str | None = None,
    revision: str | None = None,
    null_spec: NullSpec | None = None,
    types: TypeRule | None = None,
    skip_nonfinite: bool = False,
) -> Analysis:
    """Statistics of every selected head of MODEL, each judged against its exact null law.

    While a layer is analysed, the next one is read by a helper thread. A head whose
    W_Q or W_K holds a NaN or an infinity (a weight, a scale or a norm gain folded in) is
    an error naming the file, the tensor and the element or block, unless ``skip_nonfinite``.

    Parameters
    ----------
    model : path, str, object or None
        As for :func:`qkenergy.weights.checkpoint.open_model`: None = the embedded
        all-MiniLM-L6-v2; a path, Hugging Face cache folder or hub id; or in memory: a
        transformers PreTrainedModel, a TransformerLens model, or a mapping of tensor
        names to arrays with ``config``.
    config : mapping, optional
        The config.json dict of a mapping of arrays.
    model_type : str, optional
        Read the checkpoint as this supported type.
    layout : Layout or path, optional
        A Layout or a TOML layout file for an architecture qkenergy does not ship.
    rope_offsets : "log" or sequence of int or range, optional
        RoPE models: "log" (0, 1, 2, 4, ... up to the context length) or offsets d, read as
        the forms L_d = W_K^T R_d W_Q between a query and a key d positions earlier, one row
        per head and offset (column ``offset``); without it a RoPE model's heads are read at
        offset 0 (L = W_K^T W_Q).
    layers, heads : sequence of int or range, optional
        0-based indices as in the checkpoint (query heads; None = all).
    per_layer : bool
        Add a table of the layers' whole forms (see :func:`layer_form_statistics`).
    fold_norm : bool
        Fold the gain of the norm feeding attention into W_Q, W_K.
    samples, seed : int
        The null laws' Monte Carlo size and seed.
    radius : float
        The radius rule's Type II tolerance on c_sym + d_sym.
    type_rule : str
        How head_type is named: "imbalance" (the default, the paper's published rule: Type II
        when c + d <= ``edge_cut``, else I+ / I- / II as the imbalance (c - d)/(c + d) is above
        ``imbalance_cut``, below minus it, or in between) or "radius" (Type II when
        c_sym + d_sym <= ``radius``, else the sign of c_sym - d_sym); :mod:`qkenergy.math.head_types`.
    imbalance_cut, edge_cut : float
        The imbalance rule's tolerances.
    null : bool
        False skips the null laws (null columns NaN).
    cache_dir : path, optional
        Keep null laws on disk.
    progress : bool
        Show progress bars on stderr.
    null_kind : str
        "gaussian" (the law of a Gaussian head of the same shape), "rotation" (the head's own
        W_K, W_Q with the query's input space rotated at random, :mod:`qkenergy.math.rotation`)
        or "both".
    rotation_samples : int
        Draws of the rotation null per head.
    null_laws : mapping of (n, N) to NullLaw, optional
        Gaussian null laws already drawn with these samples, seed and radius (a survey shares
        them between its units); other shapes are drawn here.
    layer_null_laws : mapping of (group sizes, head_dim, N) to NullLaw, optional
        The same for the layer forms of ``per_layer`` (a training run draws each once); the
        laws used are ``Analysis.layer_null_laws``.
    threads : int or None
        Heads and null samples are spread over this many threads with BLAS on one thread each
        (None: every core this process may use; pass 1 inside Dask workers or other process
        pools); results do not depend on it.
    name : str, optional
        The model's name in every output (the ``model`` column, ``settings["model"]``, the
        figures' labels) instead of the one MODEL gives, e.g. to tell two runs of one
        checkpoint apart (``settings["model_source"]`` still says what was read).
    revision : str, optional
        The snapshot of a hub id or Hugging Face cache folder (as open_model).
    null_spec : NullSpec, optional
        When given, sets samples, seed, null_kind and rotation_samples together
        (:class:`~qkenergy.analysis.nullspec.NullSpec`).
    types : TypeRule, optional
        The head-type rule as one object (type_rule, imbalance_cut, edge_cut, radius together;
        :class:`~qkenergy.analysis.type_rule.TypeRule`).
    skip_nonfinite : bool
        Heads whose forms are not finite are left out of the table instead of stopping the
        analysis; ``settings["skipped_heads"]`` lists each (stack, layer, head, why) and the
        summary says how many. A NaN in one head's rows reaches that head alone, one in a
        shared norm gain every head of its layer; the whole form of such a layer (``per_layer``)
        sums its finite heads alone (its ``n_heads`` says how many).

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
    same under the rotation null (X_rotation_null_mean, X_rotation_null_sd,
    X_rotation_z, X_rotation_p, symmetric_energy_rotation_p_tail,
    symmetric_energy_rotation_p_bh; NaN unless ``null_kind`` asks for it), and the lobes ``alpha``, ``beta`` as lists (zero padding
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
    threads = resolve_threads(threads, "threads")
    if name is not None:
        name = _model_name(name)
    if null_spec is None:
        null_spec = _loose_spec(null, samples, seed, null_kind, rotation_samples)
    spec = null_spec
    gaussian, rotation = null and spec.gaussian, null and spec.rotation
    rule = types or TypeRule(type_rule, imbalance_cut, edge_cut, radius)
    keywords: dict[str, Any] = rule.keywords()

    layout_file = None if layout is None or isinstance(layout, Layout) else str(layout)
    given = layout if isinstance(layout, Layout) else None
    if layout_file is not None:
        from qkenergy.weights.layout_toml import load_layout  # tomllib, for --layout only

        given = load_layout(layout_file)
    with (
        open_model(
            model,
            config=config,
            revision=revision,
            hub_cache=None if cache_dir is None else Path(cache_dir) / "hub",
        ) as source,
        provenance.ReadRecorder(source.tensors) as tensors,  # notes what is read, for the fingerprints
    ):
        label = source.name if name is None else name
        found = architectures(
            source.config, source.config_where, model_type=model_type, layout=given or source.layout
        )
        stacks = present_stacks(tensors, found)
        arch = stacks[0][0]
        plans = plan_stacks(rope_offsets, source.config, [a for a, _ in stacks], source.config_where)
        rope_info = rope_description(source.config, [a for a, _ in stacks], source.config_where)
        layer_ids = select("layers", layers, max(a.n_layers for a, _ in stacks), "layers")
        head_ids = select("heads", heads, max(a.n_heads for a, _ in stacks), "query heads")
        # One heads list per stack, shared by its layers (a config may claim many layers).
        heads_of = {id(a): [h for h in head_ids if h < a.n_heads] for a, _ in stacks}
        todo = [
            (a, p, layer, heads_of[id(a)]) for a, p in stacks for layer in layer_ids if a.has_layer(layer)
        ]
        if not todo:
            with_attention = sorted({i for a, _ in stacks for i in a.attention_layers})
            raise ArgumentError(
                f"layers: none of the layers chosen has softmax attention; the layers with attention are "
                f"{_layer_list(with_attention)}",
                parameter="layers",
            )
        head_parts: list[Columns] = []
        layer_rows: list[dict[str, Any]] = []
        skipped: list[dict[str, Any]] = []  # heads left out for non-finite weights (skip_nonfinite)

        def read(item: tuple[Architecture, str, int, list[int]]) -> LayerWeights:
            return read_layer(tensors, item[0], item[2], fold_norm=fold_norm, prefix=item[1])

        fetching = _fetch_plan(source, tensors, todo)
        with _layer_progress(progress, len(todo), fetching) as advance, ThreadPoolExecutor(1) as reader:
            with _split_reads(source.tensors):  # nothing to overlap the first layer's read with
                ahead = reader.submit(read, todo[0])
                futures.wait([ahead])
            for i, (stack, _prefix, layer, stack_heads) in enumerate(todo):
                weights = ahead.result()  # read by the helper thread (or failed to read: raise now)
                if i + 1 < len(todo):
                    # One layer of read-ahead: the next layer is read (and hashed for the
                    # fingerprints) while this layer's statistics run; at most two layers in memory.
                    ahead = reader.submit(read, todo[i + 1])
                plan = plans[id(stack)]
                # a NoPE layer of a RoPE model: the same form at every offset
                rope = None if plan is None or stack.layer_positional(layer) != "rope" else plan[0][layer]
                offsets = None if plan is None else plan[1]
                rows = _head_rows(
                    label,
                    stack,
                    weights,
                    stack_heads,
                    keywords,
                    rotation_samples=spec.rotation_samples if rotation else 0,
                    seed=spec.seed,
                    threads=threads,
                    rope=rope,
                    offsets=offsets,
                )
                # found for free by the Gram route (a head's reason); the layer forms sum every head
                bad = sorted(
                    {
                        int(h)
                        for h, why in zip(rows["head"], rows["reason"], strict=True)
                        if why == REASON_NON_FINITE
                    }
                )
                form_bad = bad_heads(weights) if per_layer else np.zeros(0, dtype=bool)
                if bad or form_bad.any():
                    # only now is the layer read again, to say where the values lie
                    findings = nonfinite_findings(
                        source.tensors, stack, layer, fold_norm=fold_norm, prefix=_prefix
                    )
                    if not skip_nonfinite:
                        raise nonfinite_error(
                            findings, stack, layer, bad or np.flatnonzero(form_bad).tolist()
                        )
                    skipped.extend(
                        {"stack": stack.stack, "layer": layer, "head": h, "why": skip_reason(findings, h)}
                        for h in bad
                    )
                    kept = ~np.isin(rows["head"], bad)
                    rows = {column: values[kept] for column, values in rows.items()}
                read_as = layer_tensors(source.tensors, stack, layer, prefix=_prefix)
                head_parts.append(_with_quantization(rows, stored_quantization(source.tensors, read_as)))
                if per_layer and not form_bad.all():
                    form = weights if not form_bad.any() else _finite_heads(weights, ~form_bad)
                    layer_rows.extend(_layer_rows(label, stack, form, keywords, rope, offsets))
                del weights  # release this layer before the one after next is read
                source.tensors.release()
                advance()
            ahead.result()
        if skipped and not any(row_count(part) for part in head_parts):
            raise _nothing_left(skipped)
        model_source = provenance.model_source(model, source, tensors.fingerprints())
        family_note = FAMILIES[arch.model_type].note if arch.model_type in FAMILIES else ""

    offsets_read = next((plan[1] for plan in plans.values() if plan is not None), None)
    used: dict[tuple[int, int], NullLaw] = {}
    table = _with_null_columns(
        concat(head_parts),
        null=gaussian,
        spec=spec,
        cache_dir=cache_dir,
        progress=progress,
        laws=null_laws or {},
        threads=threads,
        used=used,
    )
    table = _with_rotation_bh(table)
    used_layer_laws: dict[tuple[tuple[int, ...], int, int], NullLaw] = {}
    layer_table = (
        _with_layer_null(
            layer_rows,
            null=gaussian,
            spec=spec,
            cache_dir=cache_dir,
            progress=progress,
            laws=layer_null_laws or {},
            used=used_layer_laws,
        )
        if per_layer
        else None
    )
    settings: dict[str, Any] = {
        "model": label,
        "model_type": arch.model_type,
        "n_layers": arch.n_layers,
        "n_heads": arch.n_heads,
        "n_kv_heads": arch.n_kv_heads,
        "head_dim": arch.head_dim,
        "hidden_size": arch.hidden_size,
        "stacks": [stack_settings(a) for a, _ in stacks],
        "notes": [note for note in (family_note, *_notes((a for a, _ in stacks), offsets_read)) if note],
        "layers": list(layer_ids),
        "heads": list(head_ids),
        "per_layer": bool(per_layer),
        "fold_norm": bool(fold_norm),
        "rope": rope_info,
        "rope_offsets": offsets_read,
        "source": source.origin,
        "layout_file": layout_file,
        "quantization": None,  # plain weights; a quantised checkpoint's notes say how it is stored
        **source.notes,
        "null": bool(null),
        "samples": spec.samples if gaussian else 0,
        "null_kind": spec.kind if null else None,
        "rotation_samples": spec.rotation_samples if rotation else 0,
        "seed": spec.seed,
        **rule.settings(),
        "radius": rule.radius,
        "cache_dir": None if cache_dir is None else str(cache_dir),
        "directionality_gamma": DIRECTIONALITY_GAMMA if per_layer else None,
        "threads": threads,
        "qkenergy_version": __version__,
    }
    if quantized := _quantization_note(table):
        settings["notes"].append(quantized)
    settings["skip_nonfinite"] = bool(skip_nonfinite)
    settings["skipped_heads"] = skipped
    if skipped:
        settings["notes"].append(_skipped_note(skipped, per_layer))
    # the run's provenance (version, date, command line, model source and fingerprints) first
    settings = provenance.run_settings(model_source, **settings)
    return Analysis(
        columns=table,
        layers=layer_table,
        model=label,
        settings=settings,
        null_laws=used,
        layer_null_laws=used_layer_laws,
    )


def _skipped_note(skipped: Sequence[Mapping[str, Any]], per_layer: bool) -> str:
    """The settings' note on heads left out for non-finite weights: how many, where, where to read why."""
    layers = sorted({(str(h["stack"]), int(h["layer"])) for h in skipped})
    where = ", ".join(f"{stack} {layer}" if stack else str(layer) for stack, layer in layers[:12])
    where += f", ... ({len(layers) - 12} more)" if len(layers) > 12 else ""
    forms = (
        "; the whole forms of their layers sum the finite heads alone (column n_heads)" if per_layer else ""
    )
    return (
        f"{len(skipped)} head{'s' if len(skipped) != 1 else ''} skipped: "
        f"{'its' if len(skipped) == 1 else 'their'} weights hold NaN or infinite values (layer{'s' if len(layers) != 1 else ''} {where}); "
        f"settings skipped_heads names each head and why{forms}"
    )


def _finite_heads(weights: LayerWeights, kept: np.ndarray) -> LayerWeights:
    """The layer with only the query heads ``kept`` (its layer form then sums those alone)."""
    return dataclasses.replace(
        weights, w_query=weights.w_query[kept], kv_head=np.asarray(weights.kv_head)[kept]
    )


def _nothing_left(skipped: Sequence[Mapping[str, Any]]) -> QKEnergyError:
    """Every head asked for was skipped: nothing to analyse, and the first reason why."""
    first = skipped[0]
    heads = [int(h["head"]) for h in skipped if (h["stack"], h["layer"]) == (first["stack"], first["layer"])]
    others = len(skipped) - len(heads)
    more = f", and {others} head{'s' if others != 1 else ''} of other layers" if others else ""
    return QKEnergyError(
        f"{first['why']}: every head asked for has non-finite weights (layer {first['layer']}'s "
        f"{heads_text(heads)}{more}); nothing is left to analyse"
    )


def _loose_spec(null: bool, samples: Any, seed: Any, kind: Any, rotation_samples: Any) -> NullSpec:
    """The NullSpec of analyze_model's separate null parameters; those not used are not checked."""
    if kind not in NULL_KINDS:
        raise QKEnergyError(
            f"null_kind must be one of {', '.join(NULL_KINDS)}, got {kind!r}", parameter="null_kind"
        )
    drawn = NullSpec(kind=kind)  # the defaults stand in for values the run does not use
    return NullSpec(
        samples=samples if null else drawn.samples,
        seed=seed,
        kind=kind,
        rotation_samples=rotation_samples if null and drawn.rotation else drawn.rotation_samples,
    )


MAX_NAME = 200  # characters of a model name given with a name


def _model_name(name: Any) -> str:
    """A model's ``name``: text on one line, not empty, at most MAX_NAME characters."""
    if not isinstance(name, str) or not name.strip():
        raise ArgumentError(f"name: expected a non-empty name, got {name!r:.60}", parameter="name")
    if len(name) > MAX_NAME or any(not c.isprintable() for c in name):
        raise ArgumentError(
            f"name: expected at most {MAX_NAME} printable characters on one line, got {name!r:.60}",
            parameter="name",
        )
    return name.strip()


def _split_reads(tensors: Any) -> contextlib.AbstractContextManager[None]:
    """Large reads split over the available cores inside the block (safetensors files; in memory: nothing)."""
    split = getattr(tensors, "split_reads", None)
    return contextlib.nullcontext() if split is None else split(available_cores())


# ----------------------------------------------------------------------------- stacks


def stack_settings(arch: Architecture) -> dict[str, Any]:
    """The settings that record one attention stack's shape: heads, widths, attention layers.

    Parameters
    ----------
    arch : Architecture
        The stack.

    Returns
    -------
    dict
        stack, n_layers, n_heads, n_kv_heads, head_dim, hidden_size, positional, qk_norm,
        attention_layers; and layer_shapes / key_layers where the stack has them.
    """
    return {
        "stack": arch.stack,
        "n_layers": arch.n_layers,
        "n_heads": arch.n_heads,
        "n_kv_heads": arch.n_kv_heads,
        "head_dim": arch.head_dim,
        "hidden_size": arch.hidden_size,
        "positional": arch.positional,
        "qk_norm": arch.qk_norm,
        # hybrid models: the model's layers with softmax attention (the others have no rows)
        "attention_layers": list(arch.attention_layers),
        # per-layer shapes (gemma4, mimo_v2_flash): the layers whose heads differ from the above
        **(
            {
                "layer_shapes": [
                    {"layer": layer, "n_kv_heads": kv, "head_dim": dim}
                    for layer, kv, dim in arch.layer_shapes
                ]
            }
            if arch.layer_shapes
            else {}
        ),
        # KV sharing (gemma4): layer -> the earlier layer whose keys it reuses
        **({"key_layers": {str(a): b for a, b in arch.key_layers}} if arch.key_layers else {}),
    }


def _notes(archs: Iterable[Architecture], offsets: Sequence[int] | None = None) -> list[str]:
    """What a reader of the table must know about how positions and stacks enter the forms."""
    notes = []
    for arch in archs:
        where = f"{arch.stack} stack: " if arch.stack else ""
        if arch.positional == "rope" and offsets:
            notes.append(
                f"{where}RoPE: one row per head and relative offset d (column offset), the form "
                "L_d = W_K^T R_d W_Q between a query and a key d positions earlier"
            )
        elif arch.positional == "rope":
            notes.append(
                f"{where}RoPE: the form read is the one at relative offset 0 (no rotation); "
                "--rope-offsets reads L_d = W_K^T R_d W_Q at other offsets d"
            )
        if arch.layers is not None:
            notes.append(
                f"{where}hybrid model: {len(arch.layers)} of its {arch.n_layers} layers have softmax attention "
                f"(layers {_layer_list(arch.layers)}); the others (linear attention, state-space or "
                "convolution) have no bilinear form and no rows"
            )
        if arch.positional == "rope" and arch.rope_layers is not None:
            nope = [i for i in arch.attention_layers if arch.layer_positional(i) == "none"]
            if nope:
                notes.append(
                    f"{where}{len(nope)} layers have no positions (NoPE: layers {_layer_list(nope)}); "
                    "their positional is none and their form is the same at every offset"
                )
        shaped = [(i, kv, dim) for i, kv, dim in arch.layer_shapes if arch.has_layer(i)]
        for dim, kv in sorted({(dim, kv) for _, kv, dim in shaped}):
            layers = [i for i, k, d in shaped if (d, k) == (dim, kv)]
            notes.append(
                f"{where}layers {_layer_list(layers)} have heads of n = {dim} with {kv} key heads (the others "
                f"n = {arch.head_dim}, {arch.n_kv_heads} key heads); each head is judged against the null "
                "law of its own shape"
            )
        if arch.key_layers:
            pairs = ", ".join(f"{a} <- {b}" for a, b in arch.key_layers[:12])
            more = f", ... ({len(arch.key_layers) - 12} more)" if len(arch.key_layers) > 12 else ""
            notes.append(
                f"{where}KV sharing: layers reuse the keys of an earlier layer ({pairs}{more}); their form "
                "pairs their own queries with the keys that layer projects from its own input"
            )
        if arch.layout.key_stack is not None:
            notes.append(
                f"{where}queries from the decoder stream, keys from the {arch.layout.key_stack} output: "
                "the form pairs two different streams"
            )
    return notes


def _layer_list(layers: Sequence[int], shown: int = 12) -> str:
    """Layer indices for a note: all of them, or the first ``shown`` and how many more."""
    text = ", ".join(map(str, layers[:shown]))
    return text if len(layers) <= shown else f"{text}, ... ({len(layers) - shown} more)"


# ----------------------------------------------------------------------------- selection


@contextlib.contextmanager
def _layer_progress(enabled: bool, total: int, fetching: tuple[Any, int] | None = None) -> Iterator[Any]:
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


def _fetch_plan(
    source: ModelSource, tensors: Any, todo: list[tuple[Architecture, str, int, list[int]]]
) -> Any:
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


# ----------------------------------------------------------------------------- heads


def _trimmed(lobes: np.ndarray) -> list[list[float]]:
    """Each row's positive entries (the lobe without its zero padding; NaN rows give [])."""
    return [row[row > 0].tolist() for row in np.asarray(lobes, dtype=np.float64)]


def _head_rows(
    model: str,
    arch: Architecture,
    weights: LayerWeights,
    head_ids: list[int],
    types: Mapping[str, Any],
    *,
    rotation_samples: int = 0,
    seed: int = 0,
    threads: int = 1,
    rope: Rope | None = None,
    offsets: Sequence[int] | None = None,
) -> Columns:
    """The selected heads of one layer (and their rotation nulls), per RoPE offset if any;
    GQA keys are never copied per query head."""
    sel = np.asarray(head_ids)
    kv = np.asarray(weights.kv_head)[sel]
    N = weights.w_query.shape[-1]
    if offsets is not None:
        # each offset's G_d is a rotation of G (G itself in a NoPE layer): the heads' Gram matrices are formed once
        grams = head_gram(weights.w_query, weights.w_key, weights.kv_head)[sel]
        return concat(
            [
                _head_columns(
                    model, arch, weights, sel, kv, grams_d, offset, rotation_samples, seed, types, threads
                )
                for offset, grams_d in offset_grams(grams, rope, offsets)
            ]
        )
    if rotation_samples:
        # the rotation null starts from each head's G
        grams = head_gram(weights.w_query, weights.w_key, weights.kv_head)[sel]
        stats = gram_statistics(grams, int(N), **types)
    else:
        grams = np.empty((len(sel), 0, 0))
        stats = head_statistics(
            weights.w_query, weights.w_key, kv_head=weights.kv_head, heads=sel, threads=threads, **types
        )
    return _head_columns(
        model, arch, weights, sel, kv, grams, None, rotation_samples, seed, types, threads, stats
    )


def _quantization_note(table: Columns) -> str:
    """The summary's note on weights stored quantised ("" when none of the heads' are)."""
    labels = sorted({str(label) for label in table.get("quantization", ()) if label})
    if not labels:
        return ""
    return (
        f"weights stored quantised ({'; '.join(labels)}): the statistics are those of the dequantised weights"
    )


def _with_quantization(table: Columns, label: str) -> Columns:
    """The head table with its ``quantization`` column (after ``qk_norm``): "" for plain weights."""
    out: Columns = {}
    for name, column in table.items():
        out[name] = column
        if name == "qk_norm":
            out["quantization"] = np.full(len(column), label, dtype=object)
    return out


def _head_columns(
    model: str,
    arch: Architecture,
    weights: LayerWeights,
    sel: np.ndarray,
    kv: np.ndarray,
    grams: np.ndarray,
    offset: int | None,
    rotation_samples: int,
    seed: int,
    types: Mapping[str, Any],
    threads: int,
    stats: HeadStatistics | None = None,
) -> Columns:
    """The rows of one layer's selected heads (at one RoPE offset); ``stats`` default: from ``grams``."""
    n, N = weights.w_query.shape[-2:]
    if stats is None:
        stats = gram_statistics(grams, int(N), **types)
    values: dict[str, Any] = {
        "model": model,
        "stack": arch.stack,
        "layer": weights.layer,
        "head": sel,
        "kv_head": kv,
        **({} if offset is None else {"offset": offset}),
        "n": int(n),
        "N": int(N),
        "positional": arch.layer_positional(weights.layer),
        "qk_norm": arch.qk_norm,
        **stats.columns(),  # STATISTICS (float64), head_type, reason
    }
    table = broadcast(values, len(sel))
    table.update(_rotation_rows(grams, int(N), table, weights.layer, rotation_samples, seed, threads))
    table["alpha"] = list_column(_trimmed(stats.alpha.reshape(len(sel), -1)))
    table["beta"] = list_column(_trimmed(stats.beta.reshape(len(sel), -1)))
    return table


# ----------------------------------------------------------------------------- null laws


def _null_columns(kind: str = "") -> list[str]:
    """X_null_mean, X_null_sd, X_z, X_p for X in NULL_STATISTICS (``kind`` "rotation_" for that null)."""
    return [f"{x}_{kind}{s}" for x in NULL_STATISTICS for s in ("null_mean", "null_sd", "z", "p")]


def rotation_seed(seed: int, layer: int, head: int) -> int:
    """The rotation null's seed of one head: its own SeedSequence child of (seed, layer, head).

    Parameters
    ----------
    seed : int
        The run's seed.
    layer : int
        The head's layer.
    head : int
        The head's index in its layer.

    Returns
    -------
    int
        A 32-bit seed.
    """
    return int(np.random.SeedSequence([seed, layer, head]).generate_state(1, np.uint32)[0])


def _rotation_rows(
    grams: np.ndarray,
    N: int,
    table: Columns,
    layer: int,
    samples: int,
    seed: int,
    threads: int = 1,
) -> dict[str, np.ndarray]:
    """Rotation-null columns of one layer's heads (NaN when ``samples`` is 0), and private floor flags."""
    heads = len(table["head"])
    out = {c: np.full(heads, np.nan) for c in _null_columns("rotation_")}
    for x in TAIL_STATISTICS:
        out[f"{x}_rotation_p_tail"] = np.full(heads, np.nan)
        out[f"_{x}_rotation_floor"] = np.zeros(heads, dtype=bool)
    if samples == 0:
        return out
    # Zero or non-finite heads have no orientation to randomise: their columns stay NaN.
    todo = [i for i, reason in enumerate(table["reason"]) if not reason]
    heads_ids = table["head"]

    from qkenergy.math.rotation import rotation_law  # only when the rotation null is drawn

    def draw(i: int) -> NullLaw:
        head_seed = rotation_seed(seed, layer, int(heads_ids[i]))
        return rotation_law(grams[i], N, samples=samples, seed=head_seed, names=NULL_STATISTICS)

    for i, law in zip(todo, thread_map(draw, todo, threads), strict=True):
        for x in NULL_STATISTICS:
            judged = judge(law, x, np.asarray(table[x], dtype=np.float64)[i : i + 1])
            for suffix in ("null_mean", "null_sd", "z", "p"):
                out[f"{x}_rotation_{suffix}"][i] = judged[suffix][0]
            if x in TAIL_STATISTICS:
                out[f"{x}_rotation_p_tail"][i] = judged["p_tail"][0]
                out[f"_{x}_rotation_floor"][i] = judged["floor"][0]
    return out


def _with_rotation_bh(table: Columns) -> Columns:
    """Add symmetric_energy_rotation_p_bh and move the rotation columns before the lobes."""
    floor = table.pop("_symmetric_energy_rotation_floor").astype(bool)
    table["symmetric_energy_rotation_p_bh"] = bh_with_tail(
        table["symmetric_energy_rotation_p"].astype(np.float64),
        table["symmetric_energy_rotation_p_tail"].astype(np.float64),
        floor,
    )
    rotation = [
        *_null_columns("rotation_"),
        "symmetric_energy_rotation_p_tail",
        "symmetric_energy_rotation_p_bh",
    ]
    rest = [c for c in table if c not in rotation and c not in ("alpha", "beta")]
    return {c: table[c] for c in [*rest, *rotation, "alpha", "beta"]}


def _with_null_columns(
    table: Columns,
    *,
    null: bool,
    spec: NullSpec,
    cache_dir: str | Path | None,
    progress: bool,
    laws: Mapping[tuple[int, int], NullLaw],
    threads: int,
    used: dict[tuple[int, int], NullLaw] | None = None,
) -> Columns:
    """Insert the Gaussian null columns (before the lobes), the Beta tail and BH-adjusted p of s.

    ``used`` receives the Gaussian null law of each head shape (n, N) judged against.
    """
    heads = len(table["head"])
    extra = {c: np.full(heads, np.nan) for c in _null_columns()}
    extra["symmetric_energy_p_tail"] = np.full(heads, np.nan)
    floor = np.zeros(heads, dtype=bool)
    if null:
        from qkenergy.analysis.null_cache import null_law  # with its Monte Carlo engine, only when drawn

        for n, N in dict.fromkeys(zip(table["n"].tolist(), table["N"].tolist(), strict=True)):
            law = laws.get((int(n), int(N))) or null_law(
                spec,
                int(n),
                int(N),
                cache_dir=cache_dir,
                progress=progress,
                names=NULL_STATISTICS,
                threads=threads,
            )
            if used is not None:
                used[(int(n), int(N))] = law
            rows = (table["n"] == n) & (table["N"] == N)
            for x in NULL_STATISTICS:
                judged = judge(law, x, np.asarray(table[x][rows], dtype=np.float64))
                for suffix in ("null_mean", "null_sd", "z", "p"):
                    extra[f"{x}_{suffix}"][rows] = judged[suffix]
                if x in TAIL_STATISTICS:
                    extra[f"{x}_p_tail"][rows] = judged["p_tail"]
                    floor[rows] = judged["floor"]
    extra["symmetric_energy_p_bh"] = bh_with_tail(
        extra["symmetric_energy_p"], extra["symmetric_energy_p_tail"], floor
    )
    base = {c: v for c, v in table.items() if c not in ("alpha", "beta")}
    return {**base, **extra, "alpha": table["alpha"], "beta": table["beta"]}


# ----------------------------------------------------------------------------- layer forms


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

    ``w_query``, ``w_key``: the stacked factors (H*n, N), keys already expanded
    to the query heads (GQA). Route: the Gram route on the stacked factors when
    2Hn <= N (the form is a 'head' with n = H*head_dim), else the dense N x N
    reference route (``dense_statistics``), whichever eigenproblem is smaller;
    both are exact (``route`` = "gram" / "dense" forces one). Adds ``symmetry_score`` = 2s - 1,
    ``directionality`` (published sign) and ``directionality_raw`` of Saponati et al. 2025
    (:mod:`qkenergy.math.directionality`; the row/column norms of M = L^T come
    from Gram matrices, never from M, on the Gram route).
    Returns (values, route).

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
    types: dict[str, Any] = {
        "radius": radius,
        "type_rule": type_rule,
        "imbalance_cut": imbalance_cut,
        "edge_cut": edge_cut,
    }
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
    s = values["symmetric_energy"]
    values["symmetry_score"] = 2.0 * s - 1.0 if math.isfinite(s) else float("nan")
    if math.isfinite(s):
        rows, cols = np.sqrt(np.clip(rows2, 0, None)), np.sqrt(np.clip(cols2, 0, None))
        raw = float(directionality_raw(rows, cols, gamma=gamma))
    else:
        raw = float("nan")
    values["directionality"] = -raw  # the published sign (Saponati et al. 2025)
    values["directionality_raw"] = raw
    return values, route


def _layer_rows(
    model: str,
    arch: Architecture,
    weights: LayerWeights,
    types: Mapping[str, Any],
    rope: Rope | None = None,
    offsets: Sequence[int] | None = None,
) -> list[dict[str, Any]]:
    """The layer's whole form; with RoPE offsets, one row per offset (sum_h W_K^h^T R_d W_Q^h)."""
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


def _with_layer_null(
    layer_rows: list[dict[str, Any]],
    *,
    null: bool,
    spec: NullSpec,
    cache_dir: str | Path | None,
    progress: bool,
    laws: Mapping[tuple[tuple[int, ...], int, int], NullLaw],
    used: dict[tuple[tuple[int, ...], int, int], NullLaw],
) -> pd.DataFrame:
    """Judge each layer's s and directionality against the Gaussian law of a layer of its shape.

    One law per shape (query heads per key head, head dimension, N), taken from
    ``laws`` or drawn and cached like the per-head laws, and recorded in ``used``; a
    shape whose law would cost more than LAYER_NULL_MAX_FLOPS is not drawn, and
    ``null_note`` says so.
    """
    import pandas as pd  # the layer forms' own work dwarfs these imports

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

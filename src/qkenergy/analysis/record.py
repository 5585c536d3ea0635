"""The record of a run: the settings written beside its tables, and the notes a reader must know.

The run's options (:class:`~qkenergy.analysis.run_config.RunConfig`) and what was read
(stacks, layers, heads, RoPE, quantisation, heads skipped) are serialised here, in one place,
in the order earlier tables record them; :mod:`qkenergy.formats.provenance` puts the run's
provenance (version, date, command line, model source and fingerprints) first.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

from qkenergy.analysis.nullspec import ROTATION_SAMPLES, NullSpec
from qkenergy.analysis.type_rule import TypeRule
from qkenergy.base.errors import QKEnergyError
from qkenergy.base.version import __version__
from qkenergy.formats import provenance
from qkenergy.formats.columns import Columns
from qkenergy.math.defaults import EDGE_CUT, IMBALANCE_CUT, RADIUS, SAMPLES
from qkenergy.math.directionality import DIRECTIONALITY_GAMMA
from qkenergy.math.head_types import TYPE_RULES
from qkenergy.weights.architecture import Architecture
from qkenergy.weights.families import FAMILIES
from qkenergy.weights.finite import heads_text

if TYPE_CHECKING:  # pragma: no cover
    from qkenergy.analysis.read_ahead import RunPlan
    from qkenergy.analysis.run_config import RunConfig
    from qkenergy.weights.source import ModelSource

__all__ = [
    "RecordedRun",
    "layer_list",
    "nothing_left",
    "recorded_run",
    "run_settings",
    "stack_settings",
    "survey_settings",
]


def run_settings(
    run: RunConfig,
    plan: RunPlan,
    source: ModelSource,
    model_source: Mapping[str, Any],
    table: Columns,
    skipped: list[dict[str, Any]],
) -> dict[str, Any]:
    """The settings an analysis records: its provenance, what was read, the run's options, its notes.

    Parameters
    ----------
    run : RunConfig
        The run's options.
    plan : RunPlan
        What was read (stacks, layers, heads, RoPE).
    source : ModelSource
        The model read (its origin and notes).
    model_source : mapping
        Where the weights came from, with the fingerprints of the files read.
    table : Columns
        The head table (its quantization column).
    skipped : list of dict
        The heads left out for non-finite weights.

    Returns
    -------
    dict
        Provenance first, then model, model_type, ..., null, samples, null_kind, rotation_samples,
        seed, type_rule, imbalance_cut, edge_cut, radius, cache_dir, ..., skipped_heads.
    """
    arch, stacks, spec = plan.stacks[0][0], [a for a, _ in plan.stacks], run.spec
    family_note = FAMILIES[arch.model_type].note if arch.model_type in FAMILIES else ""
    settings: dict[str, Any] = {
        "model": plan.label,
        "model_type": arch.model_type,
        **shape_settings(arch),
        "stacks": [stack_settings(a) for a in stacks],
        "notes": [note for note in (family_note, *notes(stacks, plan.offsets)) if note],
        "layers": list(plan.layer_ids),
        "heads": list(plan.head_ids),
        "per_layer": bool(run.per_layer),
        "fold_norm": bool(run.reading.fold_norm),
        "rope": plan.rope_info,
        "rope_offsets": plan.offsets,
        "source": source.origin,
        "layout_file": run.reading.layout_file,
        "quantization": None,  # plain weights; a quantised checkpoint's notes say how it is stored
        **source.notes,
        "null": run.null,
        "samples": spec.draws("samples") if run.null else 0,
        "null_kind": spec.kind if run.null else None,
        "rotation_samples": spec.draws("rotation_samples") if run.null else 0,
        "seed": spec.seed,
        **_type_rule_settings(run.types),
        "radius": run.types.radius,
        "cache_dir": None if run.cache_dir is None else str(run.cache_dir),
        "directionality_gamma": DIRECTIONALITY_GAMMA if run.per_layer else None,
        "threads": run.threads,
        "qkenergy_version": __version__,
    }
    if quantized := quantization_note(table):
        settings["notes"].append(quantized)
    settings["skip_nonfinite"] = bool(run.reading.skip_nonfinite)
    settings["skipped_heads"] = skipped
    if skipped:
        settings["notes"].append(skipped_note(skipped, run.per_layer))
    # the run's provenance (version, date, command line, model source and fingerprints) first
    return provenance.run_settings(model_source, **settings)


def survey_settings(spec: NullSpec, types: TypeRule, *, null: bool, per_layer: bool) -> dict[str, Any]:
    """The settings a survey records (survey.json) and a resumed survey must keep.

    Parameters
    ----------
    spec : NullSpec
        How the null laws are drawn.
    types : TypeRule
        How head types are named.
    null : bool
        Whether null laws are drawn.
    per_layer : bool
        Whether the layer forms are analysed.

    Returns
    -------
    dict
        samples, seed, null, null_kind, rotation_samples, radius, type_rule, imbalance_cut,
        edge_cut, per_layer.
    """
    return {
        "samples": spec.samples,
        "seed": spec.seed,
        "null": bool(null),
        "null_kind": spec.kind,
        "rotation_samples": spec.rotation_samples,
        "radius": types.radius,
        **_type_rule_settings(types),
        "per_layer": bool(per_layer),
    }


def _type_rule_settings(types: TypeRule) -> dict[str, Any]:
    # the radius apart: analyze records it after these keys, a survey before them
    return {"type_rule": types.rule, "imbalance_cut": types.imbalance_cut, "edge_cut": types.edge_cut}


class RecordedRun(NamedTuple):
    """How a recorded run judged its heads (:func:`recorded_run`).

    Parameters
    ----------
    null : NullSpec or None
        How its null laws were drawn; None when it drew none.
    types : TypeRule
        How its head types were named.
    """

    null: NullSpec | None
    types: TypeRule


def recorded_run(settings: Mapping[str, Any]) -> RecordedRun:
    """The null laws and the head-type rule that a table's or a survey's settings record.

    The one reader of what :func:`run_settings` and :func:`survey_settings` write. A key an
    older table lacks takes its default, except one: a table written before the imbalance rule
    records a ``radius`` and no ``type_rule``, and its heads were named by the radius rule.

    Parameters
    ----------
    settings : mapping
        A table's settings (``Analysis.settings``, ``read_settings``) or a survey's.

    Returns
    -------
    RecordedRun
    """
    null = None
    if settings.get("null", True) and settings.get("null_kind") is not None:
        null = NullSpec(
            samples=int(settings.get("samples") or SAMPLES),  # 0 when only the rotation null was drawn
            seed=int(settings.get("seed", 0)),
            kind=str(settings["null_kind"]),
            rotation_samples=int(settings.get("rotation_samples") or ROTATION_SAMPLES),
        )
    rule = TYPE_RULES[0] if "type_rule" in settings or "radius" not in settings else "radius"
    types = TypeRule(
        str(settings.get("type_rule", rule)),
        float(settings.get("imbalance_cut", IMBALANCE_CUT)),
        float(settings.get("edge_cut", EDGE_CUT)),
        float(settings.get("radius", RADIUS)),
    )
    return RecordedRun(null, types)


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
    settings: dict[str, Any] = {
        "stack": arch.stack,
        **shape_settings(arch),
        "positional": arch.positional,
        "qk_norm": arch.qk_norm,
        # hybrid models: the model's layers with softmax attention (the others have no rows)
        "attention_layers": list(arch.attention_layers),
    }
    if arch.layer_shapes:  # per-layer shapes (gemma4, mimo_v2_flash): the layers whose heads differ
        settings["layer_shapes"] = [
            {"layer": layer, "n_kv_heads": kv, "head_dim": dim} for layer, kv, dim in arch.layer_shapes
        ]
    if arch.key_layers:  # KV sharing (gemma4): layer -> the earlier layer whose keys it reuses
        settings["key_layers"] = {str(a): b for a, b in arch.key_layers}
    return settings


def shape_settings(arch: Architecture) -> dict[str, int]:
    """The stack's sizes as the settings record them: n_layers, n_heads, n_kv_heads, head_dim, hidden_size."""
    return {
        key: getattr(arch, key) for key in ("n_layers", "n_heads", "n_kv_heads", "head_dim", "hidden_size")
    }


def notes(archs: Iterable[Architecture], offsets: Sequence[int] | None = None) -> list[str]:
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
                f"(layers {layer_list(arch.layers)}); the others (linear attention, state-space or "
                "convolution) have no bilinear form and no rows"
            )
        if arch.positional == "rope" and arch.rope_layers is not None:
            nope = [i for i in arch.attention_layers if arch.layer_positional(i) == "none"]
            if nope:
                notes.append(
                    f"{where}{len(nope)} layers have no positions (NoPE: layers {layer_list(nope)}); "
                    "their positional is none and their form is the same at every offset"
                )
        shaped = [(i, kv, dim) for i, kv, dim in arch.layer_shapes if arch.has_layer(i)]
        for dim, kv in sorted({(dim, kv) for _, kv, dim in shaped}):
            layers = [i for i, k, d in shaped if (d, k) == (dim, kv)]
            notes.append(
                f"{where}layers {layer_list(layers)} have heads of n = {dim} with {kv} key heads (the others "
                f"n = {arch.head_dim}, {arch.n_kv_heads} key heads); each head is judged against the null "
                "law of its own shape"
            )
        if arch.key_layers:
            pairs = layer_list([f"{a} <- {b}" for a, b in arch.key_layers])
            notes.append(
                f"{where}KV sharing: layers reuse the keys of an earlier layer ({pairs}); their form "
                "pairs their own queries with the keys that layer projects from its own input"
            )
        if arch.layout.key_stack is not None:
            notes.append(
                f"{where}queries from the decoder stream, keys from the {arch.layout.key_stack} output: "
                "the form pairs two different streams"
            )
    return notes


def layer_list(layers: Sequence[int | str], shown: int = 12) -> str:
    """Layer indices (or labels) for a note: all of them, or the first ``shown`` and how many more.

    Parameters
    ----------
    layers : sequence of int or str
        The layers.
    shown : int
        How many are named.

    Returns
    -------
    str
    """
    text = ", ".join(map(str, layers[:shown]))
    return text if len(layers) <= shown else f"{text}, ... ({len(layers) - shown} more)"


def skipped_note(skipped: Sequence[Mapping[str, Any]], per_layer: bool) -> str:
    """The settings' note on heads left out for non-finite weights: how many, where, where to read why."""
    layers = sorted({(str(h["stack"]), int(h["layer"])) for h in skipped})
    where = layer_list([f"{stack} {layer}" if stack else str(layer) for stack, layer in layers])
    forms = (
        "; the whole forms of their layers sum the finite heads alone (column n_heads)" if per_layer else ""
    )
    return (
        f"{len(skipped)} head{'s' if len(skipped) != 1 else ''} skipped: "
        f"{'its' if len(skipped) == 1 else 'their'} weights hold NaN or infinite values (layer{'s' if len(layers) != 1 else ''} {where}); "
        f"settings skipped_heads names each head and why{forms}"
    )


def nothing_left(skipped: Sequence[Mapping[str, Any]]) -> QKEnergyError:
    """Every head asked for was skipped: nothing to analyse, and the first reason why.

    Parameters
    ----------
    skipped : sequence of mapping
        The heads skipped (stack, layer, head, why).

    Returns
    -------
    QKEnergyError
    """
    first = skipped[0]
    heads = [int(h["head"]) for h in skipped if (h["stack"], h["layer"]) == (first["stack"], first["layer"])]
    others = len(skipped) - len(heads)
    more = f", and {others} head{'s' if others != 1 else ''} of other layers" if others else ""
    return QKEnergyError(
        f"{first['why']}: every head asked for has non-finite weights (layer {first['layer']}'s "
        f"{heads_text(heads)}{more}); nothing is left to analyse"
    )


def quantization_note(table: Columns) -> str:
    """The summary's note on weights stored quantised ("" when none of the heads' are)."""
    labels = sorted({str(label) for label in table.get("quantization", ()) if label})
    if not labels:
        return ""
    return (
        f"weights stored quantised ({'; '.join(labels)}): the statistics are those of the dequantised weights"
    )

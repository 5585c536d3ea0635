"""A model's rotary settings, read from its config.json: one :class:`~qkenergy.math.rope.Rope` per layer.

Both ways configs write them are read:

- transformers 5: ``rope_parameters`` = {rope_type, rope_theta, partial_rotary_factor,
  factor, ...}, or one such dict per layer type (``layer_types``: gemma3's sliding
  and full attention layers have their own theta);
- earlier configs (most checkpoints on the Hub): ``rope_theta`` (``rotary_emb_base``
  in GPT-NeoX, 10000 when absent), ``rope_scaling`` = {rope_type or type, factor, ...},
  ``partial_rotary_factor`` (``rotary_pct`` in GPT-NeoX) or ``rotary_dim`` (GPT-J),
  and gemma3's ``rope_local_base_freq`` for its sliding layers.

The pairing of the rotated coordinates comes from the layout (``rope_pairs``:
GPT-J interleaves) or the config's ``rope_interleave`` (DeepSeek).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from qkenergy.base.errors import ArgumentError, QKEnergyError
from qkenergy.math.rope import ROPE_KINDS, Rope
from qkenergy.weights.architecture import Architecture

__all__ = ["CONTEXT_KEYS", "context_length", "has_rope", "layer_ropes", "stack_config"]

# config.json keys of the context length, first present wins.
CONTEXT_KEYS: tuple[str, ...] = (
    "max_position_embeddings",
    "n_positions",
    "n_ctx",
    "max_sequence_length",
    "seq_length",
)
_FLOAT_FIELDS = (
    "factor",
    "low_freq_factor",
    "high_freq_factor",
    "beta_fast",
    "beta_slow",
    "mscale",
    "mscale_all_dim",
    "attention_factor",
)


def stack_config(config: Mapping[str, Any], arch: Architecture) -> Mapping[str, Any]:
    """The part of config.json that holds a stack's settings: its section (a multimodal tower's
    ``text_config``), or the whole config for a model with one stack or an older flat config.

    Parameters
    ----------
    config : mapping
        The parsed config.json.
    arch : Architecture
        The stack (its layout's ``config_section``).

    Returns
    -------
    mapping
    """
    section = arch.layout.config_section
    value = config.get(section) if section is not None else None
    return value if isinstance(value, Mapping) else config


def has_rope(config: Mapping[str, Any], arch: Architecture) -> bool:
    """Whether the model rotates queries and keys (the layout's ``positional`` says).

    Parameters
    ----------
    config : mapping
        The parsed config.json.
    arch : Architecture
        The stack.

    Returns
    -------
    bool
    """
    return arch.layout.positional == "rope"


def context_length(config: Mapping[str, Any]) -> int | None:
    """The model's context length (``max_position_embeddings`` or an alias), or None.

    Parameters
    ----------
    config : mapping
        The parsed config.json.

    Returns
    -------
    int or None
        The first positive integer among ``CONTEXT_KEYS``; None when there is none.
    """
    for key in CONTEXT_KEYS:
        value = config.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return None


def _number(params: Mapping[str, Any], key: str, source: str) -> float | None:
    value = params.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise QKEnergyError(f"{source}: rope setting {key!r} is {value!r}; expected a number")
    return float(value)


def _parameters(config: Mapping[str, Any]) -> dict[str, Any]:
    """The rope parameters in transformers-5 form (flat, or keyed by layer type)."""
    params = config.get("rope_parameters")
    if isinstance(params, Mapping):
        return dict(params)
    flat: dict[str, Any] = dict(config.get("rope_scaling") or {})
    theta = config.get("rope_theta", config.get("rotary_emb_base"))
    if theta is not None:
        flat.setdefault("rope_theta", theta)
    partial = config.get("partial_rotary_factor", config.get("rotary_pct"))
    if partial is not None:
        flat.setdefault("partial_rotary_factor", partial)
    local = config.get("rope_local_base_freq")  # gemma3 before transformers 5: sliding layers
    if local is not None and config.get("layer_types"):
        return {
            "full_attention": flat,
            "sliding_attention": {**flat, "rope_theta": local, "rope_type": "default"},
        }
    return flat


def _rope(
    params: Mapping[str, Any], config: Mapping[str, Any], arch: Architecture, source: str, head_dim: int
) -> Rope:
    kind = str(params.get("rope_type") or params.get("type") or "default")
    if kind not in ROPE_KINDS:
        raise QKEnergyError(
            f"{source}: rope_type {kind!r} is not supported for `rope_offsets`; supported: {', '.join(ROPE_KINDS)}"
        )
    rope_head = config.get("qk_rope_head_dim")  # multi-head latent attention: the rotated tail of each head
    partial = _number(params, "partial_rotary_factor", source)
    if kind == "proportional":  # the pairs span the whole head; only the share `partial` turns
        rotary_dim, start = head_dim, 0
        if partial is not None and not 0.0 <= partial <= 1.0:
            raise QKEnergyError(f"{source}: partial_rotary_factor {partial} is not in [0, 1]")
    elif isinstance(rope_head, int) and rope_head > 0:
        rotary_dim, start = rope_head, head_dim - rope_head
    elif isinstance(config.get("rotary_dim"), int):
        rotary_dim, start = int(config["rotary_dim"]), 0
    else:
        rotary_dim, start = int(head_dim * (1.0 if partial is None else partial)), 0
    if rotary_dim <= 0 or rotary_dim % 2 or start + rotary_dim > head_dim:
        raise QKEnergyError(
            f"{source}: {rotary_dim} rotary coordinates do not fit heads of {head_dim} in even pairs"
        )
    interleaved = (
        arch.layout.rope_pairs == "interleaved"
        or bool(config.get("rope_interleave"))
        or bool(config.get("rope_interleaved"))
    )
    original = params.get("original_max_position_embeddings", config.get("original_max_position_embeddings"))

    def factors(key: str) -> tuple[float, ...] | None:
        value = params.get(key)
        return None if value is None else tuple(float(v) for v in value)

    theta = _number(params, "rope_theta", source)
    floats = {key: _number(params, key, source) for key in _FLOAT_FIELDS}
    try:
        return Rope(
            rotary_dim=rotary_dim,
            theta=10000.0 if theta is None else theta,
            kind=kind,
            pairs="interleaved" if interleaved else "half",
            rotary_start=start,
            max_position_embeddings=context_length(config),
            original_max_position_embeddings=None if original is None else int(original),
            truncate=bool(params.get("truncate", True)),
            short_factor=factors("short_factor"),
            long_factor=factors("long_factor"),
            factor=floats["factor"],
            low_freq_factor=floats["low_freq_factor"] or 1.0,
            high_freq_factor=floats["high_freq_factor"] or 4.0,
            beta_fast=floats["beta_fast"] or 32.0,
            beta_slow=floats["beta_slow"] or 1.0,
            mscale=floats["mscale"],
            mscale_all_dim=floats["mscale_all_dim"],
            attention_factor=floats["attention_factor"],
            rotated_fraction=1.0 if kind != "proportional" or partial is None else partial,
        )
    except (TypeError, ValueError) as exc:
        raise QKEnergyError(f"{source}: rope settings: {exc}") from None


def layer_ropes(config: Mapping[str, Any], arch: Architecture, source: str = "config.json") -> list[Rope]:
    """The rotary settings of each layer (ArgumentError if the model has no rotary embedding).

    Parameters
    ----------
    config : mapping
        The parsed config.json.
    arch : Architecture
        The stack.
    source : str
        The config file, for messages.

    Returns
    -------
    list of Rope
        One per layer of the stack (``arch.n_layers``).

    Raises
    ------
    QKEnergyError
        The model has no rotary embedding (an ArgumentError naming ``rope_offsets``), or its
        rope parameters are missing, invalid, or not given for a layer type.
    """
    if not has_rope(config, arch):
        raise ArgumentError(
            f"rope_offsets: {source} describes a {arch.model_type} model, which has no rotary position embedding",
            parameter="rope_offsets",
        )
    config = stack_config(config, arch)  # a multimodal tower's settings live in its section
    params = _parameters(config)
    layer_types = config.get("layer_types")
    nested = params and all(isinstance(v, Mapping) for v in params.values())
    # A layer's rope depends on its head size too (gemma4's full layers have larger heads).
    dims = [arch.layer_head_dim(i) for i in range(arch.n_layers)]
    if not nested:
        flat = {d: _rope(params, config, arch, source, d) for d in dict.fromkeys(dims)}
        return [flat[d] for d in dims]
    if not isinstance(layer_types, list) or len(layer_types) < arch.n_layers:
        raise QKEnergyError(f"{source}: rope parameters per layer type need 'layer_types', one per layer")
    missing = sorted({str(t) for t in layer_types[: arch.n_layers] if t not in params})
    if missing:
        raise QKEnergyError(f"{source}: no rope parameters for layer type {missing[0]!r}")
    by_type: dict[tuple[Any, int], Rope] = {}
    out = []
    for t, d in zip(layer_types[: arch.n_layers], dims, strict=True):
        if (t, d) not in by_type:
            by_type[(t, d)] = _rope(params[t], config, arch, f"{source} ({t})", d)
        out.append(by_type[(t, d)])
    return out

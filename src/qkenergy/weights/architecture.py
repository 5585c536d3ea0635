"""A checkpoint's config.json resolved against its family: one :class:`Architecture` per attention stack.

:func:`family_of` picks the family (``model_type``, or the one asked for),
:func:`architectures` gives every stack's sizes (layers, query and key heads,
head dimension, residual width), norms and positional scheme, checked before
anything is sized by them.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from qkenergy.base.display import show_name
from qkenergy.base.errors import ArgumentError, QKEnergyError
from qkenergy.base.json_input import get_bool, get_int, get_str
from qkenergy.weights.families import FAMILIES, supported_model_types
from qkenergy.weights.layout import Family, LayerPattern, Layout

__all__ = [
    "Architecture",
    "architecture",
    "architectures",
    "family_of",
]


@dataclass(frozen=True)
class Architecture:
    """Attention sizes of one stack of a checkpoint (from config.json) and its layout.

    Parameters
    ----------
    model_type : str
        config.json's ``model_type`` (or the type the checkpoint is read as).
    n_layers : int
        Layers of the stack.
    n_heads : int
        Query heads per layer.
    n_kv_heads : int
        Key heads per layer (fewer than ``n_heads`` with grouped-query attention).
    head_dim : int
        Dimension n of a head's query and key.
    hidden_size : int
        Residual width N.
    layout : Layout
        How the stack's tensors are named and combined.
    key_norm : str or None
        Cross-attention: the norm (relative name) on the output of the stack the keys read,
        folded into W_K by fold_norm; None for self-attention (keys see the query's norm).
    latent : (int, int, int, int) or None
        Latent attention: (d_nope, d_rope, d_value, kv_rank) from config.json.
    layers : tuple of int or None
        Hybrid models: the layer indices that have softmax attention; None for all ``n_layers``.
    rope_layers : tuple of int or None
        Models with NoPE layers: the layers that rotate; None for all of them (in a RoPE stack).
    layer_shapes : tuple of (int, int, int)
        (layer, key heads, head_dim) of each layer whose heads differ from ``n_kv_heads`` and
        ``head_dim`` (gemma4's full layers, mimo_v2_flash's sliding layers).
    key_layers : tuple of (int, int)
        KV sharing: (layer, source layer) of each layer that reuses an earlier layer's keys.
    block_layers : tuple of (int, int, int, bool)
        Shared attention blocks (zamba2): (layer, the block's first layer, application index,
        whether the application has adapters of its own).
    """

    model_type: str
    n_layers: int
    n_heads: int
    n_kv_heads: int
    head_dim: int
    hidden_size: int
    layout: Layout
    key_norm: str | None = None
    latent: tuple[int, int, int, int] | None = None
    layers: tuple[int, ...] | None = None
    rope_layers: tuple[int, ...] | None = None
    layer_shapes: tuple[tuple[int, int, int], ...] = ()
    key_layers: tuple[tuple[int, int], ...] = ()
    block_layers: tuple[tuple[int, int, int, bool], ...] = ()

    @property
    def stack(self) -> str:
        return self.layout.stack

    @functools.cached_property
    def _shapes(self) -> dict[int, tuple[int, int]]:
        return {index: (kv_heads, head_dim) for index, kv_heads, head_dim in self.layer_shapes}

    @functools.cached_property
    def _blocks(self) -> dict[int, tuple[int, int, bool]]:
        return {block[0]: block[1:] for block in self.block_layers}

    @functools.cached_property
    def _sources(self) -> dict[int, int]:
        return dict(self.key_layers)

    def _shape(self, layer: int) -> tuple[int, int]:
        return self._shapes.get(layer, (self.n_kv_heads, self.head_dim))

    def layer_head_dim(self, layer: int) -> int:
        """Head dimension n of layer ``layer`` (the stack's, unless the layer's heads differ)."""
        return self._shape(layer)[1]

    def layer_kv_heads(self, layer: int) -> int:
        """Key-head count of layer ``layer`` (the stack's, unless the layer's heads differ)."""
        return self._shape(layer)[0]

    def layer_kv_head(self, layer: int) -> np.ndarray:
        """Key head used by each query head in layer ``layer`` (grouped-query attention)."""
        return np.arange(self.n_heads) // (self.n_heads // self.layer_kv_heads(layer))

    def tensor_layer(self, layer: int) -> int:
        """The layer under whose index layer ``layer``'s tensors are stored: itself, unless its block is shared."""
        block = self._blocks.get(layer)
        return layer if block is None else block[0]

    def adapter(self, layer: int) -> int | None:
        """The application index of layer ``layer``'s own adapters (shared blocks), or None."""
        block = self._blocks.get(layer)
        return block[1] if block is not None and block[2] else None

    def key_layer(self, layer: int) -> int:
        """The layer whose key projection (and input) gives layer ``layer``'s keys: itself, unless shared."""
        return self._sources.get(layer, self.tensor_layer(layer))

    @property
    def head_dims(self) -> tuple[int, ...]:
        """The distinct head dimensions of the stack's attention layers, ascending."""
        return tuple(sorted({self.layer_head_dim(i) for i in self.attention_layers}))

    @property
    def attention_layers(self) -> tuple[int, ...]:
        """The model's layer indices with softmax attention (every layer but in hybrid models)."""
        return tuple(range(self.n_layers)) if self.layers is None else self.layers

    def has_layer(self, layer: int) -> bool:
        """Whether the model's layer ``layer`` has attention of this stack."""
        return 0 <= layer < self.n_layers and (self.layers is None or layer in self.layers)

    def layer_positional(self, layer: int) -> str:
        """How layer ``layer`` sees positions: the stack's kind, or ``none`` for a NoPE layer."""
        if self.positional == "rope" and self.rope_layers is not None and layer not in self.rope_layers:
            return "none"
        return self.positional

    @property
    def positional(self) -> str:
        return self.layout.positional

    @property
    def qk_norm(self) -> bool:
        """Whether queries and keys are normalised after projection (qk-norm or latent norms)."""
        return self.layout.qk_norm is not None or self.layout.latent is not None

    @property
    def kv_head(self) -> np.ndarray:
        """Key head used by each query head: h // (n_heads / n_kv_heads) (grouped-query attention)."""
        return np.arange(self.n_heads) // (self.n_heads // self.n_kv_heads)


# Boolean config.json keys that change a layout (see the ``adjust`` functions).
_FLAGS = ("layer_norm_elementwise_affine", "do_layer_norm_before")


# Sizes in config.json beyond this are no real model's: refused before anything is sized by them.
MAX_CONFIG_SIZE = 1 << 20


def _config_int(config: Mapping[str, Any], keys: tuple[str, ...], model_type: str, source: str) -> int:
    """The first of ``keys`` present in the config, checked to be a positive integer of sane size."""
    for key in keys:
        value = get_int(config, key, source, minimum=1, maximum=MAX_CONFIG_SIZE)
        if value is not None:
            return value
    also = f" (or {', '.join(repr(k) for k in keys[1:])})" if len(keys) > 1 else ""
    raise QKEnergyError(f"{source} has no {keys[0]!r}{also}, needed for a {model_type} model")


# The parameters in backquotes: the command line shows its flags in their place (cli.output.flag_message).
_OVERRIDES = "pass `model_type` TYPE to read it as a supported type, or `layout` FILE.toml to describe it"


def _supported(asked: str | None = None) -> str:
    """The supported model types for a message: how many, and the nearest to the one asked for."""
    import difflib

    types = supported_model_types()
    text = f"{len(types)} types are supported (qkenergy layouts lists them)"
    nearest = difflib.get_close_matches(asked, types, n=5, cutoff=0.6) if asked else []
    return text + (f"; the nearest: {', '.join(nearest)}" if nearest else "")


def family_of(
    config: Mapping[str, Any],
    source: str = "config.json",
    *,
    model_type: str | None = None,
    layout: Layout | Family | None = None,
) -> tuple[str, Family]:
    """The ``model_type`` of a config.json dict and its :class:`Family`.

    ``model_type`` reads the checkpoint as that supported type whatever its
    config says; ``layout`` (a Layout, e.g. from
    :func:`qkenergy.weights.layout_toml.load_layout`, or a whole Family) is used
    as given, for an architecture qkenergy does not ship.

    Parameters
    ----------
    config : mapping
        The parsed config.json.
    source : str
        The config file's name in error messages.
    model_type : str or None
        A supported type to read the checkpoint as; None for the config's own.
    layout : Layout or Family or None
        A layout (or family) used as given; None to look the type up.

    Returns
    -------
    (str, Family)
        The model type ("custom" for a given layout with no type) and its family.

    Raises
    ------
    QKEnergyError
        ``model_type`` is not supported, or the config's ``model_type`` is missing or not supported.
    """
    if model_type is not None:
        if model_type not in FAMILIES:
            raise ArgumentError(
                f"model_type {show_name(str(model_type), 60)} is not a supported type; "
                + _supported(str(model_type)),
                parameter="model_type",
            )
    else:
        model_type = get_str(config, "model_type", source)
    if layout is not None:
        family = layout if isinstance(layout, Family) else Family((layout,))
        return str(model_type or "custom"), family
    if model_type is None:
        raise QKEnergyError(f"{source} has no 'model_type' ({_OVERRIDES}); " + _supported())
    found = FAMILIES.get(str(model_type))
    if found is None:
        raise QKEnergyError(
            f"{source}: model_type {show_name(model_type)} is not supported ({_OVERRIDES}); "
            + _supported(str(model_type))
        )
    return str(model_type), found


def _config_path(config: Mapping[str, Any], key: str) -> Any:
    """The value at a dotted key (``a.b``: key b of the sub-dict a), None where absent."""
    value: Any = config
    for part in key.split("."):
        if not isinstance(value, Mapping):
            return None
        value = value.get(part)
    return value


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def pattern_layers(
    patterns: tuple[LayerPattern, ...], config: Mapping[str, Any], n_layers: int, source: str
) -> tuple[int, ...] | None:
    """The layers named by the first of ``patterns`` whose key the config has (None: none has)."""
    for pattern in patterns:
        value = _config_path(config, pattern.key)
        if value is None:
            continue
        what = f"{source}: {pattern.key!r}"
        if pattern.kind == "period":
            offset = _config_path(config, pattern.offset_key) if pattern.offset_key else 0
            if not (_is_int(value) and _is_int(offset) and value >= 1):
                raise QKEnergyError(
                    f"{what} and {pattern.offset_key!r} must be integers, the period positive"
                )
            return tuple(i for i in range(n_layers) if i % value == offset)
        if pattern.kind == "cycle":  # one period of layer types, repeated over the layers
            if not isinstance(value, list) or not value or len(value) > MAX_CONFIG_SIZE:
                raise QKEnergyError(f"{what} must list the types of one period of layers")
            return tuple(i for i in range(n_layers) if value[i % len(value)] in pattern.members)
        if pattern.kind == "indices":
            last = n_layers - 1 + pattern.base
            if not isinstance(value, list) or not all(
                _is_int(v) and pattern.base <= v <= last for v in value
            ):
                raise QKEnergyError(f"{what} must list layer indices from {pattern.base} to {last}")
            return tuple(sorted({v - pattern.base for v in value}))
        if not isinstance(value, list | str) or len(value) < n_layers:
            raise QKEnergyError(f"{what} must give one entry per layer ({n_layers} layers)")
        entries = list(value)[:n_layers]
        if pattern.kind == "first":  # one shared block: read once, at its first application
            return tuple(i for i, entry in enumerate(entries) if entry in pattern.members)[:1]
        if pattern.members:
            return tuple(i for i, entry in enumerate(entries) if entry in pattern.members)
        return tuple(i for i, entry in enumerate(entries) if entry)
    return None


def _per_layer_config(
    config: Mapping[str, Any], layout: Layout, n_layers: int, source: str
) -> dict[int, Mapping[str, Any]] | None:
    """transformers 5's ``per_layer_config`` (layer index, zero-padded text -> overrides), or None."""
    value = config.get("per_layer_config")
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise QKEnergyError(f"{source}: 'per_layer_config' must map layer indices to settings")
    out: dict[int, Mapping[str, Any]] = {}
    for key, overrides in value.items():
        text = str(key)
        if not (text.isdigit() and int(text) < n_layers and isinstance(overrides, Mapping)):
            raise QKEnergyError(
                f"{source}: 'per_layer_config' key {show_name(text, 20)} must be a layer index below "
                f"{n_layers} with a dict of settings"
            )
        fixed = [k for k in (*layout.heads_keys, *layout.hidden_keys) if k in overrides]
        if fixed:
            raise QKEnergyError(
                f"{source}: 'per_layer_config' sets {fixed[0]!r} for layer {int(text)}; per-layer "
                "query-head counts and widths are not supported"
            )
        out[int(text)] = overrides
    return out


def _layer_shapes(
    config: Mapping[str, Any],
    layout: Layout,
    mt: str,
    source: str,
    n_layers: int,
    n_heads: int,
    n_kv: int,
    head_dim: int,
) -> tuple[tuple[int, int, int], ...]:
    """(layer, key heads, head_dim) of each layer whose heads differ from the stack's."""
    per_layer = _per_layer_config(config, layout, n_layers, source)
    if per_layer is None and not layout.layer_shapes:
        return ()
    matched = [
        (shape, set(pattern_layers((shape.layers,), config, n_layers, source) or ()))
        for shape in layout.layer_shapes
    ]
    out = []
    for layer in range(n_layers):
        kv, dim = n_kv, head_dim
        shape = next((s for s, layers in matched if layer in layers), None)
        if per_layer is not None:
            overrides = per_layer.get(layer, {})
            where = f"{source} (per_layer_config {layer})"
            if layout.head_dim_key is not None and layout.head_dim_key in overrides:
                dim = _config_int(overrides, (layout.head_dim_key,), mt, where)
            if layout.kv_heads_key is not None and layout.kv_heads_key in overrides:
                kv = _config_int(overrides, (layout.kv_heads_key,), mt, where)
        elif shape is not None:
            if shape.head_dim_key is not None and config.get(shape.head_dim_key) is not None:
                dim = _config_int(config, (shape.head_dim_key,), mt, source)
            if shape.kv_heads_key is not None and config.get(shape.kv_heads_key) is not None:
                kv = _config_int(config, (shape.kv_heads_key,), mt, source)
        if shape is not None:
            kv *= shape.kv_heads_factor
        if kv > MAX_CONFIG_SIZE or n_heads % kv:
            raise QKEnergyError(
                f"{source}: layer {layer} has {kv} key heads, which do not divide "
                f"{layout.heads_keys[0]}={n_heads}"
            )
        if (kv, dim) != (n_kv, head_dim):
            out.append((layer, kv, dim))
    return tuple(out)


def _key_layers(
    config: Mapping[str, Any], layout: Layout, n_layers: int, source: str
) -> tuple[tuple[int, int], ...]:
    """(layer, source layer) of each layer that reuses an earlier layer's keys (KV sharing)."""
    sharing = layout.kv_sharing
    if sharing is None:
        return ()
    shared = get_int(config, sharing.count_key, source, minimum=0, maximum=MAX_CONFIG_SIZE) or 0
    if not shared:
        return ()
    types = config.get(sharing.types_key)
    first = n_layers - shared
    if first <= 0 or not isinstance(types, list) or len(types) < n_layers:
        raise QKEnergyError(
            f"{source}: {sharing.count_key}={shared} needs fewer shared layers than the {n_layers} "
            f"layers and {sharing.types_key!r} with one entry per layer"
        )
    if not all(isinstance(t, str) for t in types[:n_layers]):
        raise QKEnergyError(f"{source}: {sharing.types_key!r} must name one layer type per layer")
    last = {t: i for i, t in enumerate(types[:first])}  # the last layer of each type before the shared ones
    out = []
    for layer in range(first, n_layers):
        if types[layer] not in last:
            raise QKEnergyError(
                f"{source}: layer {layer} shares the keys of an earlier {show_name(str(types[layer]), 40)} "
                "layer, but there is none"
            )
        out.append((layer, last[types[layer]]))
    return tuple(out)


def _block_layers(
    config: Mapping[str, Any], layout: Layout, layers: tuple[int, ...] | None, source: str
) -> tuple[tuple[int, int, int, bool], ...]:
    """(layer, the block's first layer, application, adapted) of each layer applying a shared block."""
    blocks = layout.shared_blocks
    if blocks is None or not layers:
        return ()
    count = get_int(config, blocks.blocks_key, source, minimum=1, maximum=MAX_CONFIG_SIZE) or 1
    adapted = get_bool(config, blocks.adapter_key, source, default=False)
    return tuple((layer, layers[k % count], k, adapted) for k, layer in enumerate(layers))


def _stack_architecture(config: Mapping[str, Any], layout: Layout, mt: str, source: str) -> Architecture:
    if layout.config_section is not None and not (
        layout.section_optional and layout.config_section not in config
    ):
        section = config.get(layout.config_section)
        if not isinstance(section, Mapping):
            raise QKEnergyError(
                f"{source} has no {layout.config_section!r} section, needed for the {layout.stack} "
                f"stack of a {mt} model"
            )
        config = section
        source = f"{source} ({layout.config_section})"
    for flag in _FLAGS:  # read by the adjust functions: true, false or absent, nothing else
        get_bool(config, flag, source, default=True)
    if layout.adjust is not None:
        layout = layout.adjust(config, layout)
    n_heads = _config_int(config, layout.heads_keys, mt, source)
    hidden = _config_int(config, layout.hidden_keys, mt, source)
    # A layers key may hold one entry per layer (nemotron_h's layers_block_type): its length counts.
    listed = next((config[k] for k in layout.layers_keys if isinstance(config.get(k), list)), None)
    if listed is not None and not any(isinstance(config.get(k), int) for k in layout.layers_keys):
        n_layers = len(listed)
        if not 0 < n_layers <= MAX_CONFIG_SIZE:
            raise QKEnergyError(f"{source}: {layout.layers_keys[-1]!r} lists no layers")
    else:
        n_layers = _config_int(config, layout.layers_keys, mt, source)
    n_kv = n_heads
    kv_key = layout.kv_heads_key
    if layout.kv_heads is not None:
        n_kv, kv_key = layout.kv_heads, "key heads"
    elif kv_key is not None and config.get(kv_key) is not None:
        n_kv = _config_int(config, (kv_key,), mt, source)
    if n_heads % n_kv:
        raise QKEnergyError(
            f"{source}: {layout.heads_keys[0]}={n_heads} is not a multiple of {kv_key}={n_kv}"
        )
    latent = None
    if layout.latent is not None:
        lat = layout.latent
        keys = (lat.nope_key, lat.rope_key, lat.value_key, lat.rank_key)
        d_nope, d_rope, d_value, rank = (_config_int(config, (k,), mt, source) for k in keys)
        latent = (d_nope, d_rope, d_value, rank)
        head_dim = d_nope + d_rope
        n_kv = n_heads  # every head has its own key (its own up-projection of the latent)
    elif layout.head_dim_key is not None and config.get(layout.head_dim_key) is not None:
        head_dim = _config_int(config, (layout.head_dim_key,), mt, source)
    else:
        if hidden % n_heads:
            raise QKEnergyError(
                f"{source}: {layout.hidden_keys[0]}={hidden} is not a multiple of "
                f"{layout.heads_keys[0]}={n_heads}"
            )
        head_dim = hidden // n_heads
    layers = pattern_layers(layout.attention_layers, config, n_layers, source)
    if layers is not None and not layers:
        raise QKEnergyError(f"{source}: this {mt} model has no layer with softmax attention")
    rope_layers = pattern_layers(layout.rope_layers, config, n_layers, source)
    shapes = (
        ()
        if latent is not None
        else _layer_shapes(config, layout, mt, source, n_layers, n_heads, n_kv, head_dim)
    )
    return Architecture(
        mt,
        n_layers,
        n_heads,
        n_kv,
        head_dim,
        hidden,
        layout,
        latent=latent,
        layers=layers,
        rope_layers=rope_layers,
        layer_shapes=shapes,
        key_layers=_key_layers(config, layout, n_layers, source),
        block_layers=_block_layers(config, layout, layers, source),
    )


def _output_norm(arch: Architecture) -> str | None:
    """The norm on a stack's output (relative name): its final norm, or a post-norm stack's last."""
    lay = arch.layout
    if lay.final_norm is not None:
        return lay.final_norm
    if lay.post_norm and lay.norm is not None:
        return lay.norm.format(i=arch.n_layers - 1)
    return None


def architectures(
    config: Mapping[str, Any],
    source: str = "config.json",
    *,
    model_type: str | None = None,
    layout: Layout | Family | None = None,
) -> tuple[Architecture, ...]:
    """One :class:`Architecture` per attention stack of the model a config.json dict describes.

    ``model_type`` and ``layout`` override the lookup of the config's ``model_type``
    (see :func:`family_of`). ``source`` names the config file in error messages.

    Parameters
    ----------
    config : mapping
        The parsed config.json.
    source : str
        The config file's name in error messages.
    model_type : str or None
        Read the checkpoint as this supported type (see :func:`family_of`).
    layout : Layout or Family or None
        A layout used as given (see :func:`family_of`).

    Returns
    -------
    tuple of Architecture
        In the family's stack order; a stack whose config section is null is left out while
        another remains.

    Raises
    ------
    QKEnergyError
        An unsupported or missing ``model_type``, or a size missing from or invalid in the config.
    """
    mt, family = family_of(config, source, model_type=model_type, layout=layout)
    # A tower whose config section is null (transformers writes "vision_config": null for a
    # multimodal model built without it) is absent, as long as another stack remains.
    stacks = [
        lay
        for lay in family.stacks
        if not (
            lay.config_section is not None
            and lay.config_section in config
            and config[lay.config_section] is None
        )
    ] or list(family.stacks)
    archs = [_stack_architecture(config, layout, mt, source) for layout in stacks]
    by_name = {a.stack: a for a in archs}
    for k, arch in enumerate(archs):
        if arch.layout.key_stack is not None:
            archs[k] = dataclasses.replace(arch, key_norm=_output_norm(by_name[arch.layout.key_stack]))
    return tuple(archs)


def architecture(
    config: Mapping[str, Any],
    source: str = "config.json",
    *,
    stack: str | None = None,
    model_type: str | None = None,
    layout: Layout | Family | None = None,
) -> Architecture:
    """Sizes and layout of one attention stack (``stack``: its name; None for single-stack models).

    ``source`` names the config file in error messages (e.g. its full path);
    ``model_type`` and ``layout`` as for :func:`family_of`.

    Parameters
    ----------
    config : mapping
        The parsed config.json.
    source : str
        The config file's name in error messages.
    stack : str or None
        The stack's name ("encoder", "decoder", ...); None for a single-stack model.
    model_type : str or None
        Read the checkpoint as this supported type (see :func:`family_of`).
    layout : Layout or Family or None
        A layout used as given (see :func:`family_of`).

    Returns
    -------
    Architecture

    Raises
    ------
    QKEnergyError
        The model has no such stack, has several and none was named, or as :func:`architectures`.
    """
    archs = architectures(config, source, model_type=model_type, layout=layout)
    if stack is None and len(archs) == 1:
        return archs[0]
    for arch in archs:
        if arch.stack == stack:
            return arch
    names = ", ".join(repr(a.stack) for a in archs)
    raise QKEnergyError(
        f"{source}: a {archs[0].model_type} model has the attention stacks {names}; "
        + ("name one" if stack is None else f"not {stack!r}")
    )

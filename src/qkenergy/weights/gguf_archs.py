"""GGUF architectures mapped declaratively onto qkenergy's layouts: a config dict and Hugging Face tensor names.

A GGUF file carries no config.json: its metadata says the architecture
(``general.architecture``, llama.cpp's name) and the sizes under that name
(``llama.block_count``, ``llama.attention.head_count``, ...). Each supported
architecture is one :class:`GGUFArchitecture` row of :data:`GGUF_ARCHITECTURES`:
the ``model_type`` whose layout reads it, and what llama.cpp's converter did to
the weights that the layout must know:

- ``permuted``: for llama-type models the converter permutes each head's query
  and key rows so that llama.cpp can rotate adjacent pairs: Hugging Face's
  half-split rotary pairs (k, k + n/2) become rows (2k, 2k + 1). The same
  permutation acts on a head's query and key rows, so the form at offset 0,
  W_K^T W_Q, is unchanged; at any other offset the rotation must pair the
  permuted rows the same way, and the config says so (``rope_interleave``)
  rather than the rows being moved back.
- ``gains_hold_one``: gemma's RMSNorm multiplies by (1 + w); the converter
  stores 1 + w, so the layout's norm and qk-norm offsets are 0 for these files.
- ``rope_interleave``: DeepSeek's latent attention rotates adjacent pairs as stored.
- ``swa_pattern``: gemma3's layers are sliding-window attention but every
  ``swa_pattern``-th one (llama.cpp's fixed pattern), rotated with theta
  ``swa_theta``; the full-attention layers use the file's theta and scaling.

The tensors attention reads are renamed to the names the layouts use
(:data:`BLOCK_TENSORS`: ``blk.{i}.attn_q.weight`` is
``model.layers.{i}.self_attn.q_proj.weight``); every other tensor keeps its
GGUF name. :func:`open_gguf` puts the two together: a GGUF file (or a split
model's parts) read through :mod:`qkenergy.weights.gguf_io` as a
:class:`~qkenergy.weights.source.ModelSource` with this module's config and layout.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from qkenergy.base.display import show_name, show_path
from qkenergy.base.errors import QKEnergyError
from qkenergy.weights.families import FAMILIES
from qkenergy.weights.gguf_io import GGUFFile, GGUFTensors, read_header, split_files
from qkenergy.weights.layout import Layout
from qkenergy.weights.safetensors_io import Fetch
from qkenergy.weights.source import ModelSource

__all__ = [
    "BLOCK_TENSORS",
    "GGUF_ARCHITECTURES",
    "GGUFArchitecture",
    "gguf_model",
    "open_gguf",
    "tensor_names",
]


@dataclass(frozen=True)
class GGUFArchitecture:
    """How one llama.cpp architecture maps onto a qkenergy family (see the module docstring).

    Parameters
    ----------
    model_type : str
        The supported ``model_type`` whose layout reads the architecture.
    permuted : bool
        The converter permuted each head's query and key rows for adjacent-pair rotation.
    gains_hold_one : bool
        The norm gains are stored as 1 + w, so the layout's norm offsets are 0.
    rope_interleave : bool
        The rotation pairs adjacent rows as stored.
    swa_pattern : int or None
        Every ``swa_pattern``-th layer has full attention, the others a sliding window; None: no pattern.
    swa_theta : float
        The RoPE base of the sliding-window layers.
    """

    model_type: str
    permuted: bool = False
    gains_hold_one: bool = False
    rope_interleave: bool = False
    swa_pattern: int | None = None
    swa_theta: float = 10000.0


GGUF_ARCHITECTURES: dict[str, GGUFArchitecture] = {
    # llama.cpp writes Llama, Mistral, Mixtral, TinyLlama, SmolLM ... as "llama".
    "llama": GGUFArchitecture("llama", permuted=True),
    "mistral": GGUFArchitecture("mistral", permuted=True),
    "qwen2": GGUFArchitecture("qwen2"),
    "qwen3": GGUFArchitecture("qwen3"),
    "qwen3moe": GGUFArchitecture("qwen3_moe"),
    "gemma": GGUFArchitecture("gemma", gains_hold_one=True),
    "gemma2": GGUFArchitecture("gemma2", gains_hold_one=True),
    "gemma3": GGUFArchitecture("gemma3_text", gains_hold_one=True, swa_pattern=6),
    "phi3": GGUFArchitecture("phi3"),
    "starcoder2": GGUFArchitecture("starcoder2"),
    "olmo2": GGUFArchitecture("olmo2"),
    "deepseek2": GGUFArchitecture("deepseek_v3", rope_interleave=True),
}

# The attention tensors of block i: GGUF name -> Hugging Face name (".weight" / ".bias" follow both).
BLOCK_TENSORS: dict[str, str] = {
    "attn_norm": "input_layernorm",
    "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj",
    "attn_qkv": "self_attn.qkv_proj",
    "attn_q_norm": "self_attn.q_norm",
    "attn_k_norm": "self_attn.k_norm",
    "attn_q_a": "self_attn.q_a_proj",
    "attn_q_a_norm": "self_attn.q_a_layernorm",
    "attn_q_b": "self_attn.q_b_proj",
    "attn_kv_a_mqa": "self_attn.kv_a_proj_with_mqa",
    "attn_kv_a_norm": "self_attn.kv_a_layernorm",
    "attn_kv_b": "self_attn.kv_b_proj",
}
# The tensors whose type is the form's quantisation (the settings' attention_types).
_QK_TENSORS = [
    [name, "weight"]
    for name in ("attn_q", "attn_k", "attn_qkv", "attn_q_a", "attn_q_b", "attn_kv_a_mqa", "attn_kv_b")
]
_TOP_TENSORS = {"token_embd": "model.embed_tokens", "output_norm": "model.norm", "output": "lm_head"}

# GGUF key (after "<arch>.") -> config.json key, for every architecture.
_CONFIG_KEYS: dict[str, str] = {
    "block_count": "num_hidden_layers",
    "embedding_length": "hidden_size",
    "attention.head_count": "num_attention_heads",
    "attention.head_count_kv": "num_key_value_heads",
    "attention.key_length": "head_dim",
    "context_length": "max_position_embeddings",
    "rope.freq_base": "rope_theta",
}
# Latent attention (deepseek2) sizes.
_LATENT_KEYS: dict[str, str] = {
    "attention.q_lora_rank": "q_lora_rank",
    "attention.kv_lora_rank": "kv_lora_rank",
    "rope.dimension_count": "qk_rope_head_dim",
    "attention.value_length": "v_head_dim",
}


def tensor_names(gguf_names: list[str]) -> dict[str, str]:
    """GGUF tensor name -> the name a layout reads, for the tensors :data:`BLOCK_TENSORS` covers.

    Parameters
    ----------
    gguf_names : list of str
        The tensor names of the file(s).

    Returns
    -------
    dict of str to str
        Only the renamed tensors (block tensors of ``BLOCK_TENSORS`` and the top-level ones).
    """
    out: dict[str, str] = {}
    for name in gguf_names:
        parts = name.split(".")
        if len(parts) == 4 and parts[0] == "blk" and parts[1].isdigit() and parts[2] in BLOCK_TENSORS:
            out[name] = f"model.layers.{int(parts[1])}.{BLOCK_TENSORS[parts[2]]}.{parts[3]}"
        elif len(parts) == 2 and parts[0] in _TOP_TENSORS:
            out[name] = f"{_TOP_TENSORS[parts[0]]}.{parts[1]}"
    return out


def _number(fields: Mapping[str, Any], key: str, where: str, *, integer: bool) -> Any:
    value = fields.get(key)
    if value is None:
        return None
    if isinstance(value, tuple) and value and all(v == value[0] for v in value):
        value = value[0]  # a per-layer array with one value for every layer
    kinds = (int,) if integer else (int, float)
    if isinstance(value, bool) or not isinstance(value, kinds):
        expected = "an integer" if integer else "a number"
        if isinstance(value, tuple):
            expected += " (a different value per layer is not supported)"
        raise QKEnergyError(f"{where}: key {show_name(key)} is {value!r:.60}; expected {expected}")
    return value


def _rope_config(
    fields: Mapping[str, Any], arch: str, spec: GGUFArchitecture, config: dict[str, Any], where: str
) -> None:
    """The rotary settings of the file, written into ``config`` as transformers' config.json keys."""
    kind = fields.get(f"{arch}.rope.scaling.type")
    factor = _number(fields, f"{arch}.rope.scaling.factor", where, integer=False)
    original = _number(fields, f"{arch}.rope.scaling.original_context_length", where, integer=True)
    attention = _number(fields, f"{arch}.rope.scaling.attn_factor", where, integer=False)
    scaling: dict[str, Any] = {}
    if kind in ("linear", "yarn") and factor not in (None, 0.0, 1.0):
        scaling = {"rope_type": kind, "factor": float(factor)}
        if kind == "yarn":
            if original is not None:
                scaling["original_max_position_embeddings"] = original
            for key, name in (("yarn_beta_fast", "beta_fast"), ("yarn_beta_slow", "beta_slow")):
                beta = _number(fields, f"{arch}.rope.scaling.{key}", where, integer=False)
                if beta is not None:
                    scaling[name] = float(beta)
            log_multiplier = _number(fields, f"{arch}.rope.scaling.yarn_log_multiplier", where, integer=False)
            if log_multiplier:  # the converter writes 0.1 * mscale_all_dim (DeepSeek)
                scaling["mscale"] = scaling["mscale_all_dim"] = float(log_multiplier) / 0.1
            elif attention is not None:
                scaling["attention_factor"] = float(attention)
    elif kind not in (None, "none", "linear", "yarn"):
        scaling = {"rope_type": f"{kind} (GGUF rope.scaling.type)"}
    if scaling:
        config["rope_scaling"] = scaling
    if spec.permuted or spec.rope_interleave:
        config["rope_interleave"] = True
    if spec.swa_pattern is not None:
        layers = int(config.get("num_hidden_layers") or 0)
        # Recent files state the pattern (every k-th layer full, or one flag per layer: true = sliding).
        pattern = fields.get(f"{arch}.attention.sliding_window_pattern", spec.swa_pattern)
        if isinstance(pattern, tuple) and len(pattern) >= layers:
            sliding = [bool(flag) for flag in pattern[:layers]]
        elif isinstance(pattern, int) and not isinstance(pattern, bool) and pattern > 0:
            sliding = [(i + 1) % pattern != 0 for i in range(layers)]
        else:
            raise QKEnergyError(
                f"{where}: key {show_name(f'{arch}.attention.sliding_window_pattern')} is {pattern!r:.60}; "
                f"expected a positive integer or one flag per layer ({layers})"
            )
        config["layer_types"] = ["sliding_attention" if flag else "full_attention" for flag in sliding]
        theta = _number(fields, f"{arch}.rope.freq_base_swa", where, integer=False)
        config["rope_local_base_freq"] = spec.swa_theta if theta is None else float(theta)


def gguf_config(fields: Mapping[str, Any], tensor_names_present: set[str], where: str) -> dict[str, Any]:
    """The config.json equivalent of a GGUF file's metadata: the sizes and rotary settings a layout reads."""
    arch = fields.get("general.architecture")
    if not isinstance(arch, str):
        raise QKEnergyError(f"{where}: key 'general.architecture' is missing or not text")
    spec = GGUF_ARCHITECTURES.get(arch)
    if spec is None:
        raise QKEnergyError(
            f"{where}: GGUF architecture {show_name(arch)} is not supported; supported: "
            + ", ".join(sorted(GGUF_ARCHITECTURES))
        )
    config: dict[str, Any] = {"model_type": spec.model_type, "gguf_architecture": arch}
    for key, name in _CONFIG_KEYS.items():
        value = _number(fields, f"{arch}.{key}", where, integer=key != "rope.freq_base")
        if value is not None:
            config[name] = value
    for key in ("block_count", "embedding_length", "attention.head_count"):
        if f"{arch}.{key}" not in fields:
            raise QKEnergyError(
                f"{where}: key {show_name(f'{arch}.{key}')} is missing (a {arch} model needs it)"
            )
    rope_dims = _number(fields, f"{arch}.rope.dimension_count", where, integer=True)
    if spec.model_type == "deepseek_v3":
        if (
            "blk.0.attn_k_b.weight" in tensor_names_present
            and "blk.0.attn_kv_b.weight" not in tensor_names_present
        ):
            raise QKEnergyError(
                f"{where}: kv_b is stored split into attn_k_b and attn_v_b (llama.cpp's form for its MLA "
                "kernels), which is not read; a file with attn_kv_b is"
            )
        config.pop("head_dim", None)
        for key, name in _LATENT_KEYS.items():
            value = _number(fields, f"{arch}.{key}", where, integer=True)
            if value is not None:
                config[name] = value
        # Files that split kv_b into k_b and v_b state the per-head sizes under key_length_mla.
        key_length = _number(fields, f"{arch}.attention.key_length_mla", where, integer=True)
        key_length = key_length or _number(fields, f"{arch}.attention.key_length", where, integer=True)
        value_length = _number(fields, f"{arch}.attention.value_length_mla", where, integer=True)
        if value_length:
            config["v_head_dim"] = value_length
        if key_length and rope_dims:
            config["qk_nope_head_dim"] = key_length - rope_dims
    else:
        head_dim = config.get("head_dim") or config["hidden_size"] // max(1, config["num_attention_heads"])
        if rope_dims and rope_dims < head_dim:
            config["partial_rotary_factor"] = rope_dims / head_dim
    _rope_config(fields, arch, spec, config, where)
    if "rope_freqs.weight" in tensor_names_present or "rope_factors_long.weight" in tensor_names_present:
        # llama3's and longrope's frequency factors are stored as a tensor, not as settings:
        # --rope-offsets refuses this kind by name (the form at offset 0 needs no frequencies).
        config["rope_scaling"] = {"rope_type": "per-frequency factors in a GGUF tensor"}
    return config


def gguf_layout(config: Mapping[str, Any]) -> Layout | None:
    """The layout a GGUF file needs when it is not its family's own (gemma's stored 1 + w gains), else None."""
    spec = GGUF_ARCHITECTURES[str(config["gguf_architecture"])]
    if not spec.gains_hold_one:
        return None
    layout = FAMILIES[spec.model_type].stacks[0]
    qk = layout.qk_norm
    return dataclasses.replace(
        layout, norm_offset=0.0, qk_norm=None if qk is None else dataclasses.replace(qk, offset=0.0)
    )


def _quantization(types: list[str]) -> dict[str, Any] | None:
    """The settings' ``quantization`` of a GGUF file from the ggml types of its query and key weights."""
    from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType

    blocks = [t for t in types if t not in ("F32", "F16", "BF16", "F64")]
    if not blocks:
        return None
    sizes = [GGML_QUANT_SIZES[GGMLQuantizationType[t]] for t in blocks]
    return {
        "method": "gguf",
        "format": "/".join(blocks),
        "bits": [round(8 * nbytes / block, 4) for block, nbytes in sizes],  # bits per weight, scales included
        "block_size": [block for block, _ in sizes],
    }


def gguf_model(
    path: Path, fetcher: Callable[[Path], Fetch | None] | None = None
) -> tuple[list[Any], dict[str, Any], Layout | None, dict[str, Any]]:
    """(GGUFFile of each part, config dict, layout or None, notes for the settings) of a GGUF file.

    Parameters
    ----------
    path : pathlib.Path
        The GGUF file (any part of a split model).
    fetcher : callable or None, optional
        Each part's ``fetch`` (see :class:`~qkenergy.weights.gguf_io.GGUFFile`): the parts are
        remote files' mirrors (:mod:`qkenergy.weights.hub`).

    Returns
    -------
    files : list of GGUFFile
        One per part, in order, reading tensors under the layouts' names.
    config : dict
        The config.json equivalent built from the metadata.
    layout : Layout or None
        The layout the file needs, or None where the family's own applies.
    notes : dict
        ``gguf`` (version, architecture, tensor types, parts, ...) and ``quantization``.

    Raises
    ------
    QKEnergyError
        The file is not a readable GGUF file, a part is missing, or its architecture or
        metadata is not supported.
    """
    from collections import Counter

    def fetch(part: Path) -> Fetch | None:
        return None if fetcher is None else fetcher(part)

    header = read_header(path, fetch(path))
    paths = split_files(path, header)
    headers = [header if p == path else read_header(p, fetch(p)) for p in paths]
    header = headers[0]
    where = show_path(paths[0])
    tensors = [t for h in headers for t in h.tensors]
    present = {t.gguf_name for t in tensors}
    config = gguf_config(header.fields, present, where)
    names = tensor_names([t.gguf_name for t in tensors])
    weights = [GGUFFile(p, h, names, fetch(p)) for p, h in zip(paths, headers, strict=True)]
    attention = sorted({t.dtype for t in tensors if t.gguf_name.split(".")[2:] in _QK_TENSORS})
    notes = {
        "gguf": {
            "version": header.version,
            "architecture": config["gguf_architecture"],
            "name": header.fields.get("general.name"),
            "file_type": header.fields.get("general.file_type"),
            "attention_types": attention,
            "tensor_types": dict(sorted(Counter(t.dtype for t in tensors).items())),
            "parts": len(paths),
            "qk_rows_permuted": GGUF_ARCHITECTURES[config["gguf_architecture"]].permuted,
        },
        # what a quantised safetensors checkpoint records under the same key; None: plain Q and K
        "quantization": _quantization(attention),
    }
    return weights, config, gguf_layout(config), notes


def open_gguf(
    path: Path, name: str, origin: str, fetcher: Callable[[Path], Fetch | None] | None = None
) -> ModelSource:
    """A GGUF file (or every part of a split one) as a :class:`~qkenergy.weights.source.ModelSource`.

    Parameters
    ----------
    path : pathlib.Path
        The GGUF file (any part of a split model).
    name : str
        The model's name as given.
    origin : str
        Where it comes from ("file", "directory", "embedded", ...).
    fetcher : callable or None, optional
        As for :func:`gguf_model`.

    Returns
    -------
    ModelSource

    Raises
    ------
    QKEnergyError
        As :func:`gguf_model`.
    """
    files, config, layout, notes = gguf_model(path, fetcher)
    label = f"{show_path(files[0].path)} (GGUF metadata)"
    return ModelSource(name, config, GGUFTensors(files), path.parent, origin, label, layout, notes)

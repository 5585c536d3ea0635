"""Hub repositories laid out with the real shapes and headers of three large checkpoints, as sparse files.

For the hub-reading benchmark (``benchmarks/bench_hub.py``): a folder per model holding
``config.json``, ``model.safetensors.index.json`` and every shard under its real name, each shard with
a real safetensors header (8-byte length, JSON of dtype, shape and data_offsets, padded with spaces to
8 bytes as the safetensors library writes it) over a data section that is a hole (``os.truncate``):
it reads as zeros and takes no disk space. Only the tensors that ``qkenergy analyze --layers L
--fold-norm`` reads for the *filled* layers hold data: seeded random values of their dtype (bf16:
normal x 0.02; norm gains 1 + 0.1 x normal; FP8 e4m3: normal x 0.02 quantised per 128 x 128 block
with ``weight_scale_inv`` = the block's largest magnitude / 448, as DeepSeek's own conversion does),
so the analysis of those layers gives finite heads. Analysing any other layer reads zeros.

The three models (configs written from the published config.json values of the model cards
meta-llama/Llama-3.1-405B, Qwen/Qwen3-235B-A22B and deepseek-ai/DeepSeek-V3, not downloaded):

- **Llama-3.1-405B**, bf16: 126 layers, hidden 16384, 128 heads, 8 KV heads (head_dim 128 =
  hidden / heads; the published config has no head_dim key), intermediate 53248, vocab 128256,
  rope_scaling llama3, untied embeddings; 191 shards ``model-00001-of-00191.safetensors``.
- **Qwen3-235B-A22B**, bf16: 94 layers, hidden 4096, 64 heads, 4 KV heads, head_dim 128, q_norm and
  k_norm, 128 experts of moe_intermediate 1536 (router ``mlp.gate``), vocab 151936; 118 shards.
- **DeepSeek-V3**, FP8 e4m3 with ``weight_scale_inv`` (F32) per 128 x 128 block on every linear
  layer of attention and MLP (not on the router, the embeddings, the heads or the MTP layer's
  ``eh_proj``, which are bf16, nor ``e_score_correction_bias``, F32): 61 layers plus the
  multi-token-prediction layer 61 the repository holds, hidden 7168, 128 heads, MLA (q_lora_rank
  1536, kv_lora_rank 512, qk_nope 128, qk_rope 64, v_head 128), 3 dense layers (intermediate 18432)
  then MoE (256 routed experts of 2048, 1 shared expert, router with e_score_correction_bias),
  vocab 129280; 163 shards ``model-00001-of-000163.safetensors`` (six digits, as that repository).

Tensors are listed in each model's state-dict order (embeddings, then layer by layer, then the final
norm and the head) and cut into shards as transformers' ``save_pretrained`` does (a new shard when the
next tensor would pass the size limit), with the limit chosen so that there are exactly the real
number of shards. Within a shard the data is ordered as the safetensors library orders it (wider
dtypes first, then by name), and the header lists the tensors in that order after
``{"__metadata__": {"format": "pt"}}``. Other repository files (tokenizer, generation config, the
license) are left out: megabytes against hundreds of gigabytes.

**The floor** of a reading (:func:`floor`): the least a reader must fetch for ``--layers L``:
``config.json`` and the index whole (the reader needs the architecture and the shard of every tensor
name), the header (8 bytes + its length) of every shard that holds a tensor read, and the data of every
tensor read (whole tensors: W_Q, W_K or their MLA parts, their FP8 scales, q_norm/k_norm and the MLA
latent norms, and ``input_layernorm`` with ``--fold-norm``). Headers of shards holding nothing read
are not part of it (``Floor.all_headers`` gives them, for a reader that reads every header).

    python benchmarks/hub_shapes.py OUT [--models llama,qwen3,deepseek] [--filled 0,1] [--floor-layers 0,1]

builds the repositories under OUT (cached: a model whose marker ``OUT/<folder>.built.json`` matches is
not written again) and prints, per model, the repository size, the disk it takes and the floor.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import sys
import zlib
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

__all__ = [
    "MODELS",
    "Floor",
    "ModelShape",
    "RepoPlan",
    "Shard",
    "StoredTensor",
    "build",
    "floor",
    "plan",
    "repo_size",
]

# Bump when the bytes written change, so that cached repositories are rebuilt.
FORMAT_VERSION = 1
INDEX_NAME = "model.safetensors.index.json"
CONFIG_NAME = "config.json"
BLOCK = 128  # DeepSeek-V3's weight_block_size
E4M3_MAX = 448.0  # the largest finite float8 e4m3fn value
_ITEMSIZE = {"BF16": 2, "F8_E4M3": 1, "F32": 4}
# The safetensors library's dtype order (wider later); data is laid out widest first.
_DTYPE_RANK = {"F8_E4M3": 4, "BF16": 8, "F32": 11}
_CHUNK = 1 << 23  # values generated at a time when a large bf16 tensor is filled


@dataclass(frozen=True)
class StoredTensor:
    """One tensor of a checkpoint: name, safetensors dtype code and shape.

    Parameters
    ----------
    name : str
        Its name in the checkpoint.
    dtype : str
        BF16, F8_E4M3 or F32.
    shape : tuple of int
        In numpy order.
    """

    name: str
    dtype: str
    shape: tuple[int, ...]

    @property
    def nbytes(self) -> int:
        """Bytes of its data."""
        return _ITEMSIZE[self.dtype] * math.prod(self.shape)


@dataclass(frozen=True)
class Shard:
    """One shard file as written: its name, header bytes and tensors with their data ranges.

    Parameters
    ----------
    name : str
        The file name.
    header : bytes
        The JSON header, padded with spaces to a multiple of 8 (without the 8-byte length).
    ranges : dict
        Tensor name -> (begin, end), offsets in the data section.
    """

    name: str
    header: bytes
    ranges: dict[str, tuple[int, int]]

    @property
    def header_bytes(self) -> int:
        """The 8-byte length and the header: what a reader fetches before any tensor."""
        return 8 + len(self.header)

    @property
    def size(self) -> int:
        """The file's size."""
        return self.header_bytes + max((end for _, end in self.ranges.values()), default=0)


@dataclass(frozen=True)
class ModelShape:
    """A model's published configuration and how its checkpoint is stored.

    Parameters
    ----------
    key : str
        Short name (llama, qwen3, deepseek).
    repo_id : str
        Its Hugging Face Hub id.
    config : dict
        config.json as published (``num_hidden_layers`` is replaced when fewer layers are asked for).
    shards : int
        Shards of the real repository.
    shard_digits : int
        Digits of the shard count in the file names (5, or 6 for DeepSeek-V3's ``of-000163``).
    tensors : callable
        config -> the tensors in state-dict order.
    attention : callable
        (config, layer, fold_norm) -> names of the tensors ``qkenergy analyze`` reads for that layer.
    """

    key: str
    repo_id: str
    config: dict[str, Any]
    shards: int
    shard_digits: int
    tensors: Callable[[dict[str, Any]], list[StoredTensor]]
    attention: Callable[[dict[str, Any], int, bool], list[str]]

    @property
    def folder_name(self) -> str:
        """The repository's folder name under a build root (``org--name``)."""
        return self.repo_id.replace("/", "--")


# ----------------------------------------------------------------------------------------- the models


def _bf16(name: str, *shape: int) -> StoredTensor:
    return StoredTensor(name, "BF16", shape)


def _fp8(name: str, rows: int, cols: int) -> list[StoredTensor]:
    """An FP8 linear weight and its block scales (one F32 per 128 x 128 block, edge blocks partial)."""
    scales = (-(-rows // BLOCK), -(-cols // BLOCK))
    return [
        StoredTensor(f"{name}.weight", "F8_E4M3", (rows, cols)),
        StoredTensor(f"{name}.weight_scale_inv", "F32", scales),
    ]


LLAMA_405B: dict[str, Any] = {
    "architectures": ["LlamaForCausalLM"],
    "attention_bias": False,
    "attention_dropout": 0.0,
    "bos_token_id": 128000,
    "eos_token_id": 128001,
    "hidden_act": "silu",
    "hidden_size": 16384,
    "initializer_range": 0.02,
    "intermediate_size": 53248,
    "max_position_embeddings": 131072,
    "mlp_bias": False,
    "model_type": "llama",
    "num_attention_heads": 128,
    "num_hidden_layers": 126,
    "num_key_value_heads": 8,
    "pretraining_tp": 1,
    "rms_norm_eps": 1e-05,
    "rope_scaling": {
        "factor": 8.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_max_position_embeddings": 8192,
        "rope_type": "llama3",
    },
    "rope_theta": 500000.0,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
    "transformers_version": "4.43.0.dev0",
    "use_cache": True,
    "vocab_size": 128256,
}

QWEN3_235B: dict[str, Any] = {
    "architectures": ["Qwen3MoeForCausalLM"],
    "attention_bias": False,
    "attention_dropout": 0.0,
    "bos_token_id": 151643,
    "decoder_sparse_step": 1,
    "eos_token_id": 151645,
    "head_dim": 128,
    "hidden_act": "silu",
    "hidden_size": 4096,
    "initializer_range": 0.02,
    "intermediate_size": 12288,
    "max_position_embeddings": 40960,
    "max_window_layers": 94,
    "mlp_only_layers": [],
    "model_type": "qwen3_moe",
    "moe_intermediate_size": 1536,
    "norm_topk_prob": True,
    "num_attention_heads": 64,
    "num_experts": 128,
    "num_experts_per_tok": 8,
    "num_hidden_layers": 94,
    "num_key_value_heads": 4,
    "output_router_logits": False,
    "rms_norm_eps": 1e-06,
    "rope_scaling": None,
    "rope_theta": 1000000.0,
    "router_aux_loss_coef": 0.001,
    "sliding_window": None,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
    "transformers_version": "4.51.0",
    "use_cache": True,
    "use_sliding_window": False,
    "vocab_size": 151936,
}

DEEPSEEK_V3: dict[str, Any] = {
    "architectures": ["DeepseekV3ForCausalLM"],
    "attention_bias": False,
    "attention_dropout": 0.0,
    "auto_map": {
        "AutoConfig": "configuration_deepseek.DeepseekV3Config",
        "AutoModel": "modeling_deepseek.DeepseekV3Model",
        "AutoModelForCausalLM": "modeling_deepseek.DeepseekV3ForCausalLM",
    },
    "aux_loss_alpha": 0.001,
    "bos_token_id": 0,
    "eos_token_id": 1,
    "ep_size": 1,
    "first_k_dense_replace": 3,
    "hidden_act": "silu",
    "hidden_size": 7168,
    "initializer_range": 0.02,
    "intermediate_size": 18432,
    "kv_lora_rank": 512,
    "max_position_embeddings": 163840,
    "model_type": "deepseek_v3",
    "moe_intermediate_size": 2048,
    "moe_layer_freq": 1,
    "n_group": 8,
    "n_routed_experts": 256,
    "n_shared_experts": 1,
    "norm_topk_prob": True,
    "num_attention_heads": 128,
    "num_experts_per_tok": 8,
    "num_hidden_layers": 61,
    "num_key_value_heads": 128,
    "num_nextn_predict_layers": 1,
    "q_lora_rank": 1536,
    "qk_nope_head_dim": 128,
    "qk_rope_head_dim": 64,
    "quantization_config": {
        "activation_scheme": "dynamic",
        "fmt": "e4m3",
        "quant_method": "fp8",
        "weight_block_size": [128, 128],
    },
    "rms_norm_eps": 1e-06,
    "rope_scaling": {
        "beta_fast": 32,
        "beta_slow": 1,
        "factor": 40,
        "mscale": 1.0,
        "mscale_all_dim": 1.0,
        "original_max_position_embeddings": 4096,
        "type": "yarn",
    },
    "rope_theta": 10000,
    "routed_scaling_factor": 2.5,
    "scoring_func": "sigmoid",
    "seq_aux": True,
    "tie_word_embeddings": False,
    "topk_group": 4,
    "topk_method": "noaux_tc",
    "torch_dtype": "bfloat16",
    "transformers_version": "4.33.1",
    "use_cache": True,
    "v_head_dim": 128,
    "vocab_size": 129280,
}


def _llama_tensors(c: dict[str, Any]) -> list[StoredTensor]:
    N, V, F = c["hidden_size"], c["vocab_size"], c["intermediate_size"]
    q = c["num_attention_heads"] * (N // c["num_attention_heads"])
    kv = c["num_key_value_heads"] * (N // c["num_attention_heads"])
    out = [_bf16("model.embed_tokens.weight", V, N)]
    for i in range(c["num_hidden_layers"]):
        p = f"model.layers.{i}."
        out += [
            _bf16(p + "self_attn.q_proj.weight", q, N),
            _bf16(p + "self_attn.k_proj.weight", kv, N),
            _bf16(p + "self_attn.v_proj.weight", kv, N),
            _bf16(p + "self_attn.o_proj.weight", N, q),
            _bf16(p + "mlp.gate_proj.weight", F, N),
            _bf16(p + "mlp.up_proj.weight", F, N),
            _bf16(p + "mlp.down_proj.weight", N, F),
            _bf16(p + "input_layernorm.weight", N),
            _bf16(p + "post_attention_layernorm.weight", N),
        ]
    return [*out, _bf16("model.norm.weight", N), _bf16("lm_head.weight", V, N)]


def _llama_attention(c: dict[str, Any], i: int, fold_norm: bool) -> list[str]:
    p = f"model.layers.{i}."
    names = [p + "self_attn.q_proj.weight", p + "self_attn.k_proj.weight"]
    return [*names, p + "input_layernorm.weight"] if fold_norm else names


def _qwen3_tensors(c: dict[str, Any]) -> list[StoredTensor]:
    N, V, d = c["hidden_size"], c["vocab_size"], c["head_dim"]
    q, kv = c["num_attention_heads"] * d, c["num_key_value_heads"] * d
    E, F = c["num_experts"], c["moe_intermediate_size"]
    out = [_bf16("model.embed_tokens.weight", V, N)]
    for i in range(c["num_hidden_layers"]):
        p = f"model.layers.{i}."
        out += [
            _bf16(p + "self_attn.q_proj.weight", q, N),
            _bf16(p + "self_attn.k_proj.weight", kv, N),
            _bf16(p + "self_attn.v_proj.weight", kv, N),
            _bf16(p + "self_attn.o_proj.weight", N, q),
            _bf16(p + "self_attn.q_norm.weight", d),
            _bf16(p + "self_attn.k_norm.weight", d),
            _bf16(p + "mlp.gate.weight", E, N),
        ]
        for e in range(E):
            x = f"{p}mlp.experts.{e}."
            out += [
                _bf16(x + "gate_proj.weight", F, N),
                _bf16(x + "up_proj.weight", F, N),
                _bf16(x + "down_proj.weight", N, F),
            ]
        out += [_bf16(p + "input_layernorm.weight", N), _bf16(p + "post_attention_layernorm.weight", N)]
    return [*out, _bf16("model.norm.weight", N), _bf16("lm_head.weight", V, N)]


def _qwen3_attention(c: dict[str, Any], i: int, fold_norm: bool) -> list[str]:
    p = f"model.layers.{i}."
    names = [p + f"self_attn.{t}.weight" for t in ("q_proj", "k_proj", "q_norm", "k_norm")]
    return [*names, p + "input_layernorm.weight"] if fold_norm else names


def _deepseek_layer(c: dict[str, Any], i: int) -> list[StoredTensor]:
    N, H = c["hidden_size"], c["num_attention_heads"]
    nope, rope, value = c["qk_nope_head_dim"], c["qk_rope_head_dim"], c["v_head_dim"]
    q_rank, kv_rank = c["q_lora_rank"], c["kv_lora_rank"]
    p = f"model.layers.{i}."
    a = p + "self_attn."
    out = [
        *_fp8(a + "q_a_proj", q_rank, N),
        _bf16(a + "q_a_layernorm.weight", q_rank),
        *_fp8(a + "q_b_proj", H * (nope + rope), q_rank),
        *_fp8(a + "kv_a_proj_with_mqa", kv_rank + rope, N),
        _bf16(a + "kv_a_layernorm.weight", kv_rank),
        *_fp8(a + "kv_b_proj", H * (nope + value), kv_rank),
        *_fp8(a + "o_proj", N, H * value),
    ]

    def mlp(prefix: str, width: int) -> list[StoredTensor]:
        return [
            *_fp8(prefix + "gate_proj", width, N),
            *_fp8(prefix + "up_proj", width, N),
            *_fp8(prefix + "down_proj", N, width),
        ]

    if i < c["first_k_dense_replace"]:
        out += mlp(p + "mlp.", c["intermediate_size"])
    else:
        F, E = c["moe_intermediate_size"], c["n_routed_experts"]
        for e in range(E):
            out += mlp(f"{p}mlp.experts.{e}.", F)
        out += [
            _bf16(p + "mlp.gate.weight", E, N),
            StoredTensor(p + "mlp.gate.e_score_correction_bias", "F32", (E,)),
        ]
        out += mlp(p + "mlp.shared_experts.", F * c["n_shared_experts"])
    return [*out, _bf16(p + "input_layernorm.weight", N), _bf16(p + "post_attention_layernorm.weight", N)]


def _deepseek_tensors(c: dict[str, Any]) -> list[StoredTensor]:
    N, V, L = c["hidden_size"], c["vocab_size"], c["num_hidden_layers"]
    out = [_bf16("model.embed_tokens.weight", V, N)]
    for i in range(L):
        out += _deepseek_layer(c, i)
    out += [_bf16("model.norm.weight", N), _bf16("lm_head.weight", V, N)]
    # The multi-token-prediction module(s), stored as layers L, L+1, ... (not read by the analysis).
    for i in range(L, L + c["num_nextn_predict_layers"]):
        p = f"model.layers.{i}."
        out += [
            _bf16(p + "embed_tokens.weight", V, N),
            _bf16(p + "enorm.weight", N),
            _bf16(p + "hnorm.weight", N),
            _bf16(p + "eh_proj.weight", N, 2 * N),
            *_deepseek_layer(c, i),
            _bf16(p + "shared_head.norm.weight", N),
            _bf16(p + "shared_head.head.weight", V, N),
        ]
    return out


def _deepseek_attention(c: dict[str, Any], i: int, fold_norm: bool) -> list[str]:
    a = f"model.layers.{i}.self_attn."
    names = []
    for proj in ("q_a_proj", "q_b_proj", "kv_a_proj_with_mqa", "kv_b_proj"):
        names += [f"{a}{proj}.weight", f"{a}{proj}.weight_scale_inv"]
    names += [a + "q_a_layernorm.weight", a + "kv_a_layernorm.weight"]
    return [*names, f"model.layers.{i}.input_layernorm.weight"] if fold_norm else names


MODELS: dict[str, ModelShape] = {
    "llama": ModelShape(
        "llama", "meta-llama/Llama-3.1-405B", LLAMA_405B, 191, 5, _llama_tensors, _llama_attention
    ),
    "qwen3": ModelShape(
        "qwen3", "Qwen/Qwen3-235B-A22B", QWEN3_235B, 118, 5, _qwen3_tensors, _qwen3_attention
    ),
    "deepseek": ModelShape(
        "deepseek", "deepseek-ai/DeepSeek-V3", DEEPSEEK_V3, 163, 6, _deepseek_tensors, _deepseek_attention
    ),
}
"""The three models by short name."""


# ------------------------------------------------------------------------------------------- the plan


@dataclass(frozen=True)
class RepoPlan:
    """Everything written for one repository, computed without writing: config, index, shards.

    Parameters
    ----------
    model : ModelShape
        The model.
    config : dict
        The config.json written (with the layer count used).
    tensors : dict
        Tensor name -> StoredTensor, in state-dict order.
    shards : list of Shard
        In order.
    where : dict
        Tensor name -> index into ``shards``.
    """

    model: ModelShape
    config: dict[str, Any]
    tensors: dict[str, StoredTensor]
    shards: list[Shard]
    where: dict[str, int] = field(repr=False)

    @property
    def config_bytes(self) -> bytes:
        """config.json as written."""
        return (json.dumps(self.config, indent=2, sort_keys=True) + "\n").encode()

    @property
    def index_bytes(self) -> bytes:
        """model.safetensors.index.json as written (the weight map sorted by name, as the Hub's are)."""
        total = sum(t.nbytes for t in self.tensors.values())
        weight_map = {name: self.shards[self.where[name]].name for name in sorted(self.tensors)}
        index = {"metadata": {"total_size": total}, "weight_map": weight_map}
        return (json.dumps(index, indent=2, sort_keys=True) + "\n").encode()

    @property
    def attention_layers(self) -> int:
        """The layers ``--layers`` indexes (num_hidden_layers; DeepSeek's MTP layer is not one)."""
        return int(self.config["num_hidden_layers"])

    def read_by_analysis(self, layers: Iterable[int], fold_norm: bool = False) -> list[str]:
        """Names of the tensors ``qkenergy analyze --layers LAYERS`` reads.

        Parameters
        ----------
        layers : iterable of int
            The layers.
        fold_norm : bool
            With ``--fold-norm`` (the norm gains feeding attention too).

        Returns
        -------
        list of str

        Raises
        ------
        ValueError
            A layer out of range.
        """
        names: list[str] = []
        for layer in layers:
            if not 0 <= layer < self.attention_layers:
                raise ValueError(
                    f"{self.model.repo_id}: layer {layer} out of range 0..{self.attention_layers - 1}"
                )
            names += self.model.attention(self.config, layer, fold_norm)
        return names


def _shard_name(k: int, n: int, digits: int) -> str:
    return f"model-{k:05d}-of-{n:0{digits}d}.safetensors"


def _greedy(sizes: Sequence[int], limit: int) -> list[int]:
    """Start index of each shard when a new one begins as the next tensor would pass ``limit``."""
    starts, used = [0], 0
    for i, size in enumerate(sizes):
        if used and used + size > limit:
            starts.append(i)
            used = 0
        used += size
    return starts


def _partition(sizes: Sequence[int], n: int) -> list[int]:
    """The smallest size limit that cuts ``sizes`` into at most ``n`` shards, as shard starts (exactly n)."""
    low, high = max(sizes), sum(sizes)
    while low < high:
        mid = (low + high) // 2
        if len(_greedy(sizes, mid)) <= n:
            high = mid
        else:
            low = mid + 1
    starts = _greedy(sizes, low)
    if len(starts) != n:
        raise ValueError(f"no shard size limit cuts these tensors into exactly {n} shards ({len(starts)})")
    return starts


def _shard(name: str, tensors: Sequence[StoredTensor]) -> Shard:
    ordered = sorted(tensors, key=lambda t: (-_DTYPE_RANK[t.dtype], t.name))
    header: dict[str, Any] = {"__metadata__": {"format": "pt"}}
    ranges, offset = {}, 0
    for t in ordered:
        ranges[t.name] = (offset, offset + t.nbytes)
        header[t.name] = {
            "dtype": t.dtype,
            "shape": list(t.shape),
            "data_offsets": [offset, offset + t.nbytes],
        }
        offset += t.nbytes
    raw = json.dumps(header, separators=(",", ":")).encode()
    return Shard(name, raw + b" " * (-len(raw) % 8), ranges)


def plan(model: ModelShape | str, *, layers: int | None = None, shards: int | None = None) -> RepoPlan:
    """The repository of ``model``: config, tensors and shards (nothing written).

    ``layers`` and ``shards`` are for tests only (a small repository with the real widths): the
    benchmark uses the real counts. With ``layers`` and no ``shards`` the shard count is the real one
    scaled by the size, at least 2.

    Parameters
    ----------
    model : ModelShape or str
        The model or its key in :data:`MODELS`.
    layers : int or None
        num_hidden_layers to use instead of the published one.
    shards : int or None
        Shards to cut the tensors into instead of the real count.

    Returns
    -------
    RepoPlan

    Raises
    ------
    ValueError
        Unknown model, a count below 1, or no cut into that many shards.
    """
    shape = _model(model)
    config = dict(shape.config)
    if layers is not None:
        if layers < 1:
            raise ValueError(f"layers must be at least 1, got {layers}")
        config["num_hidden_layers"] = layers
    tensors = shape.tensors(config)
    sizes = [t.nbytes for t in tensors]
    if shards is None:
        real = sum(t.nbytes for t in shape.tensors(shape.config)) if layers is not None else sum(sizes)
        shards = shape.shards if layers is None else max(2, round(shape.shards * sum(sizes) / real))
    if shards < 1:
        raise ValueError(f"shards must be at least 1, got {shards}")
    starts = [*_partition(sizes, shards), len(tensors)]
    out, where = [], {}
    for k in range(shards):
        part = tensors[starts[k] : starts[k + 1]]
        out.append(_shard(_shard_name(k + 1, shards, shape.shard_digits), part))
        where.update(dict.fromkeys((t.name for t in part), k))
    return RepoPlan(shape, config, {t.name: t for t in tensors}, out, where)


def _model(model: ModelShape | str) -> ModelShape:
    if isinstance(model, ModelShape):
        return model
    if model not in MODELS:
        raise ValueError(f"unknown model {model!r}; expected one of {', '.join(MODELS)}")
    return MODELS[model]


def repo_size(repo: RepoPlan) -> int:
    """Bytes of the repository: config.json, the index and every shard.

    Parameters
    ----------
    repo : RepoPlan
        The repository.

    Returns
    -------
    int
    """
    return len(repo.config_bytes) + len(repo.index_bytes) + sum(s.size for s in repo.shards)


# ------------------------------------------------------------------------------------------ the floor


@dataclass(frozen=True)
class Floor:
    """The least a hub reader must fetch for one reading (see the module docstring).

    Parameters
    ----------
    files : dict
        config.json and the index: name -> bytes (fetched whole).
    headers : dict
        Shard name -> header bytes (8 + length) of each shard holding a tensor read.
    tensors : dict
        Tensor name -> data bytes of each tensor read.
    all_headers : int
        The headers of every shard (what a reader fetching all of them adds instead of ``headers``).
    """

    files: dict[str, int]
    headers: dict[str, int]
    tensors: dict[str, int]
    all_headers: int

    @property
    def total(self) -> int:
        """The floor in bytes."""
        return sum(self.files.values()) + sum(self.headers.values()) + sum(self.tensors.values())


def floor(repo: RepoPlan, layers: Iterable[int], *, fold_norm: bool = False) -> Floor:
    """The floor of ``qkenergy analyze --layers LAYERS`` on ``repo``.

    Parameters
    ----------
    repo : RepoPlan
        The repository.
    layers : iterable of int
        The layers read.
    fold_norm : bool
        With ``--fold-norm``.

    Returns
    -------
    Floor

    Raises
    ------
    ValueError
        A layer out of range.
    """
    names = repo.read_by_analysis(layers, fold_norm)
    touched = sorted({repo.where[n] for n in names})
    return Floor(
        files={CONFIG_NAME: len(repo.config_bytes), INDEX_NAME: len(repo.index_bytes)},
        headers={repo.shards[k].name: repo.shards[k].header_bytes for k in touched},
        tensors={n: repo.tensors[n].nbytes for n in names},
        all_headers=sum(s.header_bytes for s in repo.shards),
    )


# ----------------------------------------------------------------------------------------- the filling


def _rng(seed: int, name: str) -> np.random.Generator:
    return np.random.default_rng([seed, zlib.crc32(name.encode())])


def _is_gain(name: str) -> bool:
    return name.endswith(("norm.weight", "layernorm.weight"))


def _fill_bytes(t: StoredTensor, seed: int, scales: dict[str, np.ndarray]) -> Iterable[bytes]:
    """The tensor's data in order, in pieces: seeded, finite, of its dtype.

    An FP8 weight puts its block scales into ``scales`` under the scale tensor's name.
    """
    import ml_dtypes

    rng = _rng(seed, t.name)
    if t.dtype == "F8_E4M3":
        rows, cols = t.shape
        pad = (-rows % BLOCK, -cols % BLOCK)
        w = np.pad(rng.standard_normal((rows, cols), dtype=np.float32) * 0.02, ((0, pad[0]), (0, pad[1])))
        blocks = w.reshape((rows + pad[0]) // BLOCK, BLOCK, (cols + pad[1]) // BLOCK, BLOCK)
        scale = np.abs(blocks).max(axis=(1, 3)) / E4M3_MAX  # > 0: every block holds a nonzero normal draw
        codes = (blocks / scale[:, None, :, None]).reshape(w.shape)[:rows, :cols]
        scales[t.name.removesuffix(".weight") + ".weight_scale_inv"] = scale.astype(np.float32)
        yield codes.astype(ml_dtypes.float8_e4m3fn).tobytes()
    elif t.dtype != "BF16":
        raise ValueError(f"{t.name}: {t.dtype} is filled only as the block scales of an FP8 weight")
    elif _is_gain(t.name):
        gains = 1.0 + 0.1 * rng.standard_normal(t.shape, dtype=np.float32)
        yield gains.astype(ml_dtypes.bfloat16).tobytes()
    else:
        count = math.prod(t.shape)
        for start in range(0, count, _CHUNK):
            part = rng.standard_normal(min(_CHUNK, count - start), dtype=np.float32) * 0.02
            yield part.astype(ml_dtypes.bfloat16).tobytes()


def _write(fd: int, shard: Shard, name: str, pieces: Iterable[bytes]) -> None:
    offset = shard.header_bytes + shard.ranges[name][0]
    for piece in pieces:
        os.pwrite(fd, piece, offset)
        offset += len(piece)
    if offset != shard.header_bytes + shard.ranges[name][1]:
        raise AssertionError(f"{shard.name}: {name} was written with the wrong number of bytes")


def _marker(repo: RepoPlan, filled: Sequence[int], seed: int) -> dict[str, Any]:
    return {
        "format_version": FORMAT_VERSION,
        "repo_id": repo.model.repo_id,
        "num_hidden_layers": repo.attention_layers,
        "shards": len(repo.shards),
        "filled_layers": list(filled),
        "seed": seed,
        "size": repo_size(repo),
    }


def _cached(folder: Path, marker: Path, expected: dict[str, Any], repo: RepoPlan) -> bool:
    try:
        if json.loads(marker.read_text()) != expected:
            return False
        sizes = {p.name: p.stat().st_size for p in folder.iterdir()}
    except (OSError, ValueError):
        return False
    want = {CONFIG_NAME: len(repo.config_bytes), INDEX_NAME: len(repo.index_bytes)}
    want.update({s.name: s.size for s in repo.shards})
    return sizes == want


def build(
    root: str | os.PathLike[str],
    model: ModelShape | str,
    *,
    filled: Sequence[int] = (0, 1),
    seed: int = 0,
    layers: int | None = None,
    shards: int | None = None,
    log: Callable[[str], None] | None = None,
) -> tuple[Path, RepoPlan]:
    """Write ``model``'s repository under ``root`` (``root/org--name``), or keep the one written before.

    The shards are sparse: header, then a hole to the full size, then the data of the tensors
    that ``qkenergy analyze --fold-norm`` reads for the ``filled`` layers. A marker
    ``root/org--name.built.json`` (outside the repository, so that a server of the folder does
    not list it) records what was written; a repository whose marker and file sizes match is
    not written again. An existing folder is replaced only when its marker is there.

    Parameters
    ----------
    root : str or os.PathLike
        Where the repository folder goes (created).
    model : ModelShape or str
        The model or its key in :data:`MODELS`.
    filled : sequence of int
        The layers whose attention tensors hold data.
    seed : int
        Seed of the values.
    layers, shards : int or None
        For tests only: see :func:`plan`.
    log : callable or None
        Called with a line when a repository is written.

    Returns
    -------
    (Path, RepoPlan)
        The repository folder and its plan.

    Raises
    ------
    ValueError
        A filled layer out of range, or see :func:`plan`.
    FileExistsError
        The folder exists without a marker (not one this module wrote).
    """
    repo = plan(model, layers=layers, shards=shards)
    filled = sorted(set(filled))
    names = repo.read_by_analysis(filled, fold_norm=True)
    root = Path(root)
    folder = root / repo.model.folder_name
    marker = root / (repo.model.folder_name + ".built.json")
    expected = _marker(repo, filled, seed)
    if _cached(folder, marker, expected, repo):
        return folder, repo
    if folder.exists():
        if not marker.exists():
            raise FileExistsError(f"{folder}: exists and was not written by hub_shapes (no {marker.name})")
        marker.unlink()
        shutil.rmtree(folder)
    if log is not None:
        log(f"writing {repo.model.repo_id} into {folder} ({len(repo.shards)} shards)")
    folder.mkdir(parents=True)
    (folder / CONFIG_NAME).write_bytes(repo.config_bytes)
    (folder / INDEX_NAME).write_bytes(repo.index_bytes)
    by_shard: dict[int, list[str]] = {}
    for name in names:
        by_shard.setdefault(repo.where[name], []).append(name)
    scales: dict[str, np.ndarray] = {}  # FP8 block scales, made with their weights, written last
    for k, shard in enumerate(repo.shards):
        with open(folder / shard.name, "wb") as fh:
            fh.write(len(shard.header).to_bytes(8, "little") + shard.header)
            fh.truncate(shard.size)
            for name in by_shard.get(k, []):
                if repo.tensors[name].dtype != "F32":
                    _write(fh.fileno(), shard, name, _fill_bytes(repo.tensors[name], seed, scales))
    for name, values in scales.items():
        shard = repo.shards[repo.where[name]]
        with open(folder / shard.name, "r+b") as fh:
            _write(fh.fileno(), shard, name, [values.astype("<f4").tobytes()])
    marker.write_text(json.dumps(expected, indent=2) + "\n")
    return folder, repo


# ---------------------------------------------------------------------------------------- command line


def _indices(text: str) -> list[int]:
    return [int(part) for part in text.split(",") if part.strip()]


def disk_usage(folder: Path) -> int:
    """Bytes the folder's files take on disk (allocated blocks: holes take none).

    Parameters
    ----------
    folder : Path
        The folder.

    Returns
    -------
    int
    """
    return sum(p.stat().st_blocks * 512 for p in folder.iterdir() if p.is_file())


def _gb(n: int) -> str:
    return f"{n / 1e9:,.1f} GB" if n >= 1e10 else f"{n / 1e9:,.3f} GB"


def main(argv: Sequence[str] | None = None) -> int:
    """The command line (see the module docstring)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path, help="folder for the repositories (e.g. results/hub_shapes)")
    parser.add_argument("--models", default=",".join(MODELS), help="comma-separated: " + ", ".join(MODELS))
    parser.add_argument("--filled", type=_indices, default=[0, 1], help="layers that hold data (0,1)")
    parser.add_argument("--floor-layers", type=_indices, default=None, help="layers of the floor (--filled)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    for key in args.models.split(","):
        folder, repo = build(args.out, key, filled=args.filled, seed=args.seed, log=print)
        size = repo_size(repo)
        layers = args.floor_layers or args.filled
        fl = floor(repo, layers)
        fold = floor(repo, layers, fold_norm=True)
        print(
            f"{repo.model.repo_id}: {len(repo.shards)} shards, {len(repo.tensors):,} tensors, "
            f"size {_gb(size)} ({size:,} bytes), on disk {_gb(disk_usage(folder))}\n"
            f"  floor of --layers {','.join(map(str, layers))}: {_gb(fl.total)} ({fl.total:,} bytes; "
            f"{len(fl.tensors)} tensors {sum(fl.tensors.values()):,}, {len(fl.headers)} shard headers "
            f"{sum(fl.headers.values()):,}, config + index {sum(fl.files.values()):,}) = "
            f"{fl.total / size:.3%} of the repository; with --fold-norm {fold.total:,}; "
            f"all {len(repo.shards)} headers {fl.all_headers:,}\n"
            f"  {folder}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Tiny repositories, written as local folders, for the loopback hub (tests/loopback_hub.py).

Each builder writes one repository under ``root`` and returns its folder. The folders with
weights are readable locally (``qkenergy analyze FOLDER --no-null``; tests/weights/test_loopback_hub.py
checks it), so a hub reading of ``org/name`` can be compared with the local reading of the same
files. The weights come from the existing test builders (tests/survey_checkpoints.py,
tests/weights/test_quantization.py, tests/weights/test_gguf.py); the builders that need torch or
gguf import them when called.

============  ==========================================================================
builder       what the repository holds
============  ==========================================================================
plain         llama, 3 layers, 4 query / 2 key heads of 16, N = 64, bf16: config.json +
              model.safetensors
sharded       the same model (4 layers) in 3 shards + model.safetensors.index.json; each
              layer's q_proj, k_proj and norm gain are in three different shards
fp8           llama (2 layers, as test_quantization) with float8_e4m3 q/k and float32
              ``weight_scale_inv`` in 16 x 32 blocks; quantization_config ``fp8``
              (DeepSeek-V3 / Qwen3-FP8 layout)
deepseek_fp8  DeepSeek-V3 latent attention (2 layers, 4 heads), q_a / q_b / kv_a / kv_b
              FP8 in 8 x 16 blocks, with q_a_layernorm and kv_a_layernorm gains
gptq          llama (2 layers) in GPTQ int4, group 16 (qweight, qzeros, scales)
gguf          one GGUF file (qwen2, 2 layers, mixed Q8_0 / Q4_1 / F16 / ... tensors) and a
              README.md, no config.json (as GGUF repos on the Hub)
gguf_many     three GGUF files of one model (a repo offering several quantisations)
pickle_only   config.json + pytorch_model.bin (bytes that are no pickle: never to be loaded)
no_weights    config.json + README.md
============  ==========================================================================

``publish(hub, root)`` writes them all and serves each as ``loopback/{builder}`` (the name with
``-`` for ``_``); it returns ``{repo_id: (folder, commit)}``.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

__all__ = [
    "BUILDERS",
    "deepseek_fp8",
    "fp8",
    "gguf",
    "gguf_many",
    "gptq",
    "no_weights",
    "pickle_only",
    "plain",
    "publish",
    "sharded",
]

README = "---\nlicense: apache-2.0\n---\n# A tiny test repository of the loopback hub\n"


def plain(root: Path, *, layers: int = 3, seed: int = 0) -> Path:
    """A llama checkpoint in bf16: config.json and one model.safetensors."""
    import ml_dtypes

    from tests.survey_checkpoints import write_checkpoint

    folder = root / "plain"
    return write_checkpoint(
        folder,
        "llama",
        layers=layers,
        N=64,
        heads=4,
        head_dim=16,
        kv_heads=2,
        dtype=ml_dtypes.bfloat16,
        seed=seed,
    )


def sharded(root: Path, *, shards: int = 3) -> Path:
    """The plain llama (4 layers) split in ``shards`` files with model.safetensors.index.json."""
    from safetensors.numpy import load_file, save_file

    folder = plain(root / "sharded-source", layers=4, seed=1)
    tensors = load_file(str(folder / "model.safetensors"))
    out = root / "sharded"
    out.mkdir(parents=True, exist_ok=True)
    (out / "config.json").write_text((folder / "config.json").read_text())
    names = [f"model-{k + 1:05d}-of-{shards:05d}.safetensors" for k in range(shards)]
    parts: list[dict[str, np.ndarray]] = [{} for _ in range(shards)]
    weight_map = {}
    for name, array in sorted(tensors.items()):
        layer = int(name.split(".")[2])
        # q, k and the gain of one layer go to three different shards, and rotate with the layer
        kind = 0 if "q_proj" in name else 1 if "k_proj" in name else 2
        k = (layer + kind) % shards
        parts[k][name] = array
        weight_map[name] = names[k]
    for name, part in zip(names, parts, strict=True):
        save_file(part, str(out / name))
    total = sum(int(a.nbytes) for a in tensors.values())
    index = {"metadata": {"total_size": total}, "weight_map": weight_map}
    (out / "model.safetensors.index.json").write_text(json.dumps(index, indent=2))
    return out


def fp8(root: Path) -> Path:
    """A llama checkpoint with FP8 block-scaled q/k (``weight_scale_inv``, blocks of 16 x 32)."""
    import torch

    from tests.weights.test_quantization import (
        LAYERS,
        SHAPES,
        float8_values,
        module,
        spread_scales,
        write_checkpoint,
    )

    rng = np.random.default_rng(21)
    block = [16, 32]
    tensors: dict[str, Any] = {}
    for layer in range(LAYERS):
        for proj, (rows, cols) in SHAPES.items():
            name = module(layer, proj)
            tensors[name + ".weight"] = float8_values(rng, (rows, cols))
            grid = (-(-rows // block[0]), -(-cols // block[1]))
            tensors[name + ".weight_scale_inv"] = torch.from_numpy(
                spread_scales(rng, grid).astype(np.float32)
            )
    config = {
        "quant_method": "fp8",
        "fmt": "e4m3",
        "activation_scheme": "dynamic",
        "weight_block_size": block,
    }
    return write_checkpoint(root / "fp8", tensors, config)


def deepseek_fp8(root: Path) -> Path:
    """DeepSeek-V3's latent attention (2 layers, 4 heads), every projection FP8 in 8 x 16 blocks."""
    import torch
    from safetensors.torch import save_file

    from tests.weights.test_quantization import (
        LATENT_BLOCK,
        LATENT_CONFIG,
        LATENT_RANKS,
        LATENT_SHAPES,
        float8_values,
        spread_scales,
    )
    from tests.weights.test_quantization import LAYERS as layers

    rng = np.random.default_rng(22)
    rank_q, rank_kv = LATENT_RANKS["q"], LATENT_RANKS["kv"]
    shapes, block = LATENT_SHAPES, LATENT_BLOCK
    tensors: dict[str, Any] = {}
    for layer in range(layers):
        prefix = f"model.layers.{layer}.self_attn."
        for proj, (rows, cols) in shapes.items():
            tensors[prefix + proj + ".weight"] = float8_values(rng, (rows, cols))
            grid = (-(-rows // block[0]), -(-cols // block[1]))
            scales = spread_scales(rng, grid).astype(np.float32)
            tensors[prefix + proj + ".weight_scale_inv"] = torch.from_numpy(scales)
        for norm, size in (("q_a_layernorm", rank_q), ("kv_a_layernorm", rank_kv)):
            tensors[prefix + norm + ".weight"] = torch.from_numpy(
                rng.uniform(0.5, 2, size).astype(np.float32)
            )
    config = {**LATENT_CONFIG, "quantization_config": {"quant_method": "fp8", "weight_block_size": block}}
    folder = root / "deepseek_fp8"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(config))
    save_file(tensors, str(folder / "model.safetensors"))
    return folder


def gptq(root: Path) -> Path:
    """A llama checkpoint in GPTQ int4, group 16 (test_quantization's)."""
    from tests.weights.test_quantization import GPTQ_CONFIG, gptq_checkpoint

    return gptq_checkpoint(root / "gptq", dict(GPTQ_CONFIG))


def gguf(root: Path) -> Path:
    """One GGUF file (qwen2, written as llama.cpp's converter would) and a README.md."""
    from tests.weights.test_gguf import CASES, convert

    folder = root / "gguf"
    folder.mkdir(parents=True, exist_ok=True)
    convert(CASES["qwen2"], folder / "tiny-qwen2-Q8_0.gguf", seed=3)
    (folder / "README.md").write_text(README)
    return folder


def gguf_many(root: Path) -> Path:
    """Three GGUF files of one qwen2 model, as a repo offering several quantisations does."""
    from tests.weights.test_gguf import CASES, convert

    folder = root / "gguf_many"
    folder.mkdir(parents=True, exist_ok=True)
    for seed, label in enumerate(("Q4_0", "Q5_1", "Q8_0")):
        convert(CASES["qwen2"], folder / f"tiny-qwen2-{label}.gguf", seed=10 + seed)
    (folder / "README.md").write_text(README)
    return folder


def pickle_only(root: Path) -> Path:
    """config.json and pytorch_model.bin; the .bin holds bytes that are not a pickle (never to be loaded)."""
    folder = root / "pickle_only"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps({"model_type": "llama", "num_hidden_layers": 2}))
    (folder / "pytorch_model.bin").write_bytes(
        b"PK\x03\x04 not a checkpoint: the reader must refuse it unread\n"
    )
    return folder


def no_weights(root: Path) -> Path:
    """config.json and README.md only."""
    folder = root / "no_weights"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps({"model_type": "llama", "num_hidden_layers": 2}))
    (folder / "README.md").write_text(README)
    return folder


BUILDERS: dict[str, Callable[[Path], Path]] = {
    "plain": plain,
    "sharded": sharded,
    "fp8": fp8,
    "deepseek_fp8": deepseek_fp8,
    "gptq": gptq,
    "gguf": gguf,
    "gguf_many": gguf_many,
    "pickle_only": pickle_only,
    "no_weights": no_weights,
}


def publish(hub: Any, root: Path, names: list[str] | None = None) -> dict[str, tuple[Path, str]]:
    """Write the repositories ``names`` (all by default) under ``root``, serve them on ``hub``.

    Returns ``{repo_id: (folder, commit)}``, repo ids ``loopback/{name}`` with ``-`` for ``_``.
    """
    out = {}
    for name in names if names is not None else list(BUILDERS):
        folder = BUILDERS[name](root)
        repo_id = "loopback/" + name.replace("_", "-")
        out[repo_id] = (folder, hub.add_repo(repo_id, folder))
    return out

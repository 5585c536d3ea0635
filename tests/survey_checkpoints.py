"""Small synthetic safetensors checkpoints of several layouts (survey tests and benchmark)."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from pathlib import Path

import numpy as np

# model_type -> config keys (heads, hidden, layers) and how Q, K are stored.
_CONFIG_KEYS = {
    "llama": ("num_attention_heads", "hidden_size", "num_hidden_layers"),
    "phi3": ("num_attention_heads", "hidden_size", "num_hidden_layers"),
    "gpt_neox": ("num_attention_heads", "hidden_size", "num_hidden_layers"),
    "gpt2": ("n_head", "n_embd", "n_layer"),
}


def write_checkpoint(
    root: Path,
    model_type: str = "llama",
    *,
    layers: int = 2,
    N: int = 64,
    heads: int = 4,
    head_dim: int = 8,
    kv_heads: int | None = None,
    dtype: type = np.float32,
    seed: int = 0,
) -> Path:
    """A checkpoint directory (config.json + model.safetensors) with Gaussian Q/K weights.

    llama (separate q_proj / k_proj, grouped-query when kv_heads < heads), phi3
    (stacked qkv_proj), gpt_neox (interleaved query_key_value), gpt2 (Conv1D
    c_attn). Only the attention weights and norms a layer reads are written.
    """
    from safetensors.numpy import save_file

    rng = np.random.default_rng(seed)
    kv = kv_heads or heads
    k_heads, k_hidden, k_layers = _CONFIG_KEYS[model_type]
    config: dict[str, object] = {"model_type": model_type, k_heads: heads, k_hidden: N, k_layers: layers}
    if model_type in ("llama", "phi3"):
        config.update(num_key_value_heads=kv, head_dim=head_dim)
    elif head_dim * heads != N:
        raise ValueError(f"{model_type} needs heads * head_dim == N")
    tensors: dict[str, np.ndarray] = {}
    for i in range(layers):

        def gauss(*shape: int) -> np.ndarray:
            return rng.standard_normal(shape).astype(dtype)

        if model_type == "llama":
            tensors[f"model.layers.{i}.self_attn.q_proj.weight"] = gauss(heads * head_dim, N)
            tensors[f"model.layers.{i}.self_attn.k_proj.weight"] = gauss(kv * head_dim, N)
            tensors[f"model.layers.{i}.input_layernorm.weight"] = np.ones(N, dtype)
        elif model_type == "phi3":
            tensors[f"model.layers.{i}.self_attn.qkv_proj.weight"] = gauss((heads + 2 * kv) * head_dim, N)
            tensors[f"model.layers.{i}.input_layernorm.weight"] = np.ones(N, dtype)
        elif model_type == "gpt_neox":
            tensors[f"gpt_neox.layers.{i}.attention.query_key_value.weight"] = gauss(3 * N, N)
            tensors[f"gpt_neox.layers.{i}.input_layernorm.weight"] = np.ones(N, dtype)
        else:
            tensors[f"h.{i}.attn.c_attn.weight"] = gauss(N, 3 * N)
            tensors[f"h.{i}.ln_1.weight"] = np.ones(N, dtype)
    root.mkdir(parents=True, exist_ok=True)
    (root / "config.json").write_text(json.dumps(config))
    save_file(tensors, str(root / "model.safetensors"))
    return root


@contextlib.contextmanager
def thread_cluster() -> Iterator[str]:
    """A one-worker Dask cluster of threads in this process (no processes to start): its address."""
    from distributed import LocalCluster

    with LocalCluster(
        n_workers=1,
        threads_per_worker=1,
        processes=False,
        dashboard_address=None,
        # the scheduler's bare HTTP server on a free port: 8787 may belong to another test's cluster
        scheduler_kwargs={"dashboard_address": ":0"},
        silence_logs=50,
    ) as cluster:
        yield cluster.scheduler_address


def two_model_manifest(root: Path) -> Path:
    """A manifest of two tiny Llama checkpoints ("a", "b": 2 layers of 2 heads, N = 16) written under root."""
    lines = []
    for name, seed in (("a", 0), ("b", 1)):
        model = write_checkpoint(root / name, "llama", layers=2, N=16, heads=2, head_dim=4, seed=seed)
        lines.append(f'[[model]]\nsource = "{model}"\nname = "{name}"\n')
    path = root / "m.toml"
    path.write_text("\n".join(lines))
    return path

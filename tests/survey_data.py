"""Head and layer tables of several models, shaped like a survey's, for the report tests.

The embedded MiniLM (group "minilm") plus a toy training run: four llama-shaped
checkpoints (3 layers, 4 heads, n = 8, N = 64) at steps 0, 100, 1000, 10000
whose key weights move from independent of the queries (a random head) towards
the queries themselves (s -> 1), deeper layers faster.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd

from qkenergy.analysis.analyze import analyze_model

TOY_STEPS = (0, 100, 1000, 10000)
TOY_MIX = (0.0, 0.2, 0.5, 0.9)
TOY_LAYERS, TOY_HEADS, TOY_N_HEAD, TOY_N = 3, 4, 8, 64
SAMPLES = 300


def toy_checkpoint(root: Path, mix: float, seed: int = 0) -> Path:
    """A llama checkpoint whose layer i has W_K = (1 - m) R + m W_Q with m = min(1, mix (i + 1) / 3)."""
    from safetensors.numpy import save_file

    root.mkdir(parents=True, exist_ok=True)
    config = {
        "model_type": "llama",
        "num_hidden_layers": TOY_LAYERS,
        "num_attention_heads": TOY_HEADS,
        "num_key_value_heads": TOY_HEADS,
        "hidden_size": TOY_N,
        "head_dim": TOY_N_HEAD,
    }
    (root / "config.json").write_text(json.dumps(config))
    rng = np.random.default_rng(seed)  # the same initialisation at every step
    tensors = {}
    for i in range(TOY_LAYERS):
        w_query = rng.standard_normal((TOY_HEADS * TOY_N_HEAD, TOY_N))
        other = rng.standard_normal((TOY_HEADS * TOY_N_HEAD, TOY_N))
        m = min(1.0, mix * (i + 1) / TOY_LAYERS)
        tensors[f"model.layers.{i}.self_attn.q_proj.weight"] = w_query.astype(np.float32)
        tensors[f"model.layers.{i}.self_attn.k_proj.weight"] = ((1 - m) * other + m * w_query).astype(
            np.float32
        )
    save_file(tensors, str(root / "model.safetensors"))
    return root


def survey_tables(root: Path, cache: Path) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """(heads, layers, models) of MiniLM and the toy run, with survey columns model, group, step."""
    heads, layers = [], []
    minilm = analyze_model(samples=SAMPLES, cache_dir=cache, per_layer=True)
    heads.append(minilm.heads.assign(group="minilm", step=np.nan))
    layers.append(minilm.layers)
    models = [{"model": minilm.model, "architecture": "bert", "n_layers": 6}]
    for step, mix in zip(TOY_STEPS, TOY_MIX):
        name = f"toy-llama@{step}"
        run = analyze_model(
            toy_checkpoint(root / name, mix), samples=SAMPLES, cache_dir=cache, per_layer=True
        )
        heads.append(run.heads.assign(model=name, group="toy run", step=step))
        layers.append(run.layers.assign(model=name))
        models.append({"model": name, "architecture": "llama", "n_layers": TOY_LAYERS})
    return pd.concat(heads, ignore_index=True), pd.concat(layers, ignore_index=True), pd.DataFrame(models)

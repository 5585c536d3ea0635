"""Cost of --rope-offsets on one llama-7B-shaped layer (32 heads, n = 128, N = 4096, float32).

Each offset d replaces W_Q by R_d W_Q in the Gram route, so an extra offset should cost
about one layer's statistics and nothing that grows with N. Times are the best of two
runs on one thread; the ratios are measured in this one run.

    python benchmarks/bench_rope_offsets.py
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from qkenergy.analysis.analyze import analyze_model

HEADS, HEAD_DIM, WIDTH = 32, 128, 4096


def main() -> None:
    rng = np.random.default_rng(0)
    arrays = {
        f"model.layers.0.self_attn.{name}_proj.weight": rng.standard_normal(
            (HEADS * HEAD_DIM, WIDTH), dtype=np.float32
        )
        for name in ("q", "k")
    }
    config = {
        "model_type": "llama",
        "num_hidden_layers": 1,
        "num_attention_heads": HEADS,
        "num_key_value_heads": HEADS,
        "hidden_size": WIDTH,
        "head_dim": HEAD_DIM,
        "max_position_embeddings": 4096,
        "rope_theta": 10000.0,
    }

    def best_of_two(**options: Any) -> float:
        times = []
        for _ in range(2):
            start = time.perf_counter()
            analyze_model(arrays, config=config, null=False, threads=1, **options)
            times.append(time.perf_counter() - start)
        return min(times)

    best_of_two()  # warm-up: imports and first-touch of the arrays
    plain = best_of_two()
    one = best_of_two(rope_offsets=[0])
    log = best_of_two(rope_offsets="log")  # 14 offsets: 0, 1, 2, ..., 2048, 4095
    extra = (log - one) / 13
    print("command: python benchmarks/bench_rope_offsets.py")
    print(f"one layer, {HEADS} heads, n = {HEAD_DIM}, N = {WIDTH}, float32, one thread")
    print(f"no offsets {plain:.2f} s; --rope-offsets 0 {one:.2f} s; --rope-offsets log (14) {log:.2f} s")
    print(f"each extra offset {extra:.3f} s = {extra / plain:.2f} x the layer without offsets")


if __name__ == "__main__":
    main()

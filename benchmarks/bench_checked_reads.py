"""Cost of checked reads (os.preadv into private arrays) against the memory-mapped route they replaced.

A checkpoint truncated while it is read kills a process that touches a memory map of it (SIGBUS);
``SafetensorsFile.tensor`` therefore reads with ``os.preadv`` and turns a short read into one error
line. This benchmark writes a llama-shaped bfloat16 checkpoint (default: 8 layers, N = 4096, 32 query
heads, 8 key-value heads, head_dim 128; query and key tensors only), warms the page cache, then in one
run and alternating the two routes:

- access: every layer's W_Q and W_K turned into float32 (what the Gram route does first), through
  the checked reads (``layouts.read_layer`` on a ``TensorSource``) and through read-only memory maps of
  the same bytes (``np.frombuffer`` on ``mmap``, pages released after each layer with MADV_DONTNEED,
  as the mapped reader did);
- analyze: the same plus the statistics of every head (``statistics.head_statistics``).

Printed: the best of ``--repeats`` times per route and the ratios checked / mapped. No assertions.

    python benchmarks/bench_checked_reads.py [--layers 8] [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import mmap
import os
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import ml_dtypes
import numpy as np

from qkenergy.math.statistics import head_statistics
from qkenergy.weights.architecture import architecture
from qkenergy.weights.reading import read_layer
from qkenergy.weights.safetensors_io import TensorSource

BF16 = np.dtype(ml_dtypes.bfloat16)
Q = "model.layers.{i}.self_attn.q_proj.weight"
K = "model.layers.{i}.self_attn.k_proj.weight"


def write_checkpoint(root: Path, layers: int, N: int, heads: int, kv_heads: int, head_dim: int) -> dict:
    """config.json and one model.safetensors of bf16 query/key weights; returns the config."""
    rng = np.random.default_rng(0)
    shapes = {}
    for i in range(layers):
        shapes[Q.format(i=i)] = (heads * head_dim, N)
        shapes[K.format(i=i)] = (kv_heads * head_dim, N)
    header, offset = {}, 0
    for name, shape in shapes.items():
        size = 2 * shape[0] * shape[1]
        header[name] = {"dtype": "BF16", "shape": list(shape), "data_offsets": [offset, offset + size]}
        offset += size
    raw = json.dumps(header).encode()
    raw += b" " * (-len(raw) % 8)
    with open(root / "model.safetensors", "wb") as fh:
        fh.write(len(raw).to_bytes(8, "little") + raw)
        for shape in shapes.values():
            fh.write((rng.standard_normal(shape, dtype=np.float32) * 0.02).astype(BF16).tobytes())
    config = {
        "model_type": "llama",
        "num_hidden_layers": layers,
        "num_attention_heads": heads,
        "num_key_value_heads": kv_heads,
        "hidden_size": N,
        "head_dim": head_dim,
    }
    (root / "config.json").write_text(json.dumps(config))
    return config


def checked_layers(root: Path, config: dict) -> Callable[[], object]:
    arch = architecture(config)

    def layers():
        with TensorSource([root / "model.safetensors"]) as source:
            for i in range(arch.n_layers):
                w = read_layer(source, arch, i, prefix="model.")
                yield w.w_query, w.w_key
                source.release()

    return layers


def mapped_layers(root: Path, config: dict) -> Callable[[], object]:
    """Today's route before the change: zero-copy views of a read-only map, pages dropped per layer."""
    path = root / "model.safetensors"
    with open(path, "rb") as fh:
        n = int.from_bytes(fh.read(8), "little")
        header = json.loads(fh.read(n))
    arch = architecture(config)
    H, Hkv, d, N = arch.n_heads, arch.n_kv_heads, arch.head_dim, arch.hidden_size

    def view(mm: mmap.mmap, name: str) -> np.ndarray:
        begin, end = header[name]["data_offsets"]
        return np.frombuffer(mm, BF16, count=(end - begin) // 2, offset=8 + n + begin)

    def layers():
        with open(path, "rb") as fh:
            mm = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
        for i in range(arch.n_layers):
            wq = view(mm, Q.format(i=i)).reshape(H, d, N)
            wk = view(mm, K.format(i=i)).reshape(Hkv, d, N)
            yield wq, wk
            del wq, wk
            mm.madvise(mmap.MADV_DONTNEED)
        try:
            mm.close()
        except BufferError:
            pass  # the caller still holds the last views; the map goes with them

    return layers


def access(layers: Callable[[], object]) -> float:
    start = time.perf_counter()
    for wq, wk in layers():
        wq.astype(np.float32), wk.astype(np.float32)
    return time.perf_counter() - start


def analyze(layers: Callable[[], object]) -> float:
    start = time.perf_counter()
    for wq, wk in layers():
        group = wq.shape[0] // wk.shape[0]
        head_statistics(wq, np.repeat(wk, group, axis=0))
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="qk-bench-reads-") as tmp:
        root = Path(tmp)
        config = write_checkpoint(root, args.layers, 4096, 32, 8, 128)
        size = os.path.getsize(root / "model.safetensors") / 1e6
        routes = {"checked": checked_layers(root, config), "mapped": mapped_layers(root, config)}
        access(routes["checked"])  # warm the page cache
        best: dict[tuple[str, str], float] = {}
        for _ in range(args.repeats):
            for task, measure in (("access", access), ("analyze", analyze)):
                for name, layers in routes.items():
                    key = (task, name)
                    best[key] = min(best.get(key, float("inf")), measure(layers))
        print(
            f"checkpoint: {args.layers} layers, N = 4096, 32 query / 8 key-value heads, bf16, {size:.0f} MB"
        )
        print(f"load average {os.getloadavg()[0]:.1f}; best of {args.repeats} per route, routes alternated")
        print(f"{'task':10}{'checked s':>12}{'mapped s':>12}{'checked/mapped':>17}")
        for task in ("access", "analyze"):
            c, m = best[(task, "checked")], best[(task, "mapped")]
            print(f"{task:10}{c:12.3f}{m:12.3f}{c / m:17.2f}")


if __name__ == "__main__":
    main()

"""Benchmark of `analyze_model` on a synthetic llama-shaped bfloat16 checkpoint.

Writes a sharded checkpoint (default: 8 layers, N = 4096, 32 query heads,
8 key/value heads, head_dim 128; q/k/v/o projections and norms only) to a
temporary directory, then reports:

- read: time to copy every query and key tensor into memory (np.array);
- analyze: analyze_model(null=False), in a subprocess that also reports its
  peak resident memory (VmHWM, and sampled anonymous / file-backed RSS);
- null laws at the heads' (n, N) and the default sample count, cold and then
  warm from the on-disk cache;
- the dense route (statistics.dense_statistics on L = W_K^T W_Q, N x N) on a
  few heads, per head, against the Gram route per head.

Ratios printed: analyze/read (target <= 2), dense/gram (target >= 10), peak
RSS against 2 x (largest layer's Q+K bytes) + 300 MB. No assertions on time.

    python benchmarks/bench_analyze.py [--layers 8] [--samples 2000] [--dense-heads 2]
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import ml_dtypes
import numpy as np

MB = 1e6


# ----------------------------------------------------------------------------- checkpoint


def write_bf16_safetensors(path: Path, tensors: dict[str, np.ndarray]) -> None:
    """Minimal safetensors writer (bf16/f32): 8-byte header length, JSON header, raw bytes."""
    codes = {np.dtype(ml_dtypes.bfloat16): "BF16", np.dtype(np.float32): "F32"}
    header: dict[str, object] = {"__metadata__": {"format": "pt"}}
    offset = 0
    for name, array in tensors.items():
        size = array.nbytes
        header[name] = {
            "dtype": codes[array.dtype],
            "shape": list(array.shape),
            "data_offsets": [offset, offset + size],
        }
        offset += size
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)  # data starts 8-byte aligned
    with open(path, "wb") as fh:
        fh.write(len(raw).to_bytes(8, "little"))
        fh.write(raw)
        for array in tensors.values():
            fh.write(np.ascontiguousarray(array).tobytes())


def make_checkpoint(
    root: Path,
    *,
    layers: int,
    N: int,
    heads: int,
    kv_heads: int,
    head_dim: int,
    layers_per_shard: int = 2,
    seed: int = 0,
) -> None:
    """A llama-shaped bf16 checkpoint, sharded with model.safetensors.index.json."""
    rng = np.random.default_rng(seed)
    config = {
        "model_type": "llama",
        "num_hidden_layers": layers,
        "num_attention_heads": heads,
        "num_key_value_heads": kv_heads,
        "hidden_size": N,
        "head_dim": head_dim,
        "intermediate_size": 4 * N,
        "torch_dtype": "bfloat16",
    }
    (root / "config.json").write_text(json.dumps(config, indent=1))
    bf16 = ml_dtypes.bfloat16

    def weight(rows: int) -> np.ndarray:
        return (rng.standard_normal((rows, N), dtype=np.float32) * 0.02).astype(bf16)

    filler = weight(256)  # v/o are only needed to make the files realistic in size
    weight_map: dict[str, str] = {}
    n_shards = -(-layers // layers_per_shard)
    for shard in range(n_shards):
        name = f"model-{shard + 1:05d}-of-{n_shards:05d}.safetensors"
        tensors: dict[str, np.ndarray] = {}
        for i in range(shard * layers_per_shard, min(layers, (shard + 1) * layers_per_shard)):
            p = f"model.layers.{i}."
            tensors[p + "self_attn.q_proj.weight"] = weight(heads * head_dim)
            tensors[p + "self_attn.k_proj.weight"] = weight(kv_heads * head_dim)
            tensors[p + "self_attn.v_proj.weight"] = np.tile(filler, (kv_heads * head_dim // 256, 1))
            tensors[p + "self_attn.o_proj.weight"] = np.tile(filler, (heads * head_dim // 256, 1)).T.copy()
            tensors[p + "input_layernorm.weight"] = rng.uniform(0.5, 1.5, N).astype(bf16)
            tensors[p + "post_attention_layernorm.weight"] = np.ones(N, dtype=bf16)
        if shard == n_shards - 1:
            tensors["model.norm.weight"] = np.ones(N, dtype=bf16)
        write_bf16_safetensors(root / name, tensors)
        weight_map.update({t: name for t in tensors})
    index = {
        "metadata": {"total_size": sum((root / f).stat().st_size for f in set(weight_map.values()))},
        "weight_map": weight_map,
    }
    (root / "model.safetensors.index.json").write_text(json.dumps(index, indent=1))


# ----------------------------------------------------------------------------- measurements


def _status_kb(field: str) -> int:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


class RssSampler:
    """Peaks of anonymous and file-backed RSS, sampled every few milliseconds."""

    def __init__(self, interval: float = 0.005) -> None:
        self.interval = interval
        self.peak_anon = self.peak_file = self.peak_total = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            anon, file = _status_kb("RssAnon"), _status_kb("RssFile")
            self.peak_anon = max(self.peak_anon, anon)
            self.peak_file = max(self.peak_file, file)
            self.peak_total = max(self.peak_total, anon + file)
            time.sleep(self.interval)

    def __enter__(self) -> RssSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def child_analyze(model: str) -> None:
    """Subprocess: analyze_model(null=False) with time and peak memory, as one JSON line."""
    from qkenergy.analysis.analyze import analyze_model

    # VmHWM (peak RSS of this process image) rather than ru_maxrss, which on Linux
    # keeps the parent's size at fork time.
    before = _status_kb("VmRSS") * 1024
    with RssSampler() as sampler:
        t0 = time.perf_counter()
        analysis = analyze_model(model, null=False)
        seconds = time.perf_counter() - t0
    peak = _status_kb("VmHWM") * 1024
    print(
        json.dumps(
            {
                "seconds": seconds,
                "rows": len(analysis.heads),
                "rss_after_imports": before,
                "peak_rss": peak,
                "peak_anon": sampler.peak_anon * 1024,
                "peak_file": sampler.peak_file * 1024,
                "median_s": float(analysis.heads["symmetric_energy"].median()),
            }
        )
    )


def time_read(model: Path) -> tuple[float, int, int]:
    """Seconds to copy every q/k tensor into memory; total bytes; largest layer's Q+K bytes."""
    from qkenergy.weights.checkpoint import open_model

    with open_model(model) as source:
        names = [n for n in source.tensors.names if n.endswith(("q_proj.weight", "k_proj.weight"))]
        t0 = time.perf_counter()
        total = 0
        per_layer: dict[str, int] = {}
        for name in names:
            array = np.array(source.tensors.tensor(name))  # a real copy out of the memory map
            total += array.nbytes
            layer = name.split(".layers.")[1].split(".")[0]
            per_layer[layer] = per_layer.get(layer, 0) + array.nbytes
            del array
        return time.perf_counter() - t0, total, max(per_layer.values())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, default=8)
    parser.add_argument("--hidden", type=int, default=4096)
    parser.add_argument("--heads", type=int, default=32)
    parser.add_argument("--kv-heads", type=int, default=8)
    parser.add_argument("--head-dim", type=int, default=128)
    parser.add_argument(
        "--samples", type=int, default=2000, help="null-law samples (default: analyze's default)"
    )
    parser.add_argument("--dense-heads", type=int, default=2, help="heads timed on the dense route")
    parser.add_argument("--child-analyze", metavar="MODEL", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child_analyze:
        child_analyze(args.child_analyze)
        return

    from qkenergy.analysis.nullspec import NullSpec
    from qkenergy.math.statistics import dense_statistics, head_statistics

    print("command:", shlex.join([Path(sys.executable).name, *sys.argv]))
    print(
        f"cpus: {os.cpu_count()}, load average: {', '.join(f'{x:.1f}' for x in os.getloadavg())}, "
        f"OPENBLAS_NUM_THREADS={os.environ.get('OPENBLAS_NUM_THREADS', '(unset)')}"
    )
    L, N, H, Hkv, n = args.layers, args.hidden, args.heads, args.kv_heads, args.head_dim
    with tempfile.TemporaryDirectory(prefix="qkenergy-bench-") as tmp:
        model = Path(tmp) / "model"
        model.mkdir()
        t0 = time.perf_counter()
        make_checkpoint(model, layers=L, N=N, heads=H, kv_heads=Hkv, head_dim=n)
        size = sum(p.stat().st_size for p in model.iterdir())
        print(
            f"checkpoint: llama bf16, {L} layers, N={N}, {H} query / {Hkv} kv heads, head_dim {n}; "
            f"{size / MB:.0f} MB in {len(list(model.glob('*.safetensors')))} shards "
            f"(written in {time.perf_counter() - t0:.1f} s)"
        )

        time_read(model)  # warm the page cache: both sides then read from memory
        read_s, qk_bytes, layer_qk = min((time_read(model) for _ in range(3)), key=lambda r: r[0])
        print(f"read q/k tensors (np.array copies, {qk_bytes / MB:.0f} MB): {read_s:.3f} s")

        out = subprocess.run(
            [sys.executable, __file__, "--child-analyze", str(model)],
            check=True,
            capture_output=True,
            text=True,
        )
        child = json.loads(out.stdout.strip().splitlines()[-1])
        heads_total = child["rows"]
        print(
            f"analyze_model(null=False), {heads_total} heads: {child['seconds']:.2f} s "
            f"({1e3 * child['seconds'] / heads_total:.1f} ms/head)"
        )

        with tempfile.TemporaryDirectory(prefix="qkenergy-null-") as cache:
            t0 = time.perf_counter()
            NullSpec(samples=args.samples).null_law(n, N, cache_dir=cache)
            cold = time.perf_counter() - t0
            t0 = time.perf_counter()
            NullSpec(samples=args.samples).null_law(n, N, cache_dir=cache)
            warm = time.perf_counter() - t0
        print(
            f"null law n={n}, N={N}, {args.samples} samples: cold {cold:.2f} s, warm (disk cache) {warm:.3f} s"
        )

        from qkenergy.weights.architecture import architecture
        from qkenergy.weights.checkpoint import open_model
        from qkenergy.weights.reading import read_layer

        with open_model(model) as source:
            arch = architecture(source.config)
            weights = read_layer(source.tensors, arch, 0)
            wq, wk = weights.w_query, weights.w_key[weights.kv_head]
            t0 = time.perf_counter()
            head_statistics(wq, wk)
            gram_per_head = (time.perf_counter() - t0) / H
            k = max(1, min(args.dense_heads, H))
            t0 = time.perf_counter()
            for h in range(k):
                # The dense route forms L = W_K^T W_Q (N x N) in float64.
                form = wk[h].astype(np.float64).T @ wq[h].astype(np.float64)
                dense_statistics(form)
            dense_per_head = (time.perf_counter() - t0) / k
        print(
            f"gram route: {1e3 * gram_per_head:.1f} ms/head (one layer, {H} heads batched); "
            f"dense route: {dense_per_head:.2f} s/head ({k} heads) -> "
            f"{dense_per_head * heads_total / 60:.1f} min extrapolated to all {heads_total} heads"
        )

        target = 2 * layer_qk + 300 * MB
        print()
        print(f"analyze/read     = {child['seconds'] / read_s:8.1f}   (target <= 2)")
        print(f"dense/gram       = {dense_per_head / gram_per_head:8.1f}   (target >= 10)")
        print(
            f"peak RSS         = {child['peak_rss'] / MB:8.0f} MB (VmHWM; {child['rss_after_imports'] / MB:.0f} MB "
            f"after imports; sampled peaks: anonymous {child['peak_anon'] / MB:.0f} MB, "
            f"file-backed {child['peak_file'] / MB:.0f} MB)"
        )
        print(
            f"  vs 2 x layer Q/K + 300 MB = {target / MB:.0f} MB (largest layer Q+K {layer_qk / MB:.1f} MB): "
            f"ratio {child['peak_rss'] / target:.2f}"
        )
        print(
            f"  increment over imports = {(child['peak_rss'] - child['rss_after_imports']) / MB:.0f} MB "
            f"= {(child['peak_rss'] - child['rss_after_imports']) / layer_qk:.1f} x layer Q/K"
        )


if __name__ == "__main__":
    main()

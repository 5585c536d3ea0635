"""Cost of reading quantised checkpoints (dequantisation included) against reading bf16 of the same shapes.

Writes llama-shaped checkpoints (default: 4 layers, N = 4096, 32 query heads, 8 key-value heads,
head_dim 128; query and key tensors only) once in bfloat16 and once in each quantised layout
that ``qkenergy.weights.quantization`` reads, warms the page cache, then times, in one run and
alternating the layouts, ``reading.read_layer`` over every layer through ``checkpoint.open_model``
(the route analyze takes): for bf16 the checked reads plus the cast to float32 that the Gram
products start with, for the others the checked reads of the stored parts and their
dequantisation to float32. The statistics of one layer's heads (``statistics.head_statistics``)
are timed too, for scale: that is what runs beside the read-ahead of the next layer.

Printed: the best of ``--repeats`` wall and CPU times per layer and per layout, their ratios to
bf16, and the stored size. No assertions.

    python benchmarks/bench_quantization.py [--layers 4] [--repeats 5]
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np

from qkenergy.base.small_floats import as_float
from qkenergy.math.statistics import head_statistics
from qkenergy.weights.architecture import architecture
from qkenergy.weights.checkpoint import open_model
from qkenergy.weights.reading import read_layer

N, HEADS, KV_HEADS, HEAD_DIM = 4096, 32, 8, 128
CODES = {
    np.dtype(ml_dtypes.bfloat16): "BF16",
    np.dtype(ml_dtypes.float8_e4m3fn): "F8_E4M3",
    np.dtype(np.float16): "F16",
    np.dtype(np.float32): "F32",
    np.dtype(np.int32): "I32",
    np.dtype(np.int64): "I64",
}
GROUP = 128


def write(root: Path, tensors: dict[str, np.ndarray], config: dict[str, Any]) -> Path:
    """A safetensors file of ``tensors`` and config.json (a llama config plus ``config``)."""
    root.mkdir()
    header, offset = {}, 0
    for name, array in tensors.items():
        header[name] = {
            "dtype": CODES[array.dtype],
            "shape": list(array.shape),
            "data_offsets": [offset, offset + array.nbytes],
        }
        offset += array.nbytes
    raw = json.dumps(header).encode()
    raw += b" " * (-len(raw) % 8)
    with open(root / "model.safetensors", "wb") as fh:
        fh.write(len(raw).to_bytes(8, "little") + raw)
        for array in tensors.values():
            fh.write(np.ascontiguousarray(array).tobytes())
    llama = {
        "model_type": "llama",
        "num_attention_heads": HEADS,
        "num_key_value_heads": KV_HEADS,
        "hidden_size": N,
        "head_dim": HEAD_DIM,
    }
    (root / "config.json").write_text(json.dumps({**llama, **config}))
    return root


def layouts(layers: int) -> dict[str, tuple[dict[str, np.ndarray], dict[str, Any]]]:
    """Each layout's tensors and config entries."""
    rng = np.random.default_rng(0)
    shapes = {"q_proj": (HEADS * HEAD_DIM, N), "k_proj": (KV_HEADS * HEAD_DIM, N)}

    def words(shape: tuple[int, int]) -> np.ndarray:
        return rng.integers(0, 1 << 32, size=shape, dtype=np.uint64).astype(np.uint32).view(np.int32)

    def scales(shape: tuple[int, int], dtype: Any) -> np.ndarray:
        return (10.0 ** rng.uniform(-3, 0, size=shape)).astype(dtype)

    def fp8(shape: tuple[int, int]) -> np.ndarray:
        return rng.standard_normal(shape, dtype=np.float32).astype(ml_dtypes.float8_e4m3fn)

    out: dict[str, tuple[dict[str, np.ndarray], dict[str, Any]]] = {}
    kinds: dict[str, dict[str, np.ndarray]] = {k: {} for k in ("bf16", "fp8", "fbgemm", "ct-fp8", "ct-int4")}
    kinds.update({"gptq": {}, "gptq-act-order": {}, "awq": {}})
    for i in range(layers):
        for proj, (rows, cols) in shapes.items():
            m = f"model.layers.{i}.self_attn.{proj}"
            kinds["bf16"][m + ".weight"] = rng.standard_normal((rows, cols), np.float32).astype(
                ml_dtypes.bfloat16
            )
            kinds["fp8"][m + ".weight"] = fp8((rows, cols))
            kinds["fp8"][m + ".weight_scale_inv"] = scales((rows // 128, cols // 128), np.float32)
            kinds["fbgemm"][m + ".weight"] = fp8((rows, cols))
            kinds["fbgemm"][m + ".weight_scale"] = scales((rows, 1), np.float32)
            kinds["ct-fp8"][m + ".weight"] = fp8((rows, cols))
            kinds["ct-fp8"][m + ".weight_scale"] = scales((rows, 1), ml_dtypes.bfloat16)
            kinds["ct-int4"][m + ".weight_packed"] = words((rows, cols // 8))
            kinds["ct-int4"][m + ".weight_scale"] = scales((rows, cols // GROUP), ml_dtypes.bfloat16)
            kinds["ct-int4"][m + ".weight_shape"] = np.array([rows, cols], dtype=np.int64)
            for name in ("gptq", "gptq-act-order"):
                kinds[name][m + ".qweight"] = words((cols // 8, rows))
                kinds[name][m + ".qzeros"] = words((cols // GROUP, rows // 8))
                kinds[name][m + ".scales"] = scales((cols // GROUP, rows), np.float16)
            kinds["gptq-act-order"][m + ".g_idx"] = rng.permutation(np.arange(cols) // GROUP).astype(np.int32)
            kinds["awq"][m + ".qweight"] = words((cols, rows // 8))
            kinds["awq"][m + ".qzeros"] = words((cols // GROUP, rows // 8))
            kinds["awq"][m + ".scales"] = scales((cols // GROUP, rows), np.float16)
    gptq = {"quant_method": "gptq", "bits": 4, "group_size": GROUP, "sym": False}
    ct_fp8 = {"num_bits": 8, "type": "float", "strategy": "channel"}
    ct_int4 = {"num_bits": 4, "type": "int", "strategy": "group", "group_size": GROUP}

    def ct(fmt: str, weights: dict[str, Any]) -> dict[str, Any]:
        groups = {"group_0": {"targets": ["Linear"], "weights": weights}}
        return {"quant_method": "compressed-tensors", "format": fmt, "config_groups": groups}

    configs: dict[str, dict[str, Any]] = {
        "bf16": {},
        "fp8": {"quant_method": "fp8", "weight_block_size": [128, 128]},
        "fbgemm": {"quant_method": "fbgemm_fp8"},
        "ct-fp8": ct("float-quantized", ct_fp8),
        "ct-int4": ct("pack-quantized", ct_int4),
        "gptq": {**gptq, "desc_act": False},
        "gptq-act-order": {**gptq, "desc_act": True},
        "awq": {"quant_method": "awq", "bits": 4, "group_size": GROUP, "version": "gemm"},
    }
    for name, tensors in kinds.items():
        quantization = {"quantization_config": configs[name]} if configs[name] else {}
        out[name] = (tensors, {"num_hidden_layers": layers, **quantization})
    return out


def read_all(root: Path) -> tuple[float, float]:
    """(wall, CPU) seconds to read every layer's W_Q, W_K as float32 (dequantised, or cast from bf16).

    The CPU time (this process, every thread) is what a busy machine distorts least.
    """
    start, cpu = time.perf_counter(), time.process_time()
    with open_model(str(root)) as source:
        arch = architecture(source.config)
        for i in range(arch.n_layers):
            w = read_layer(source.tensors, arch, i, prefix="model.")
            as_float(w.w_query, np.float32), as_float(w.w_key, np.float32)  # bf16 as its bits: widened
            del w
    return time.perf_counter() - start, time.process_time() - cpu


def statistics_time(root: Path) -> float:
    with open_model(str(root)) as source:
        w = read_layer(source.tensors, architecture(source.config), 0, prefix="model.")
    start = time.perf_counter()
    head_statistics(w.w_query, w.w_key, kv_head=w.kv_head)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="qk-bench-quant-") as tmp:
        roots = {
            name: write(Path(tmp) / name, tensors, config)
            for name, (tensors, config) in layouts(args.layers).items()
        }
        for root in roots.values():
            read_all(root)  # page cache warm, every route run once
        wall = dict.fromkeys(roots, float("inf"))
        cpu = dict.fromkeys(roots, float("inf"))
        for _ in range(args.repeats):
            for name, root in roots.items():
                w, c = read_all(root)
                wall[name], cpu[name] = min(wall[name], w), min(cpu[name], c)
        stats = statistics_time(roots["bf16"])
        print(
            f"{args.layers} layers of N = {N}, {HEADS} query / {KV_HEADS} key-value heads, head_dim {HEAD_DIM} "
            f"(W_Q and W_K only); load average {os.getloadavg()[0]:.1f}; best of {args.repeats}"
        )
        print(
            f"statistics of one layer's {HEADS} heads (head_statistics, all cores): {1e3 * stats:.0f} ms wall"
        )
        print(
            f"{'layout':16}{'stored MB':>10}{'wall ms/layer':>15}{'x bf16':>8}"
            f"{'CPU ms/layer':>14}{'x bf16':>8}{'wall / statistics':>19}"
        )
        for name, root in roots.items():
            size = os.path.getsize(root / "model.safetensors") / 1e6
            w, c = wall[name] / args.layers, cpu[name] / args.layers
            print(
                f"{name:16}{size:10.0f}{1e3 * w:15.1f}{wall[name] / wall['bf16']:8.2f}"
                f"{1e3 * c:14.1f}{cpu[name] / cpu['bf16']:8.2f}{w / stats:19.2f}"
            )


if __name__ == "__main__":
    main()

"""Cost of reading GGUF weights (checked reads, then the gguf package's numpy dequantisation) against
reading the bfloat16 safetensors of the same shapes.

Writes llama-shaped query and key weights (default: 4 layers, N = 2048, 16 query heads, 4 key-value
heads, head_dim 128) once as a bf16 ``model.safetensors`` (with its config.json) and once per ggml type
as a ``.gguf`` file, warms the page cache, then in one run, alternating the files:

- read: every layer's W_Q and W_K as arrays through the tensor source qkenergy reads them with
  (bf16 as stored, turned into float32 as the Gram route does first; GGUF dequantised to float32);
- analyze: ``analyze_model`` without null laws (read and the statistics of every head), for bf16 and
  the types ``gguf.quants`` can write (Q4_1, Q8_0); the K-quant and IQ files hold random blocks
  (valid to decode, meaningless to analyse), so only their reads are timed.

Printed: the best of ``--repeats`` times per file and its ratio to bf16 safetensors. No assertions.

    python benchmarks/bench_gguf.py [--layers 4] [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import ml_dtypes
import numpy as np

Q = "model.layers.{i}.self_attn.q_proj.weight"
K = "model.layers.{i}.self_attn.k_proj.weight"
WRITTEN = ("Q4_1", "Q8_0")  # quantised by gguf.quants from the same weights
RANDOM_BLOCKS = ("Q4_K", "Q6_K", "IQ4_XS")  # gguf.quants decodes these but cannot write them


def weights(layers: int, N: int, heads: int, kv_heads: int, head_dim: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    out = {}
    for i in range(layers):
        out[Q.format(i=i)] = rng.standard_normal((heads * head_dim, N), dtype=np.float32) * 0.02
        out[K.format(i=i)] = rng.standard_normal((kv_heads * head_dim, N), dtype=np.float32) * 0.02
    return out


def write_safetensors(root: Path, tensors: dict[str, np.ndarray], config: dict) -> Path:
    header, offset = {}, 0
    for name, w in tensors.items():
        header[name] = {
            "dtype": "BF16",
            "shape": list(w.shape),
            "data_offsets": [offset, offset + 2 * w.size],
        }
        offset += 2 * w.size
    raw = json.dumps(header).encode()
    raw += b" " * (-len(raw) % 8)
    with open(root / "model.safetensors", "wb") as fh:
        fh.write(len(raw).to_bytes(8, "little") + raw)
        for w in tensors.values():
            fh.write(w.astype(ml_dtypes.bfloat16).tobytes())
    (root / "config.json").write_text(json.dumps(config))
    return root / "model.safetensors"


def write_gguf(path: Path, tensors: dict[str, np.ndarray], config: dict, qtype: str) -> Path:
    import gguf
    from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType
    from gguf.quants import quantize

    kind = GGMLQuantizationType[qtype]
    block, nbytes = GGML_QUANT_SIZES[kind]
    rng = np.random.default_rng(1)
    writer = gguf.GGUFWriter(path, "llama")
    writer.add_block_count(config["num_hidden_layers"])
    writer.add_embedding_length(config["hidden_size"])
    writer.add_head_count(config["num_attention_heads"])
    writer.add_head_count_kv(config["num_key_value_heads"])
    writer.add_key_length(config["head_dim"])
    for name, w in tensors.items():
        i = name.split(".")[2]
        short = "attn_q" if "q_proj" in name else "attn_k"
        if qtype in WRITTEN:
            data = quantize(w, kind)
        else:
            data = rng.integers(0, 256, (w.shape[0], w.shape[1] // block * nbytes), dtype=np.uint8)
        writer.add_tensor(f"blk.{i}.{short}.weight", data, raw_dtype=kind)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def read_all(path: Path, names: list[str]) -> float:
    from qkenergy.base.small_floats import as_float
    from qkenergy.weights.checkpoint import open_model

    start = time.perf_counter()
    with open_model(str(path)) as source, np.errstate(all="ignore"):  # random blocks: inf scales
        for name in names:
            as_float(source.tensors.tensor(name), np.float32)  # BF16 as its bits: widened exactly
    return time.perf_counter() - start


def analyze(path: Path) -> float:
    from qkenergy.analysis.analyze import analyze_model

    start = time.perf_counter()
    analyze_model(str(path), null=False, progress=False)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    N, heads, kv_heads, head_dim = 2048, 16, 4, 128
    config = {
        "model_type": "llama",
        "num_hidden_layers": args.layers,
        "num_attention_heads": heads,
        "num_key_value_heads": kv_heads,
        "hidden_size": N,
        "head_dim": head_dim,
    }
    tensors = weights(args.layers, N, heads, kv_heads, head_dim)
    names = list(tensors)
    with tempfile.TemporaryDirectory(prefix="qk-bench-gguf-") as tmp:
        root = Path(tmp)
        files = {"bf16 safetensors": write_safetensors(root, tensors, config)}
        for qtype in WRITTEN + RANDOM_BLOCKS:
            files[f"GGUF {qtype}"] = write_gguf(root / f"m-{qtype}.gguf", tensors, config, qtype)
        for path in files.values():
            path.read_bytes()  # page cache
        reads = {label: [] for label in files}
        runs = {label: [] for label in files if label == "bf16 safetensors" or label[5:] in WRITTEN}
        for _ in range(args.repeats):
            for label, path in files.items():
                reads[label].append(read_all(path, names))
                if label in runs:
                    runs[label].append(analyze(path))
    params = sum(w.size for w in tensors.values())
    print(
        f"{args.layers} layers of W_Q [{heads * head_dim}, {N}] and W_K [{kv_heads * head_dim}, {N}]: "
        f"{params / 1e6:.1f} M weights; best of {args.repeats}"
    )
    base_read, base_run = min(reads["bf16 safetensors"]), min(runs["bf16 safetensors"])
    print(f"{'file':<18} {'read s':>8} {'ratio':>6} {'analyze s':>10} {'ratio':>6}")
    for label in files:
        read = min(reads[label])
        line = f"{label:<18} {read:8.3f} {read / base_read:6.2f}"
        if label in runs:
            run = min(runs[label])
            line += f" {run:10.3f} {run / base_run:6.2f}"
        print(line)


if __name__ == "__main__":
    main()

"""What the weight fingerprint of every output costs, against the analysis it describes.

Every table records the SHA-256 of the weight bytes the analysis read (the
safetensors headers and the query and key tensors; docs/columns.md). This
writes the synthetic llama-shaped bfloat16 checkpoint of bench_analyze.py
(default: 4 layers, N = 4096, 32 query / 8 key-value heads, head_dim 128,
2 layers per shard) and reports, in one run:

- fingerprint: provenance.fingerprint_files over the tensors an analysis reads
  (warm page cache: right after an analysis, as in analyze_model);
- analyze: analyze_model(null=False), which includes the fingerprint;
- whole-file SHA-256 of the same shards, the alternative not taken.

Ratios printed: fingerprint/analyze and fingerprint/whole-file. No assertions.

    python benchmarks/bench_fingerprint.py [--layers 4]
"""

from __future__ import annotations

import argparse
import hashlib
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_analyze import make_checkpoint

from qkenergy.analysis.analyze import analyze_model
from qkenergy.formats.provenance import ReadRecorder, fingerprint_files
from qkenergy.weights.architecture import architecture
from qkenergy.weights.checkpoint import open_model
from qkenergy.weights.reading import find_prefix, read_layer


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, default=4)
    args = parser.parse_args()
    print(f"command: python benchmarks/bench_fingerprint.py --layers {args.layers}")
    print(f"cpus: {os.cpu_count()}, load average: {', '.join(f'{x:.1f}' for x in os.getloadavg())}")
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        make_checkpoint(root, layers=args.layers, N=4096, heads=32, kv_heads=8, head_dim=128)
        shards = sorted(root.glob("*.safetensors"))
        total = sum(p.stat().st_size for p in shards)

        with open_model(root) as source:  # the tensors analyze reads, and a warm page cache
            arch = architecture(source.config)
            recorder = ReadRecorder(source.tensors)
            prefix = find_prefix(recorder, arch)
            for layer in range(arch.n_layers):
                read_layer(recorder, arch, layer, prefix=prefix)
            start = time.perf_counter()
            files = fingerprint_files(source.tensors, recorder.read)
            fingerprint = time.perf_counter() - start
        hashed = sum(f["hashed_bytes"] for f in files)

        start = time.perf_counter()
        analyze_model(root, null=False)
        analyze = time.perf_counter() - start

        start = time.perf_counter()
        for path in shards:
            digest = hashlib.sha256()
            with open(path, "rb") as fh:
                while chunk := fh.read(4 << 20):
                    digest.update(chunk)
        whole = time.perf_counter() - start

    print(f"checkpoint: {args.layers} layers, {len(shards)} shards, {total / 1e6:.0f} MB")
    print(f"fingerprint of the tensors read: {hashed / 1e6:.0f} MB in {fingerprint:.3f} s")
    print(f"analyze_model(null=False), fingerprint included: {analyze:.2f} s")
    print(f"whole-file SHA-256 of the shards: {total / 1e6:.0f} MB in {whole:.3f} s")
    print(f"fingerprint/analyze    = {fingerprint / analyze:8.3f}")
    print(f"fingerprint/whole-file = {fingerprint / whole:8.3f}")


if __name__ == "__main__":
    main()

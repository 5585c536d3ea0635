"""How far 4-bit quantisation moves a head's symmetric energy: MiniLM's W_Q, W_K re-quantised to Q4_1.

The embedded decoder (SmolLM2-135M-Instruct) is only available as a Q4_1 GGUF file, so its numbers
are those of 4-bit weights. This script measures what that storage does to trained heads whose
float32 weights are known: every query and key weight of the embedded all-MiniLM-L6-v2 is quantised
to Q4_1 by ``gguf.quants`` (llama.cpp's blocks of 32 along the input dimension, each with a float16
scale and minimum) and read back, and every head's s is computed before and after. The shift is
compared with the spread of the null law of a random head of the same shape (its standard deviation)
and with the distance of the heads from the random baseline. Q8_0 (8-bit) is shown beside it.

    python benchmarks/q4_1_effect.py [--samples 2000] [--seed 0]

An accuracy measurement, not a timing; docs/decoder.md quotes its output and a test keeps the two equal.
"""

from __future__ import annotations

import argparse
from typing import Any

import numpy as np

TYPES = ("Q4_1", "Q8_0")


def requantised(tensors: dict[str, np.ndarray], names: list[str], qtype: str) -> dict[str, np.ndarray]:
    """The tensors with ``names`` stored as ``qtype`` and read back (float32)."""
    from gguf.constants import GGMLQuantizationType
    from gguf.quants import dequantize, quantize

    kind = GGMLQuantizationType[qtype]
    out = dict(tensors)
    for name in names:
        w = np.asarray(tensors[name], dtype=np.float32)
        out[name] = np.asarray(dequantize(quantize(w, kind), kind), dtype=np.float32).reshape(w.shape)
    return out


def measure(samples: int = 2000, seed: int = 0, cache_dir: Any = None) -> dict[str, Any]:
    """Per-head s of MiniLM as stored and re-quantised, and the null law's sd for its head shape."""
    from qkenergy.analysis.analyze import analyze_model
    from qkenergy.analysis.nullspec import NullSpec
    from qkenergy.weights.checkpoint import open_model

    with open_model("minilm") as source:
        config = dict(source.config)
        tensors = {name: source.tensors.tensor(name) for name in source.tensors.names}
    qk = [m for m in tensors if m.endswith(("attention.self.query.weight", "attention.self.key.weight"))]
    plain = analyze_model(tensors, config=config, null=False, progress=False)
    s = np.asarray(plain.columns["symmetric_energy"])
    n, N = int(plain.columns["n"][0]), int(plain.columns["N"][0])
    law = NullSpec(samples=samples, seed=seed).null_law(
        n, N, cache_dir=cache_dir, names=("symmetric_energy",)
    )
    sd = float(np.std(law.samples("symmetric_energy"), ddof=1))
    baseline = (N + 1) / (2 * N)
    out: dict[str, Any] = {"heads": s.size, "n": n, "N": N, "samples": samples, "sd": sd, "s": s}
    out["distance"] = float(np.median(np.abs(s - baseline)))
    for qtype in TYPES:
        result = analyze_model(requantised(tensors, qk, qtype), config=config, null=False, progress=False)
        moved = np.asarray(result.columns["symmetric_energy"])
        types = np.asarray(result.columns["head_type"]) != np.asarray(plain.columns["head_type"])
        out[qtype] = {
            "delta": moved - s,
            "towards": int(np.sum(np.abs(moved - baseline) < np.abs(s - baseline))),
            "side_changes": int(np.sum(np.sign(moved - baseline) != np.sign(s - baseline))),
            "type_changes": int(types.sum()),
        }
    return out


def report(m: dict[str, Any]) -> str:
    """The lines the script prints."""
    lines = [
        f"all-MiniLM-L6-v2: {m['heads']} heads (n = {m['n']}, N = {m['N']}); W_Q and W_K re-quantised "
        "with gguf.quants",
        f"null sd of s for this shape: {m['sd']:.6f} ({m['samples']} samples); median |s - baseline| of "
        f"the trained heads: {m['distance']:.4f} ({m['distance'] / m['sd']:.1f} sd)",
        "type  max |ds|  median |ds|  max/sd  median/sd  towards baseline  side changed  type changed",
    ]
    for qtype in TYPES:
        q = m[qtype]
        d = np.abs(q["delta"])
        lines.append(
            f"{qtype:<5} {d.max():8.6f}  {np.median(d):11.6f}  {d.max() / m['sd']:6.2f}  "
            f"{np.median(d) / m['sd']:9.2f}  {q['towards']:>16d}  {q['side_changes']:>12d}  "
            f"{q['type_changes']:>12d}"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    print(report(measure(args.samples, args.seed)))


if __name__ == "__main__":
    main()

"""OpenBLAS's own kernels against the ones qkenergy's command line asks for, on this CPU.

OpenBLAS chooses its kernels when it is loaded; OPENBLAS_CORETYPE overrides
the choice (qkenergy.base.blas_kernels sets it to Haswell on AMD Zen 4). Each
candidate runs in a child process of its own, one BLAS thread, and times
the products and factorisations of a run: a query head's G_QQ (rank-k
update), a key head's query-key blocks, a gpt2-shaped G in float64, the
Cholesky factor and the eigenvalues of a 256 x 256 core, a 128 x 128
eigvalsh (the singular values of L), one llama-shaped layer of
head_statistics (32 heads, 8 kv heads, n = 128, N = 4096, bfloat16) and
200 samples of the null law at (128, 4096). Rounds are interleaved and the
best of each is kept; ratios are throughput against OpenBLAS's own choice,
measured in this run. Then how far each candidate's kernels move the
statistics of that layer and of a gpt2-shaped float32 one (rounding only).
Prints; asserts nothing.

    python benchmarks/bench_blas_kernels.py [--kernels Haswell,SkylakeX] [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

SRC = Path(__file__).resolve().parents[1] / "src"
OWN = "OpenBLAS's own"


def best_ms(step: Callable[[], Any], repeats: int) -> float:
    step()
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        step()
        best = min(best, time.perf_counter() - start)
    return 1e3 * best


def child() -> None:
    import ml_dtypes
    import numpy as np
    from threadpoolctl import threadpool_info

    from qkenergy.math import nulls
    from qkenergy.math.statistics import STATISTICS, head_statistics

    rng = np.random.default_rng(0)
    w_q = rng.standard_normal((32, 128, 4096)).astype(np.float32)
    w_k = rng.standard_normal((8, 128, 4096)).astype(np.float32)
    a, b = w_q[0], w_q[:4].reshape(-1, 4096)
    c = rng.standard_normal((128, 768))
    g = c.T[:256] @ c[:, :256] + 256 * np.eye(256)
    core = g + g.T
    zz = g[:128, :128]
    bf_q, bf_k = w_q.astype(ml_dtypes.bfloat16), w_k.astype(ml_dtypes.bfloat16)
    kv = np.repeat(np.arange(8), 4)
    steps: dict[str, tuple[Callable[[], Any], int]] = {
        "G_QQ: 128 x 4096 rank-k update, float32": (lambda: a @ a.T, 30),
        "G_QK: (512 x 4096)(4096 x 128), float32": (lambda: b @ a.T, 15),
        "gpt2 G = C C^T, C 128 x 768, float64": (lambda: c @ c.T, 30),
        "Cholesky factor, 256 x 256": (lambda: np.linalg.cholesky(g), 30),
        "eigvalsh, 256 x 256 core": (lambda: np.linalg.eigvalsh(core), 20),
        "eigvalsh, 128 x 128 (h)": (lambda: np.linalg.eigvalsh(zz), 30),
        "head_statistics, llama layer, bf16": (lambda: head_statistics(bf_q, bf_k, kv_head=kv, threads=1), 3),
        "null law (128, 4096), 200 samples": (
            lambda: nulls.null_law(128, 4096, samples=200, seed=0, threads=1, names=nulls.NULL_STATISTICS),
            2,
        ),
    }
    times = {name: best_ms(step, repeats) for name, (step, repeats) in steps.items()}
    kernels = sorted(
        {str(lib.get("architecture")) for lib in threadpool_info() if lib.get("user_api") == "blas"}
    )
    # the statistics themselves, to show how far the kernels move them
    gpt2_q, gpt2_k = rng.standard_normal((2, 12, 64, 768)).astype(np.float32)
    values = {
        "llama layer, bfloat16 weights (float32 products)": head_statistics(
            bf_q, bf_k, kv_head=kv, threads=1
        ),
        "gpt2 layer, float32 weights (float64 products)": head_statistics(gpt2_q, gpt2_k, threads=1),
    }
    stacks = {name: got.stack(STATISTICS).tolist() for name, got in values.items()}
    print(json.dumps({"times": times, "kernels": kernels, "statistics": stacks}))


def run_child(coretype: str | None) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": str(SRC), "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"}
    env.pop("OPENBLAS_CORETYPE", None)
    if coretype is not None:
        env["OPENBLAS_CORETYPE"] = coretype
    out = subprocess.run(
        [sys.executable, __file__, "--child"], env=env, capture_output=True, text=True, check=True
    )
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


def main() -> None:
    import numpy as np

    from qkenergy.base.blas_kernels import first_processor, preferred_kernels

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--kernels", default="Haswell", help="OPENBLAS_CORETYPE values to compare, comma-separated"
    )
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child()
        return
    candidates: list[str | None] = [None, *args.kernels.split(",")]
    best: dict[str | None, dict[str, float]] = {}
    chosen: dict[str | None, list[str]] = {}
    statistics: dict[str | None, dict[str, list[list[float]]]] = {}
    for _ in range(args.rounds):
        for coretype in candidates:
            result = run_child(coretype)
            chosen[coretype] = result["kernels"]
            statistics[coretype] = result["statistics"]
            for name, ms in result["times"].items():
                best.setdefault(coretype, {})[name] = min(best.get(coretype, {}).get(name, float("inf")), ms)
    try:
        cpu = Path("/proc/cpuinfo").read_text()
    except OSError:
        cpu = ""
    first = first_processor(cpu)
    vendor, name, family, number = (
        first.get(k, "?") for k in ("vendor_id", "model name", "cpu family", "model")
    )
    model = f"{vendor} {name}, family {family} model {number}"
    print(f"CPU: {model}; qkenergy's command line asks for: {preferred_kernels(cpu) or OWN + ' choice'}")
    print(
        f"one BLAS thread, best of {args.rounds} interleaved rounds; load average {os.getloadavg()[0]:.1f}\n"
    )
    labels = {c: f"{OWN} ({', '.join(chosen[c])})" if c is None else c for c in candidates}
    print(f"best ms; (x): throughput against {labels[None]}\n")
    print(f"{'':42s}" + "".join(f"{labels[c]:>24s}" for c in candidates))
    for name in best[None]:
        cells = [f"{best[None][name]:.2f}"]
        cells += [f"{best[c][name]:.2f} ({best[None][name] / best[c][name]:.2f}x)" for c in candidates[1:]]
        print(f"{name:42s}" + "".join(f"{cell:>24s}" for cell in cells))
    print("\nlargest change of any statistic against OpenBLAS's own kernels (relative, or absolute below 1)")
    for name in statistics[None]:
        before = np.array(statistics[None][name], dtype=float)
        cells = []
        for c in candidates[1:]:
            error = np.abs(np.array(statistics[c][name], dtype=float) - before) / np.maximum(
                np.abs(before), 1.0
            )
            cells.append(f"{np.nanmax(error):.1e}")
        print(f"{name:50s}" + "".join(f"{cell:>16s}" for cell in cells))
    print("\ncommand:", shlex.join(["python", *sys.argv]))


if __name__ == "__main__":
    main()

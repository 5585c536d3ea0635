"""Per-head compute of whole checkpoints, this tree against an older one, on one core.

What `analyze --no-null` computes per layer, without its tables and files:
read_layer, then head_statistics on one thread, with BLAS on one thread and
the process pinned to one core. The two source trees run alternately
(``--repeats`` rounds each, so a change of load is not taken for a change of
speed); printed are the minima of the whole loop and of each layer (the median
over layers of the per-layer minima, so the first layer's warm-up does not
count there), their ratios, the load average, and whether the statistics of
the two trees are bitwise equal (else the largest difference relative to
max(|value|, 1), as tests/cross/test_issue7_reference.py measures it). Nothing is
asserted. Checkpoints are bench_speed's synthetic gpt2, llama and llama-8192
shapes, built in ``--checkpoints`` (kept) or a temporary directory.

    python benchmarks/bench_head_compute.py --before /path/to/old/src [--shapes gpt2,llama] [--repeats 5]

``--this-env NAME=VALUE`` sets an environment variable for this tree's runs
only: with ``--before src`` (this tree again) it measures a setting alone,
e.g. glibc's allocator thresholds (MALLOC_MMAP_THRESHOLD_, MALLOC_TRIM_THRESHOLD_).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
SRC = HERE.parent / "src"


def child(model: str, output: str) -> None:
    """One run in this process (qkenergy from PYTHONPATH): JSON of the loop's and each layer's seconds."""
    from qkenergy.math.statistics import STATISTICS, head_statistics
    from qkenergy.weights.architecture import architecture
    from qkenergy.weights.checkpoint import open_model
    from qkenergy.weights.reading import read_layer

    os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
    layers, values = [], []
    start = time.perf_counter()
    with open_model(model) as source:
        arch = architecture(source.config)
        for layer in range(arch.n_layers):
            begun = time.perf_counter()
            weights = read_layer(source.tensors, arch, layer)
            stats = head_statistics(
                weights.w_query, weights.w_key, kv_head=weights.kv_head, heads=np.arange(arch.n_heads)
            )
            stats.columns()
            layers.append(time.perf_counter() - begun)
            values.append(stats.stack(STATISTICS))
    total = time.perf_counter() - start
    np.save(output, np.concatenate(values))
    print(json.dumps({"total": total, "layers": layers}))


def run(src: Path, model: Path, output: Path, extra: dict[str, str]) -> dict[str, Any]:
    env = dict(os.environ, PYTHONPATH=str(src), OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1", **extra)
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # compile each tree once, not at every run
    cmd = [sys.executable, __file__, "--child", str(model), str(output)]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True)
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def compare(model: Path, before: Path, repeats: int, work: Path, this_env: dict[str, str]) -> None:
    trees = {"this tree": (SRC, this_env), "before": (before, {})}
    times: dict[str, list[dict[str, Any]]] = {name: [] for name in trees}
    for _ in range(repeats):
        for name, (src, extra) in trees.items():
            times[name].append(run(src, model, work / f"{name.replace(' ', '_')}.npy", extra))
    print(f"-- {model.name} (load average {os.getloadavg()[0]:.1f}, {repeats} rounds, one core)")
    best = {}
    for name in trees:
        total = min(t["total"] for t in times[name])
        per_layer = float(np.median(np.min([t["layers"] for t in times[name]], axis=0)))
        best[name] = (total, per_layer)
        print(f"   {name:10s} whole loop {total:7.3f} s   per layer {1e3 * per_layer:7.1f} ms")
    (new_total, new_layer), (old_total, old_layer) = best["this tree"], best["before"]
    print(f"   speed-up: whole loop {old_total / new_total:.2f}x, per layer {old_layer / new_layer:.2f}x")
    new, old = np.load(work / "this_tree.npy"), np.load(work / "before.npy")
    if np.array_equal(new, old, equal_nan=True):
        print("   statistics bitwise equal")
    else:
        error = np.where(np.isnan(old), 0.0, np.abs(new - old) / np.maximum(np.abs(old), 1.0))
        same_nan = np.array_equal(np.isnan(new), np.isnan(old))
        print(
            f"   statistics differ: largest relative difference {np.nanmax(error):.1e}, NaN equal {same_nan}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", type=Path, help="src/ of an older qkenergy to compare")
    parser.add_argument("--shapes", default="gpt2,llama", help="of bench_speed.RUN_SHAPES (also llama-8192)")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--checkpoints", type=Path, help="directory to build (and keep) checkpoints in")
    parser.add_argument("--this-env", action="append", default=[], metavar="NAME=VALUE")
    parser.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(*args.child)
        return
    if args.before is None:
        parser.error("--before SRC is required")
    if not all("=" in item for item in args.this_env):
        parser.error("--this-env takes NAME=VALUE")
    this_env = dict(item.split("=", 1) for item in args.this_env)
    sys.path.insert(0, str(HERE))
    from bench_speed import RUN_SHAPES, build

    with tempfile.TemporaryDirectory() as tmp:
        root = args.checkpoints or Path(tmp)
        for label in args.shapes.split(","):
            compare(build(root, RUN_SHAPES[label]), args.before, args.repeats, Path(tmp), this_env)


if __name__ == "__main__":
    main()

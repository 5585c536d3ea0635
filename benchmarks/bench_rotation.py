"""Benchmark of the rotation null and the per-layer null (docs/statistics.md).

Reports, in one run (the machine is shared and noisy, so only ratios within
the run mean something):

- a 7B-shaped head (n = 128, N = 4096): seconds per draw of the rotation null
  by the exact block sampler, for s alone and for s, pairing and
  lobe_departure, against rotating W_Q by a directly sampled Haar U (QR of an
  N x N Gaussian matrix); ratio direct / exact;
- extrapolated cost of `--null rotation` on a 7B model (32 layers x 32 heads)
  at the default draws per head;
- MiniLM (n = 32, N = 384): the rotation null of one head (default draws) and
  `analyze --null both` end to end, CPU seconds and wall seconds;
- the per-layer null at MiniLM's layer shape (n = N = 384): seconds per draw on
  the dense and Gram routes; ratio gram / dense (the route analyze picks is
  the cheaper by flop count).

    python benchmarks/bench_rotation.py [--draws 20] [--direct-draws 2]
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from qkenergy.analysis.analyze import ROTATION_SAMPLES, analyze_model
from qkenergy.math import layer_null, rotation
from qkenergy.math.gram import head_gram
from qkenergy.math.statistics import head_statistics


def _timed(func, *args, **kwargs) -> tuple[float, float]:
    """(wall seconds, CPU seconds of this process) of one call."""
    wall, cpu = time.perf_counter(), time.process_time()
    func(*args, **kwargs)
    return time.perf_counter() - wall, time.process_time() - cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--draws", type=int, default=20, help="exact rotation draws on the 7B head")
    parser.add_argument("--direct-draws", type=int, default=2, help="direct Haar draws on the 7B head")
    args = parser.parse_args()
    rng = np.random.default_rng(0)

    n, N = 128, 4096
    w_query, w_key = rng.standard_normal((2, n, N))
    G = head_gram(w_query, w_key)
    s_only, _ = _timed(rotation.rotation_law, G, N, samples=args.draws, names=("symmetric_energy",))
    full, _ = _timed(rotation.rotation_law, G, N, samples=args.draws)

    def direct() -> None:
        U = rotation.haar_orthogonal(np.random.default_rng(1), N, args.direct_draws)
        head_statistics(w_query[None] @ U, np.broadcast_to(w_key, (args.direct_draws, n, N)))

    direct_s, _ = _timed(direct)
    per_draw = {"s only": s_only / args.draws, "s, pairing, lobe": full / args.draws}
    per_direct = direct_s / args.direct_draws
    print(f"7B-shaped head (n = {n}, N = {N}), seconds per draw:")
    for label, value in per_draw.items():
        print(f"  exact block sampler, {label}: {value:.4f}")
    print(f"  direct Haar U (QR of N x N) + statistics: {per_direct:.3f}")
    print(f"  ratio direct / exact (s, pairing, lobe): {per_direct / per_draw['s, pairing, lobe']:.0f}")
    heads = 32 * 32
    print(
        f"  --null rotation on a 7B model ({heads} heads x {ROTATION_SAMPLES} draws): about "
        f"{heads * ROTATION_SAMPLES * per_draw['s, pairing, lobe'] / 3600:.1f} h on one core "
        f"({heads * ROTATION_SAMPLES * per_draw['s only'] / 3600:.1f} h for s alone)"
    )

    n, N = 32, 384
    w_query, w_key = rng.standard_normal((2, n, N))
    wall, cpu = _timed(rotation.rotation_law, head_gram(w_query, w_key), N, samples=ROTATION_SAMPLES)
    print(f"MiniLM-shaped head (n = {n}, N = {N}), {ROTATION_SAMPLES} rotation draws: {wall:.2f} s wall")
    wall, cpu = _timed(analyze_model, null_kind="both")
    print(f"analyze --null both on MiniLM (72 heads, no cache): {wall:.1f} s wall, {cpu:.1f} s CPU")

    draws = 16
    dense, _ = _timed(layer_null.layer_null_samples, rng, [1] * 12, 32, 384, draws, route="dense")
    gram, _ = _timed(layer_null.layer_null_samples, rng, [1] * 12, 32, 384, draws, route="gram")
    print(
        f"per-layer null, MiniLM layer (n = N = 384), seconds per draw: dense {dense / draws:.4f}, "
        f"gram {gram / draws:.4f}; ratio gram / dense {gram / dense:.1f} "
        f"(flops ratio {layer_null.layer_null_flops(384, 384, 1, 'gram') / layer_null.layer_null_flops(384, 384, 1, 'dense'):.0f})"
    )
    print(
        f"per-layer null, 7B layer (n = N = 4096), {2000} draws: "
        f"{layer_null.layer_null_flops(4096, 4096, 2000):.1e} flops (not drawn by analyze: limit 1e12)"
    )


if __name__ == "__main__":
    main()

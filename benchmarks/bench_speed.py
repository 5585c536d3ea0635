"""End-to-end speed of qkenergy against the paper's route, the code before (--before) and the machine's floor.

Every figure is a ratio measured in this run (the machine is shared and noisy);
nothing is asserted. Sections (``--only``, comma-separated; default all but
``stream``):

- ``startup``: `python -c pass`, `import qkenergy`, `qkenergy --help` (medians of 7).
- ``runs``: whole `qkenergy analyze MODEL --no-null --threads 1` runs, start-up
  included, with BLAS on one thread (interleaved with the runs they are compared with), on synthetic gpt2 (N = 768, 144 heads,
  float32), llama (N = 4096, 32 query / 8 key heads, bf16) and N = 8192
  (64 / 8 heads, bf16) checkpoints, against the paper's route (per head: QR of
  [W_K^T W_Q^T] in float64, the reduced 2n x 2n form, eigvalsh and two SVDs;
  :func:`paper_route`, reading through the same reader) and, with
  ``--before SRC``, the same command on an older source tree. Then the same
  run on two threads, on two threads beside a process spinning on one
  core, and both commands as a user runs them (qkenergy's default threads,
  numpy's default BLAS threads for the paper's route). Floors: one BLAS GEMM of the Gram products' flop count, one 2n x 2n
  eigvalsh per head, and copying the Q/K bytes from the page cache; the
  paper's route over (floor + the start-up of ``qkenergy --help``) is the
  most this route can give on one thread on the machine. Where
  qkenergy's command line asks OpenBLAS for other kernels than its own choice
  (qkenergy.base.blas_kernels: AVX2 ones on AMD Zen 4), the paper's route and the
  code before are also timed with those kernels ("with ... kernels too").
- ``null``: the null law at (128, 4096) for the three null statistics, per
  sample on one and on two threads (2000 samples, cold), peak RSS, in
  ``--repeats`` interleaved rounds; floor: one 2n x 2n eigvalsh per sample;
  with ``--before``, the old null law in the same rounds (all statistics if
  that code cannot draw only three).
- ``memory``: peak RSS of analyze at N = 8192 and N = 16384 against
  2 x the largest layer's Q/K bytes + 300 MB.
- ``stream``: a Llama-3-405B-shaped slice (hidden 16384, 128 query / 8 key
  heads, head_dim 128, bf16, ``--stream-layers`` layers, one per shard, v/o
  included), cold page cache (posix_fadvise DONTNEED) and warm, extrapolated
  to 126 layers; the paper's route timed on a few heads and extrapolated.

Checkpoints live in a temporary directory, deleted at the end, with the
bytecode the children compile (each source tree once, as an installed package).

    python benchmarks/bench_speed.py [--only startup,runs,null,memory,stream] [--before /path/to/old/src]
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import shlex
import statistics as pystats
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import ml_dtypes
import numpy as np

HERE = Path(__file__).resolve().parent
SRC = HERE.parent / "src"
sys.path.insert(0, str(HERE))
from bench_analyze import write_bf16_safetensors  # noqa: E402

MB = 1e6


def asked_kernels() -> str | None:
    """The OpenBLAS kernels qkenergy's command line asks for here (None: OpenBLAS's own choice stands).

    Imported here, in the parent only: a child running this file with an older tree on
    PYTHONPATH must import that tree's qkenergy, which may not have the module.
    """
    if "OPENBLAS_CORETYPE" in os.environ:
        return None
    sys.path.append(str(SRC))
    from qkenergy.base.blas_kernels import preferred_kernels

    try:
        return preferred_kernels(Path("/proc/cpuinfo").read_text())
    except OSError:
        return None


ONE_THREAD = {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


# ----------------------------------------------------------------------------- checkpoints


def make_llama(root: Path, *, layers: int, N: int, heads: int, kv_heads: int, head_dim: int = 128) -> None:
    """A llama-shaped bf16 checkpoint, one layer per shard, q/k/v/o projections (v/o as filler)."""
    rng = np.random.default_rng(0)
    root.mkdir(parents=True, exist_ok=True)
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
    (root / "config.json").write_text(json.dumps(config))

    def weight(rows: int) -> np.ndarray:
        out = np.empty((rows, N), ml_dtypes.bfloat16)
        for lo in range(0, rows, 1024):  # a few rows at a time: float32 temporaries stay small
            hi = min(rows, lo + 1024)
            out[lo:hi] = rng.standard_normal((hi - lo, N), dtype=np.float32) * 0.02
        return out

    filler = weight(128)
    weight_map: dict[str, str] = {}
    for i in range(layers):
        name = f"model-{i + 1:05d}-of-{layers:05d}.safetensors"
        p = f"model.layers.{i}."
        tensors = {
            p + "self_attn.q_proj.weight": weight(heads * head_dim),
            p + "self_attn.k_proj.weight": weight(kv_heads * head_dim),
            p + "self_attn.v_proj.weight": np.tile(filler, (kv_heads * head_dim // 128, 1)),
            p + "self_attn.o_proj.weight": np.tile(filler, (heads * head_dim // 128, 1)),
            p + "input_layernorm.weight": np.ones(N, ml_dtypes.bfloat16),
        }
        write_bf16_safetensors(root / name, tensors)
        weight_map.update({t: name for t in tensors})
        del tensors
    (root / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))


def make_gpt2(root: Path, *, layers: int = 12, N: int = 768, heads: int = 12) -> None:
    """A gpt2-shaped float32 checkpoint (Conv1D c_attn [N, 3N])."""
    rng = np.random.default_rng(0)
    root.mkdir(parents=True, exist_ok=True)
    config = {"model_type": "gpt2", "n_layer": layers, "n_head": heads, "n_embd": N}
    (root / "config.json").write_text(json.dumps(config))
    tensors = {}
    for i in range(layers):
        tensors[f"h.{i}.attn.c_attn.weight"] = rng.standard_normal((N, 3 * N), dtype=np.float32) * 0.02
        tensors[f"h.{i}.ln_1.weight"] = np.ones(N, np.float32)
    write_bf16_safetensors(root / "model.safetensors", tensors)


def drop_page_cache(root: Path) -> None:
    """Evict the checkpoint's files from the page cache (posix_fadvise DONTNEED)."""
    for path in root.glob("*.safetensors"):
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fdatasync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


# ----------------------------------------------------------------------------- the paper's route


def paper_route(model: str, output: str, max_heads: int | None = None) -> None:
    """Per head: QR of [W_K^T W_Q^T] (float64), reduced form F = R_K R_Q^T, eigvalsh and two SVDs.

    With C^T = [W_K^T W_Q^T] = Q R, L = W_K^T W_Q = Q (R_K R_Q^T) Q^T, so S and T
    have the spectra of the symmetric and skew parts of F, and L the singular
    values of F. Writes symmetric_energy, pairing, lobe_departure and the
    leading share per head to a CSV. Reading goes through qkenergy's reader (bf16
    read without ml_dtypes: its 0.6 s import left the paper's route's start-up as well as ours).
    """
    from qkenergy.base.small_floats import as_float
    from qkenergy.weights.architecture import architecture
    from qkenergy.weights.checkpoint import open_model
    from qkenergy.weights.reading import read_layer

    rows = []
    done = 0
    with open_model(model) as source:
        arch = architecture(source.config)
        for layer in range(arch.n_layers):
            weights = read_layer(source.tensors, arch, layer)
            n = arch.head_dim
            for h in range(arch.n_heads):
                wq = as_float(weights.w_query[h], np.float64)  # bf16 as its bits: widened exactly
                wk = as_float(weights.w_key[weights.kv_head[h]], np.float64)
                R = np.linalg.qr(np.concatenate([wk.T, wq.T], axis=1), mode="r")
                F = R[:, :n] @ R[:, n:].T
                eigs = np.linalg.eigvalsh(0.5 * (F + F.T))
                skew = np.linalg.svd(0.5 * (F - F.T), compute_uv=False)
                sv = np.linalg.svd(F, compute_uv=False)
                s_sq, t_sq = float(np.sum(eigs**2)), float(np.sum(skew**2))
                alpha = np.sort(eigs[eigs > 0])[::-1]
                beta = np.sort(-eigs[eigs < 0])[::-1]
                m = max(len(alpha), len(beta))
                alpha, beta = np.pad(alpha, (0, m - len(alpha))), np.pad(beta, (0, m - len(beta)))
                rho = np.linalg.norm(beta) / np.linalg.norm(alpha)
                rows.append(
                    (
                        layer,
                        h,
                        s_sq / (s_sq + t_sq),
                        1 - np.linalg.norm(alpha - beta) / np.sqrt(s_sq),
                        np.linalg.norm(beta - rho * alpha) / np.linalg.norm(beta),
                        sv[0] ** 2 / np.sum(sv**2),
                    )
                )
                done += 1
                if max_heads is not None and done >= max_heads:
                    break
            del weights
            if max_heads is not None and done >= max_heads:
                break
    with open(output, "w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(["layer", "head", "symmetric_energy", "pairing", "lobe_departure", "leading_share"])
        writer.writerows(rows)


# ----------------------------------------------------------------------------- helpers


def timed(
    cmd: list[str], env: dict[str, str] | None = None, src: Path = SRC, one_core: bool = False
) -> tuple[float, int]:
    """Wall seconds of a subprocess and its peak RSS (bytes, from the child's wait4 rusage).

    ``one_core``: the child (and its threads) may run on CPU 0 only.
    """
    full_env = {**os.environ, "PYTHONPATH": str(src), **(env or {})}
    pin = (lambda: os.sched_setaffinity(0, {0})) if one_core else None
    with tempfile.TemporaryFile() as err:
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, env=full_env, stdout=subprocess.DEVNULL, stderr=err, preexec_fn=pin)
        _, status, usage = os.wait4(proc.pid, 0)
        seconds = time.perf_counter() - t0
        proc.returncode = status
        if status != 0:
            err.seek(0)
            raise SystemExit(f"failed ({status}): {shlex.join(cmd)}\n{err.read().decode()}")
    return seconds, usage.ru_maxrss * 1024


# Runs the CLI as the `qkenergy` script does (qkenergy.console:main; `python -m qkenergy.cli` in
# trees older than that entry point) and, at exit, writes the process's own peak RSS (VmHWM) to
# $QK_BENCH_HWM: wait4's ru_maxrss would report the benchmark's own size at fork when that is larger.
_WRAP = (
    "import atexit, os, runpy, sys\n"
    "def hwm():\n"
    "    with open('/proc/self/status') as f:\n"
    "        kb = [l.split()[1] for l in f if l.startswith('VmHWM')][0]\n"
    "    open(os.environ['QK_BENCH_HWM'], 'w').write(kb)\n"
    "atexit.register(hwm)\n"
    "sys.argv = ['qkenergy', *sys.argv[1:]]\n"
    "try:\n"
    "    from qkenergy.console import main\n"
    "except ImportError:\n"
    "    runpy.run_module('qkenergy.cli', run_name='__main__')\n"
    "else:\n"
    "    main()\n"
)


def qkenergy_cmd(*args: str) -> list[str]:
    return [sys.executable, "-c", _WRAP, *args]


def timed_hwm(cmd: list[str], env: dict[str, str] | None = None, src: Path = SRC) -> tuple[float, int]:
    """:func:`timed` of a :func:`qkenergy_cmd`, with the child's own peak RSS (bytes)."""
    with tempfile.NamedTemporaryFile() as hwm:
        seconds, _ = timed(cmd, env={**(env or {}), "QK_BENCH_HWM": hwm.name}, src=src)
        return seconds, int(Path(hwm.name).read_text()) * 1024


def median_time(cmd: list[str], repeats: int = 7, **kw: object) -> float:
    return pystats.median(timed(cmd, **kw)[0] for _ in range(repeats))  # type: ignore[arg-type]


def gemm_seconds(flops: float, dtype: type) -> float:
    """Seconds of one square GEMM with ``flops`` floating-point operations, one BLAS thread."""
    from threadpoolctl import threadpool_limits

    size = min(4096, max(64, round((flops / 2) ** (1 / 3))))
    a = np.ones((size, size), dtype)
    with threadpool_limits(1, user_api="blas"):
        a @ a
        t0 = time.perf_counter()
        a @ a
        return (time.perf_counter() - t0) * flops / (2 * size**3)


def eigvalsh_seconds(p: int, count: int = 64) -> float:
    """Seconds per p x p symmetric eigvalsh (eigenvalues only), one BLAS thread."""
    from threadpoolctl import threadpool_limits

    rng = np.random.default_rng(0)
    a = rng.standard_normal((count, p, p))
    # Each matrix in Fortran order, the fastest layout (numpy's copy for LAPACK reads contiguous columns).
    a = np.swapaxes(a + np.swapaxes(a, 1, 2), 1, 2)
    with threadpool_limits(1, user_api="blas"):
        np.linalg.eigvalsh(a[:4])
        t0 = time.perf_counter()
        np.linalg.eigvalsh(a)
        return (time.perf_counter() - t0) / count


def read_seconds(model: Path) -> tuple[float, int, int]:
    """Copy every Q/K tensor out of the page cache: seconds, total bytes, largest layer's bytes."""
    sys.path.insert(0, str(SRC))
    from qkenergy.weights.checkpoint import open_model

    with open_model(model) as source:
        names = [
            n for n in source.tensors.names if n.endswith(("q_proj.weight", "k_proj.weight", "c_attn.weight"))
        ]
        for name in names:
            np.array(source.tensors.tensor(name))  # warm the cache
        t0 = time.perf_counter()
        total, per_layer = 0, {}
        for name in names:
            size = np.array(source.tensors.tensor(name)).nbytes
            if name.endswith("c_attn.weight"):
                size = size * 2 // 3  # q and k of the fused q, k, v
            total += size
            key = name.split(".layers.")[-1].split(".")[0] if ".layers." in name else name.split(".")[1]
            per_layer[key] = per_layer.get(key, 0) + size
        return time.perf_counter() - t0, total, max(per_layer.values())


class Spinner:
    """A neighbour: a process spinning on core 0 (the speed target's "busy neighbour")."""

    def __enter__(self) -> Spinner:
        self.proc = subprocess.Popen(
            [sys.executable, "-c", "import os; os.sched_setaffinity(0, {0})\nwhile True: pass"]
        )
        time.sleep(0.3)
        return self

    def __exit__(self, *exc: object) -> None:
        self.proc.kill()
        self.proc.wait()


def ratio(a: float, b: float) -> str:
    return f"{a / b:6.2f}x"


# ----------------------------------------------------------------------------- sections


_HEAVY_PROBE = (
    "import sys, qkenergy.analysis.analyze\n"
    "heavy = ('pandas', 'pyarrow', 'scipy', 'matplotlib', 'dask')\n"
    "print(', '.join(m for m in heavy if m in sys.modules))\n"
)


def section_startup(args: argparse.Namespace) -> None:
    print("\n== start-up (medians of 7; target: within 0.35 s of python -c pass)")
    base = median_time([sys.executable, "-c", "pass"])
    imp = median_time([sys.executable, "-c", "import qkenergy"])
    helps = median_time(qkenergy_cmd("--help"))
    analyze_import = median_time([sys.executable, "-c", "import qkenergy.analysis.analyze"])
    print(f"python -c pass                      {base:6.3f} s")
    print(f"python -c 'import qkenergy'         {imp:6.3f} s   (+{imp - base:.3f} s)")
    print(f"qkenergy --help                     {helps:6.3f} s   (+{helps - base:.3f} s)")
    heavy = subprocess.run(
        [sys.executable, "-c", _HEAVY_PROBE],
        env={**os.environ, "PYTHONPATH": str(SRC)},
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    print(
        f"import qkenergy.analysis.analyze    {analyze_import:6.3f} s   (+{analyze_import - base:.3f} s; "
        f"heavy libraries loaded: {heavy or 'none'})"
    )
    if args.before:
        old = median_time([sys.executable, "-c", "import qkenergy.analysis.analyze"], src=args.before)
        print(f"  before: import ...analyze         {old:6.3f} s   (+{old - base:.3f} s)")
    # The default job, null columns included, once its null law is cached: the start-up a user
    # meets on every run of a small model (scipy.stats and pandas are not needed for it).
    with tempfile.TemporaryDirectory() as work:
        run = qkenergy_cmd("analyze", "--quiet", "--cache-dir", work, "-o", str(Path(work) / "m.csv"))
        timed(run, env=ONE_THREAD)  # draws and caches the null law
        default = median_time(run, env=ONE_THREAD)
        print(f"qkenergy analyze --quiet -o m.csv   {default:6.3f} s   (MiniLM, 72 heads, null law cached)")
        if args.before:
            timed(run, env=ONE_THREAD, src=args.before)
            old = median_time(run, env=ONE_THREAD, src=args.before)
            print(f"  before                            {old:6.3f} s")


RUN_SHAPES = {
    "gpt2": dict(kind="gpt2", layers=12, N=768, heads=12, kv_heads=12, head_dim=64),
    "llama": dict(kind="llama", layers=8, N=4096, heads=32, kv_heads=8, head_dim=128),
    "llama-8192": dict(kind="llama", layers=4, N=8192, heads=64, kv_heads=8, head_dim=128),
}


def build(root: Path, shape: dict) -> Path:
    model = root / f"{shape['kind']}-{shape['N']}-{shape['layers']}"
    if not model.exists():
        if shape["kind"] == "gpt2":
            make_gpt2(model, layers=shape["layers"], N=shape["N"], heads=shape["heads"])
        else:
            keys = ("layers", "N", "heads", "kv_heads", "head_dim")
            make_llama(model, **{k: shape[k] for k in keys})
    return model


def gram_flops(shape: dict) -> float:
    """Flops of the Gram products of every head: G_QQ (syrk), G_QK, and G_KK once per key head."""
    n, N, H, Hkv, L = shape["head_dim"], shape["N"], shape["heads"], shape["kv_heads"], shape["layers"]
    return L * (H * (n * n * N + 2 * n * n * N) + Hkv * n * n * N)


def section_runs(args: argparse.Namespace, root: Path) -> None:
    print("\n== whole runs, start-up included: analyze --no-null (one BLAS thread unless stated)")
    for label in args.shapes.split(","):
        shape = RUN_SHAPES[label]
        model = build(root, shape)
        heads = shape["layers"] * shape["heads"]
        out = root / "out.csv"
        ours_cmd = qkenergy_cmd(
            "analyze", str(model), "--no-null", "--quiet", "--threads", "1", "-o", str(out)
        )
        paper_cmd = [sys.executable, __file__, "--paper-route", str(model), str(root / "paper.csv")]
        old_cmd = qkenergy_cmd("analyze", str(model), "--no-null", "--quiet", "-o", str(out))
        # qkenergy, the code before and the paper's route interleaved, so that a change of load
        # between them does not pass for a change of speed; the minimum of the repeats of each.
        # "1 thread": one BLAS thread and --threads 1 (the read-ahead and hashing threads may use
        # the other core); "one core": the same, pinned to CPU 0.
        # "same kernels": the code before and the paper's route with the OpenBLAS kernels that
        # qkenergy's command line asks for on this CPU (qkenergy.base.blas_kernels), if it asks for any.
        kernels = asked_kernels()
        same_kernels = {**ONE_THREAD, "OPENBLAS_CORETYPE": kernels} if kernels else None
        kinds = ("ours", "old", "paper", "ours1", "old1", "paper1", "old_same", "paper_same")
        times: dict[str, list[float]] = {k: [] for k in kinds}
        for repeat in range(args.repeats):
            if same_kernels is not None:
                if args.before:
                    times["old_same"].append(timed(old_cmd, env=same_kernels, src=args.before)[0])
                times["paper_same"].append(timed(paper_cmd, env=same_kernels)[0])
            for one_core, suffix in ((False, ""), (True, "1")):
                times["ours" + suffix].append(timed(ours_cmd, env=ONE_THREAD, one_core=one_core)[0])
                if args.before:
                    times["old" + suffix].append(
                        timed(old_cmd, env=ONE_THREAD, src=args.before, one_core=one_core)[0]
                    )
                if repeat < max(1, args.repeats - 1):
                    times["paper" + suffix].append(timed(paper_cmd, env=ONE_THREAD, one_core=one_core)[0])
        ours, paper = min(times["ours"]), min(times["paper"])
        ours1, paper1 = min(times["ours1"]), min(times["paper1"])
        load = os.getloadavg()[0]
        two_cmd = qkenergy_cmd(
            "analyze", str(model), "--no-null", "--quiet", "--threads", "2", "-o", str(out)
        )
        two = min(timed(two_cmd)[0] for _ in range(args.repeats))
        # as a user runs each: qkenergy's default threads, the paper's route with numpy's default BLAS threads
        default_cmd = qkenergy_cmd("analyze", str(model), "--no-null", "--quiet", "-o", str(out))
        ours_default = min(timed(default_cmd)[0] for _ in range(args.repeats))
        paper_default = min(timed(paper_cmd)[0] for _ in range(max(1, args.repeats - 1)))
        start_up = median_time(qkenergy_cmd("--help"), repeats=5)
        with Spinner():
            busy = timed(two_cmd)[0]
            busy_default_blas = None
            if args.before:
                busy_default_blas = timed(old_cmd, src=args.before)[0]
        read, qk_bytes, _ = read_seconds(model)
        dtype = np.float64 if shape["kind"] == "gpt2" else np.float32
        gemm = gemm_seconds(gram_flops(shape), dtype)
        eig = eigvalsh_seconds(2 * shape["head_dim"]) * heads
        floor = gemm + eig
        print(
            f"-- {label}: {shape['layers']} layers x {shape['heads']} heads ({shape['kv_heads']} kv), "
            f"N={shape['N']}, n={shape['head_dim']}, {heads} heads, Q/K {qk_bytes / MB:.0f} MB "
            f"(load average {load:.1f})"
        )
        print(f"   qkenergy, 1 thread        {ours:7.2f} s  ({1e3 * ours / heads:6.2f} ms/head)")
        print(f"   paper's route, 1 thread   {paper:7.2f} s  -> qkenergy is {ratio(paper, ours)} faster")
        if args.before:
            old = min(times["old"])
            print(f"   code before, 1 thread     {old:7.2f} s  -> throughput {ratio(old, ours)} of before")
        if same_kernels is not None:
            same = f"   with {kernels} kernels too:"
            paper_same = min(times["paper_same"])
            print(f"{same} paper's route {paper_same:.2f} s -> {ratio(paper_same, ours)}", end="")
            if args.before:
                old_same = min(times["old_same"])
                print(f"; code before {old_same:.2f} s -> {ratio(old_same, ours)}", end="")
            print()
        print(f"   qkenergy, one core        {ours1:7.2f} s  (pinned to CPU 0: no read-ahead in parallel)")
        print(f"   paper's route, one core   {paper1:7.2f} s  -> qkenergy is {ratio(paper1, ours1)} faster")
        if args.before:
            old1 = min(times["old1"])
            print(f"   code before, one core     {old1:7.2f} s  -> throughput {ratio(old1, ours1)} of before")
        print(f"   qkenergy, 2 threads       {two:7.2f} s  -> {ratio(ours, two)} of one thread")
        print(
            f"   both as a user runs them  qkenergy (default threads) {ours_default:.2f} s, paper's route "
            f"(numpy's default BLAS threads) {paper_default:.2f} s -> {ratio(paper_default, ours_default)}"
        )
        print(f"   2 threads, busy neighbour {busy:7.2f} s  -> {ratio(busy, two)} of idle 2 threads")
        if busy_default_blas is not None:
            print(f"   before, default BLAS, busy neighbour {busy_default_blas:7.2f} s")
        print(
            f"   floor (1 thread): GEMM of the Gram flops {gemm:.2f} s + one {2 * shape['head_dim']}^2 "
            f"eigvalsh per head {eig:.2f} s = {floor:.2f} s -> qkenergy at {ratio(ours, floor)} the floor; "
            f"Q/K copy from page cache {read:.3f} s"
        )
        print(
            f"   the most this route can give on one thread here: paper's route / (floor + start-up of "
            f"`qkenergy --help`, {start_up:.2f} s) = {ratio(paper, floor + start_up)}"
        )


def null_child(n: int, N: int, samples: int, threads: int, names: str) -> None:
    if names == "floor":  # in a child too: the parent stays small (a child's peak RSS counts the parent's)
        print(json.dumps({"seconds": eigvalsh_seconds(2 * n)}))
        return
    from qkenergy.math import nulls

    t0, c0 = time.perf_counter(), time.process_time()
    try:  # the three null statistics; code from before the speed work draws all of them, on one thread
        nulls.null_law(n, N, samples=samples, seed=0, threads=threads, names=nulls.NULL_STATISTICS)
        drawn = "three"
    except (TypeError, AttributeError):  # no threads= or no NULL_STATISTICS yet
        nulls.null_law(n, N, samples=samples, seed=0)
        drawn = "all"
    print(json.dumps({"seconds": time.perf_counter() - t0, "cpu": time.process_time() - c0, "drawn": drawn}))


def run_null_child(
    args: argparse.Namespace, samples: int, threads: int, before: bool = False, what: str = "three"
) -> tuple[dict[str, float | str], int]:
    cmd = [sys.executable, __file__, "--null-child", str(samples), str(threads), what]
    full_env = {**os.environ, "PYTHONPATH": str(args.before if before else SRC), **ONE_THREAD}
    with tempfile.TemporaryFile() as out:
        proc = subprocess.Popen(cmd, env=full_env, stdout=out, stderr=subprocess.STDOUT)
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = status
        out.seek(0)
        text = out.read().decode()
    if status != 0:
        raise SystemExit(text)
    return json.loads(text.strip().splitlines()[-1]), usage.ru_maxrss * 1024


def section_null(args: argparse.Namespace) -> None:
    """Rounds of (before,) one thread, two threads, interleaved; the minimum of each over the rounds."""
    n, N, K = 128, 4096, args.null_samples
    print(f"\n== null law at (n, N) = ({n}, {N}), {K} samples, cold (no cache), three null statistics")
    print(f"   ({args.repeats} interleaved rounds, minimum wall time; cpu = process CPU time of that run)")
    runs: dict[str, list[tuple[dict[str, float | str], int, float]]] = {}
    floors = []
    for _ in range(args.repeats):
        kinds = (["before"] if args.before else []) + ["1 thread", "2 threads"]
        for kind in kinds:
            load = os.getloadavg()[0]
            result, rss = run_null_child(args, K, 2 if kind == "2 threads" else 1, before=kind == "before")
            runs.setdefault(kind, []).append((result, rss, load))
        floors.append(float(run_null_child(args, K, 1, what="floor")[0]["seconds"]))
    best = {kind: min(rounds, key=lambda r: float(r[0]["seconds"])) for kind, rounds in runs.items()}
    floor = min(floors)

    def line(kind: str) -> str:
        result, rss, load = best[kind]
        seconds, cpu = float(result["seconds"]), float(result["cpu"])
        return (
            f"{seconds:6.2f} s = {1e3 * seconds / K:5.2f} ms/sample (cpu {1e3 * cpu / K:5.2f}), "
            f"peak RSS {rss / MB:.0f} MB, load {load:.1f}"
        )

    one, two = float(best["1 thread"][0]["seconds"]), float(best["2 threads"][0]["seconds"])
    print(f"   1 thread   {line('1 thread')}  (target <= 3 ms/sample)")
    print(
        f"   2 threads  {line('2 threads')}  -> {ratio(one, two)} of one thread (targets: cold < 5 s, RSS < 300 MB)"
    )
    print(
        f"   floor: one {2 * n} x {2 * n} eigvalsh {1e3 * floor:.2f} ms/sample -> 1 thread at {ratio(one / K, floor)} the floor"
    )
    if args.before:
        old = float(best["before"][0]["seconds"])
        print(
            f"   before ({best['before'][0]['drawn']} statistics, 1 thread): {line('before')} "
            f"-> now {ratio(old, one)} faster on one thread"
        )


def section_memory(args: argparse.Namespace, root: Path) -> None:
    print("\n== peak RSS of analyze --no-null --threads 2 (target: 2 x largest layer Q/K + 300 MB)")
    cases = [("N=8192", RUN_SHAPES["llama-8192"])]
    cases.append(("N=16384", dict(kind="llama", layers=2, N=16384, heads=128, kv_heads=8, head_dim=128)))
    for label, shape in cases:
        model = build(root, shape)
        layer_qk = (shape["heads"] + shape["kv_heads"]) * shape["head_dim"] * shape["N"] * 2
        cmd = qkenergy_cmd(
            "analyze", str(model), "--no-null", "--quiet", "--threads", "2", "-o", str(root / "m.csv")
        )
        seconds, rss = timed_hwm(cmd)
        bound = 2 * layer_qk + 300 * MB
        print(
            f"   {label}: peak RSS {rss / MB:6.0f} MB against {bound / MB:.0f} MB "
            f"(layer Q/K {layer_qk / MB:.0f} MB): ratio {rss / bound:.2f} ({seconds:.1f} s)"
        )
        if args.before and label == "N=8192":
            old_cmd = qkenergy_cmd("analyze", str(model), "--no-null", "--quiet", "-o", str(root / "m.csv"))
            _, old_rss = timed_hwm(old_cmd, src=args.before)
            print(f"   {label} code before: peak RSS {old_rss / MB:6.0f} MB: ratio {old_rss / bound:.2f}")


def section_stream(args: argparse.Namespace, root: Path) -> None:
    L = args.stream_layers
    shape = dict(kind="llama", layers=L, N=16384, heads=128, kv_heads=8, head_dim=128)
    print(f"\n== Llama-3-405B-shaped slice: {L} layers (one per shard), hidden 16384, 128 / 8 heads, bf16")
    t0 = time.perf_counter()
    model = build(root, shape)
    size = sum(p.stat().st_size for p in model.glob("*.safetensors"))
    print(f"   written {size / 1e9:.1f} GB in {time.perf_counter() - t0:.0f} s")
    out = root / "s.csv"
    results = {}
    for mode in ("cold", "warm"):
        if mode == "cold":
            drop_page_cache(model)
        cmd = qkenergy_cmd("analyze", str(model), "--no-null", "--quiet", "-o", str(out))
        results[mode] = timed_hwm(cmd)
    layers_only = qkenergy_cmd("analyze", str(model), "--no-null", "--quiet", "--layers", "0", "-o", str(out))
    first = timed(layers_only)[0]
    drop_page_cache(model)
    _t0 = time.perf_counter()
    read_seconds_cold = _cold_read(model)
    per_layer_cold = (results["cold"][0] - first) / max(1, L - 1)
    per_layer_warm = (results["warm"][0] - first) / max(1, L - 1)
    start = first - per_layer_warm  # one layer's run minus one layer of work: start-up and table
    total_cold = start + 126 * per_layer_cold
    print(
        f"   analyze (all cores): cold {results['cold'][0]:.1f} s, warm {results['warm'][0]:.1f} s, "
        f"one layer {first:.1f} s; peak RSS {results['cold'][1] / MB:.0f} MB"
    )
    print(
        f"   per layer: cold {per_layer_cold:.2f} s, warm {per_layer_warm:.2f} s; cold read of one layer's "
        f"Q/K alone {read_seconds_cold:.2f} s (the disk floor)"
    )
    print(
        f"   extrapolated to 126 layers (16,128 heads), cold: {total_cold / 60:.1f} min "
        f"(goal < 10 min); disk floor {126 * read_seconds_cold / 60:.1f} min"
    )
    k = args.paper_heads
    paper_cmd = [
        sys.executable,
        __file__,
        "--paper-route",
        str(model),
        str(root / "p.csv"),
        "--paper-heads",
        str(k),
    ]
    paper = timed(paper_cmd, env=ONE_THREAD)[0]
    per_head = (paper - _python_start()) / k
    print(
        f"   paper's route (1 BLAS thread): {k} heads in {paper:.1f} s -> {per_head:.2f} s/head, "
        f"{16128 * per_head / 60:.0f} min for 16,128 heads (+ reading) -> qkenergy {ratio(16128 * per_head, total_cold)} faster"
    )


def _python_start() -> float:
    return timed(
        [sys.executable, "-c", "import numpy, qkenergy.weights.architecture, qkenergy.weights.reading"]
    )[0]


def _cold_read(model: Path) -> float:
    """Seconds to read layer 0's Q/K bytes from disk after dropping them from the page cache."""
    sys.path.insert(0, str(SRC))
    from qkenergy.weights.checkpoint import open_model

    with open_model(model) as source:
        names = [
            n
            for n in source.tensors.names
            if ".layers.0." in n and n.endswith(("q_proj.weight", "k_proj.weight"))
        ]
        t0 = time.perf_counter()
        source.tensors.prefetch(names)
        return time.perf_counter() - t0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default="startup,runs,null,memory")
    parser.add_argument("--before", type=Path, default=None, help="src/ of an older qkenergy to compare")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument(
        "--shapes", default=",".join(RUN_SHAPES), help="run shapes of the runs section (comma-separated)"
    )
    parser.add_argument("--null-samples", type=int, default=2000)
    parser.add_argument("--stream-layers", type=int, default=3)
    parser.add_argument("--paper-heads", type=int, default=4)
    parser.add_argument("--paper-route", nargs=2, metavar=("MODEL", "CSV"), help=argparse.SUPPRESS)
    parser.add_argument("--null-child", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.paper_route:
        paper_route(*args.paper_route, max_heads=args.paper_heads if "--paper-heads" in sys.argv else None)
        return
    if args.null_child:
        samples, threads, names = args.null_child
        null_child(128, 4096, int(samples), int(threads), names)
        return
    print("command:", shlex.join(["python", *sys.argv]))
    print(
        f"cpus: {len(os.sched_getaffinity(0))}, load average at start: {', '.join(f'{x:.1f}' for x in os.getloadavg())}"
    )
    only = set(args.only.split(","))
    with tempfile.TemporaryDirectory(prefix="qkenergy-speed-") as tmp:
        root = Path(tmp)
        # Every child compiles each source tree to bytecode once, into a private cache, as an installed
        # package is at install time; with PYTHONDONTWRITEBYTECODE set, each run would recompile every
        # module (about 0.1 s of every figure). Repeats take the minimum, so the first run pays it.
        os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
        os.environ["PYTHONPYCACHEPREFIX"] = str(root / "pycache")
        if "startup" in only:
            section_startup(args)
        if "null" in only:
            section_null(args)
        if "runs" in only:
            section_runs(args, root)
        if "memory" in only:
            section_memory(args, root)
        if "stream" in only:
            section_stream(args, root)
    print(f"\nload average at end: {', '.join(f'{x:.1f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()

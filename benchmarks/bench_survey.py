"""Benchmark of `qkenergy survey` (Dask LocalCluster) on synthetic checkpoints.

Writes 8 synthetic checkpoints (llama with grouped-query attention, phi3
stacked, gpt_neox interleaved, gpt2 Conv1D; float32 and float16; three
distinct (n, N) head shapes; a few layers each) and measures, in one run:

1. speed: the survey on the default LocalCluster (one single-threaded worker
   process per core, cluster start and stop included), both as the command
   `qkenergy survey` and as `qkenergy.survey()` in this process, against
   three plain loops of analyze over the same models: (a) a shell-style loop
   of `qkenergy analyze MODEL -o TABLE` commands (what a user writes: a fresh
   process per model), (b) `analyze_model` in this process with threads=1,
   (c) `analyze_model` in this process with its default threads (every
   core). Every run has its own fresh null-law cache, so each side draws
   every shape's null law exactly once. The runs are interleaved, `--repeat`
   rounds, medians reported with the load average of each run. It prints the
   physical bound against (c): the survey does at least (b)'s work, so on
   C cores it cannot beat (c) by more than C / S, where S = (b) / (c) is
   the threaded loop's own speed-up. Target: >= 1.7x on 2 cores against a
   plain loop of analyze calls, identical results (checked bitwise);
2. restart: `qkenergy survey` in a subprocess, SIGKILLed once half of the
   units are done, then run again: the rerun must compute exactly the missing
   units (counted from the ledger's attempts) and the dataset must equal the
   uninterrupted one;
3. memory: peak RSS (VmHWM) of each worker of a 2-worker LocalCluster that
   surveys a llama-7B-shaped layer (32 heads x 128, N = 4096, float16),
   against one layer's Q/K bytes + 300 MB;
4. per-head costs at the shapes of common hub models, one thread: reading
   (copying a layer's Q/K out of the page cache), Gram products, statistics,
   and the null law per shape; from them, on paper, the worker-hours to survey
   the 1,000 most downloaded text models of the Hugging Face hub (the model
   mix is an assumption, printed with the estimate).

    python benchmarks/bench_survey.py [--layers 3] [--samples 1000] [--workers 2] [--repeat 1]
        [--skip speed,restart,memory,costs]

Prints ratios measured in this run; asserts nothing about time.
"""

from __future__ import annotations

import argparse
import os
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "src"), str(ROOT / "tests")]

from survey_checkpoints import write_checkpoint  # noqa: E402

MB = 1e6

# name, layout, N, heads, head_dim, kv_heads, dtype: three distinct (n, N) shapes.
MODELS = [
    ("llama-a", "llama", 2048, 16, 128, 4, np.float16),
    ("llama-b", "llama", 1024, 16, 64, 8, np.float32),
    ("phi3-a", "phi3", 2048, 16, 128, None, np.float16),
    ("phi3-b", "phi3", 1024, 8, 128, None, np.float32),
    ("neox-a", "gpt_neox", 2048, 16, 128, None, np.float16),
    ("neox-b", "gpt_neox", 1024, 16, 64, None, np.float32),
    ("gpt2-a", "gpt2", 1024, 8, 128, None, np.float16),
    ("gpt2-b", "gpt2", 2048, 16, 128, None, np.float32),
]


def write_models(root: Path, layers: int) -> Path:
    lines = []
    for i, (name, layout, N, heads, head_dim, kv, dtype) in enumerate(MODELS):
        path = write_checkpoint(
            root / name,
            layout,
            layers=layers,
            N=N,
            heads=heads,
            head_dim=head_dim,
            kv_heads=kv,
            dtype=dtype,
            seed=i,
        )
        lines.append(f'[[model]]\nsource = "{path}"\nname = "{name}"\n')
    manifest = root / "models.toml"
    manifest.write_text("\n".join(lines))
    return manifest


def ledger(out: Path, sql: str) -> list[tuple]:
    db = sqlite3.connect(f"file:{out / 'ledger.sqlite'}?mode=ro", uri=True)
    try:
        return db.execute(sql).fetchall()
    finally:
        db.close()


def numeric_difference(a: pd.DataFrame, b: pd.DataFrame) -> tuple[bool, float]:
    """(bitwise equal, largest absolute difference) over the float columns of two head tables."""
    columns = [c for c in a.columns if a[c].dtype.kind == "f"]
    x, y = a[columns].to_numpy(np.float64), b[columns].to_numpy(np.float64)
    same = bool(np.array_equal(x, y, equal_nan=True))
    both = np.isfinite(x) & np.isfinite(y)
    return same, float(np.max(np.abs(x[both] - y[both]), initial=0.0))


# ----------------------------------------------------------------------------- 1. speed


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "qkenergy.cli", *args]


ENV = {**os.environ, "PYTHONPATH": str(ROOT / "src")}


Table = Callable[[], pd.DataFrame]  # reads a run's head table back, after its timing


def _timed(what: str, run: Callable[[], Table], times: dict[str, list[float]]) -> pd.DataFrame:
    load = os.getloadavg()[0]
    start = time.perf_counter()
    table = run()
    times.setdefault(what, []).append(time.perf_counter() - start)
    times.setdefault(what + " load", []).append(load)
    return table()


def bench_speed(manifest: Path, tmp: Path, samples: int, workers: int, repeat: int) -> pd.DataFrame:
    """Section 1: the survey against three plain loops of analyze, every run with its own fresh null cache
    (each side draws each shape's law once), interleaved, ``repeat`` rounds; medians reported."""
    from qkenergy import NullSpec, load_survey, survey
    from qkenergy.analysis.analyze import analyze_model

    def shell_loop(where: Path) -> Table:
        # what a user writes: for m in ...; do qkenergy analyze $m -o $m.parquet --cache-dir C; done
        for name, *_ in MODELS:
            command = _cli("analyze", str(tmp / name), "--samples", str(samples), "--cache-dir", str(where))
            table = str(where / f"{name}.parquet")
            subprocess.run([*command, "-o", table], env=ENV, check=True, capture_output=True)
        return lambda: pd.concat(
            [pd.read_parquet(where / f"{name}.parquet").assign(model=name) for name, *_ in MODELS],
            ignore_index=True,
        )

    def plain_loop(threads: int | None, where: Path) -> Table:
        frames = []
        for name, *_ in MODELS:
            heads = analyze_model(str(tmp / name), samples=samples, cache_dir=where, threads=threads).heads
            frames.append(heads.assign(model=name))
        return lambda: pd.concat(frames, ignore_index=True)

    def survey_api(where: Path) -> Table:
        survey(
            manifest,
            where / "out",
            null=NullSpec(samples=samples),
            cache_dir=where / "cache",
            workers=workers,
        )
        return lambda: load_survey(where / "out")[0]

    def survey_cli(where: Path) -> Table:
        command = _cli("survey", str(manifest), "-o", str(where / "out"), "--samples", str(samples))
        extra = ["--cache-dir", str(where / "cache"), "--workers", str(workers), "--quiet"]
        subprocess.run([*command, *extra], env=ENV, check=True)
        return lambda: load_survey(where / "out")[0]

    runs: list[tuple[str, Callable[[Path], Table]]] = [
        ("survey", survey_api),
        ("c", lambda where: plain_loop(None, where)),
        ("survey cli", survey_cli),
        ("b", lambda where: plain_loop(1, where)),
        ("a", shell_loop),
    ]
    times: dict[str, list[float]] = {}
    tables: dict[str, pd.DataFrame] = {}
    for r in range(repeat):
        for what, run in runs:
            where = tmp / f"speed-{r}-{what.replace(' ', '-')}"
            where.mkdir()
            tables[what] = _timed(what, lambda: run(where), times)  # noqa: B023 (called at once)
    heads = tables["survey"]
    key = ["model", "layer", "head"]
    med = {what: float(np.median(t)) for what, t in times.items()}

    def line(what: str, text: str) -> str:
        t = times[what]
        loads = ", ".join(f"{x:.1f}" for x in times[what + " load"])
        return f"   {text:<58s} {med[what]:7.2f} s  (min {min(t):.2f}; load {loads})"

    print(
        f"\n1. speed: {len(MODELS)} checkpoints, {heads.groupby(['model', 'layer']).ngroups} units, "
        f"{len(heads)} heads, {samples} null samples; {repeat} interleaved round(s), median seconds, "
        "each run with a fresh null cache (every shape's law drawn once)"
    )
    print(line("a", "(a) shell loop: `qkenergy analyze MODEL -o` per model"))
    print(line("b", "(b) in-process loop of analyze_model, threads=1"))
    print(line("c", "(c) in-process loop of analyze_model, default threads"))
    print(line("survey cli", f"`qkenergy survey`, LocalCluster({workers} x 1 thread)"))
    print(line("survey", f"survey() in this process, LocalCluster({workers} x 1 thread)"))
    print(
        "   (cluster start and stop included; process start and imports only in the command runs; reading "
        "the tables back for the comparison below is not timed)"
    )
    ratios = {
        "a": med["a"] / med["survey cli"],
        "b": med["b"] / med["survey"],
        "c": med["c"] / med["survey"],
    }
    print(
        f"   speed-up: {ratios['a']:.2f}x over (a) (command against command), {ratios['b']:.2f}x over (b), "
        f"{ratios['c']:.2f}x over (c) (in-process against in-process)"
    )
    # The survey runs the same computations as the one-thread loop (every law drawn once, every unit
    # analysed once), so on `cores` cores it needs at least (b) / cores. The threaded loop already runs
    # S = (b) / (c) times faster than (b): no scheduler can beat (c) by more than cores / S = 1 / E,
    # where E = S / cores is the threaded loop's parallel efficiency.
    cores = len(os.sched_getaffinity(0))
    speedup = med["b"] / med["c"]
    print(
        f"   physical bound: the threaded loop (c) is S = (b)/(c) = {speedup:.2f}x faster than (b), a parallel "
        f"efficiency E = S/{cores} = {speedup / cores:.0%} on {cores} cores; the survey does at least (b)'s "
        f"work, so it cannot beat (c) by more than {cores}/S = 1/E = {cores / speedup:.2f}x"
    )
    met = [f"({k})" for k, v in ratios.items() if v >= 1.7]
    missed = [f"({k})" for k, v in ratios.items() if v < 1.7]
    print(
        f"   target >= 1.7x against a plain loop of analyze calls on {cores} cores: met against "
        f"{', '.join(met) or 'none'}; not met against {', '.join(missed) or 'none'}"
    )
    expected = tables["c"].sort_values(key, ignore_index=True)
    for what in ("a", "b", "survey cli", "survey"):
        got = tables[what].sort_values(key, ignore_index=True)[expected.columns]
        same, diff = numeric_difference(got, expected)
        print(
            f"   results of {what:>10s} against (c): bitwise identical = {same}, largest |difference| = {diff:.3g}"
        )
    return heads


# ----------------------------------------------------------------------------- 2. restart


def bench_restart(manifest: Path, tmp: Path, samples: int, workers: int, reference: pd.DataFrame) -> None:
    from qkenergy import load_survey

    out = tmp / "killed"
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    command = [
        sys.executable,
        "-m",
        "qkenergy.cli",
        "survey",
        str(manifest),
        "-o",
        str(out),
        "--samples",
        str(samples),
        "--workers",
        str(workers),
        "--quiet",
        "--cache-dir",
        str(tmp / "speed-0-survey" / "cache"),  # section 1's: the laws are drawn already
    ]
    total = len(reference.groupby(["model", "layer"]))
    proc = subprocess.Popen(command, env=env, start_new_session=True)
    done = 0
    while done < total // 2:
        if proc.poll() is not None:
            raise SystemExit("the survey finished before it could be killed; use more --layers")
        time.sleep(0.02)
        try:
            done = ledger(out, "SELECT count(*) FROM units WHERE status = 'done'")[0][0]
        except sqlite3.OperationalError:  # not created yet
            pass
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    done = ledger(out, "SELECT count(*) FROM units WHERE status = 'done'")[0][0]
    hidden = list(out.rglob(".*.tmp"))
    start = time.perf_counter()
    subprocess.run(command, env=env, check=False)
    rerun = time.perf_counter() - start
    last = ledger(out, "SELECT max(run) FROM runs")[0][0]
    computed = ledger(out, f"SELECT count(*) FROM attempts WHERE run = {last} AND outcome = 'computed'")[0][0]
    same = load_survey(out)[0].equals(reference)
    print(
        f"\n2. restart: SIGKILL after {done} of {total} units were done "
        f"({len(hidden)} hidden temporary file(s) left, removed by the rerun)"
    )
    print(
        f"   rerun computed {computed} units (missing: {total - done}) in {rerun:.2f} s; "
        f"dataset equal to the uninterrupted run: {same}"
    )


# ----------------------------------------------------------------------------- 3. memory


def bench_memory(tmp: Path, workers: int) -> None:
    from distributed import Client, LocalCluster

    from qkenergy import survey

    N, heads, head_dim = 4096, 32, 128
    path = write_checkpoint(
        tmp / "llama7b", "llama", layers=2, N=N, heads=heads, head_dim=head_dim, dtype=np.float16
    )
    (tmp / "big.toml").write_text(f'[[model]]\nsource = "{path}"\nname = "llama7b-shaped"\n')
    qk_bytes = 2 * heads * head_dim * N * 2

    def vm_hwm() -> int:
        with open("/proc/self/status") as fh:
            return next(int(line.split()[1]) * 1024 for line in fh if line.startswith("VmHWM"))

    with (
        LocalCluster(
            n_workers=workers, threads_per_worker=1, host="127.0.0.1", dashboard_address=":0", silence_logs=40
        ) as cluster,
        Client(cluster) as client,
    ):
        client.run(lambda: __import__("qkenergy.analysis.analyze"))  # imports counted in the idle peak
        idle = client.run(vm_hwm)
        survey(tmp / "big.toml", tmp / "out-big", null=False, scheduler=cluster.scheduler_address)
        peak = client.run(vm_hwm)
    print(
        f"\n3. memory: llama-7B-shaped layers (32 x 128, N = 4096, float16): one layer's Q/K = "
        f"{qk_bytes / MB:.0f} MB; target peak RSS <= Q/K + 300 MB = {(qk_bytes + 300 * MB) / MB:.0f} MB"
    )
    for worker in peak:
        print(
            f"   worker {worker}: peak RSS {peak[worker] / MB:.0f} MB (after imports, before work: "
            f"{idle[worker] / MB:.0f} MB); within target: {peak[worker] <= qk_bytes + 300 * MB}"
        )


# ----------------------------------------------------------------------------- 4. per-head costs


# Assumed mix of the 1,000 most downloaded text models (no network here to read the hub's ranking):
# class, share, layers, query heads, head_dim n, width N, bytes per weight.
MIX = [
    ("MiniLM-sized encoders (6-12 x 12 heads, 32, 384)", 0.20, 9, 12, 32, 384, 4),
    ("BERT/RoBERTa/MPNet-base, GPT-2 (12 x 12, 64, 768)", 0.30, 12, 12, 64, 768, 4),
    ("large encoders, GPT-2 medium (24 x 16, 64, 1024)", 0.10, 24, 16, 64, 1024, 4),
    ("0.5-3B decoders (28 x 16, 128, 2048)", 0.15, 28, 16, 128, 2048, 2),
    ("7-8B decoders (32 x 32, 128, 4096)", 0.17, 32, 32, 128, 4096, 2),
    ("13-14B decoders (40 x 40, 128, 5120)", 0.05, 40, 40, 128, 5120, 2),
    ("30-72B decoders (80 x 64, 128, 8192)", 0.03, 80, 64, 128, 8192, 2),
]
DISTINCT_SHAPES = 40  # assumed distinct (n, N) shapes among 1,000 models: one null law each


def per_head_costs(n: int, N: int, dtype: type, heads: int, null_samples: int) -> dict[str, float]:
    from threadpoolctl import threadpool_limits

    from qkenergy.math.gram import head_gram
    from qkenergy.math.nulls import null_law
    from qkenergy.math.statistics import gram_statistics

    rng = np.random.default_rng(0)
    wq = rng.standard_normal((heads, n, N)).astype(dtype)
    wk = rng.standard_normal((heads, n, N)).astype(dtype)
    with threadpool_limits(limits=1):
        with tempfile.NamedTemporaryFile() as fh:  # reading: copy the bytes out of the page cache
            fh.write(wq.tobytes() + wk.tobytes())
            fh.flush()
            mapped = np.memmap(fh.name, dtype=dtype, mode="r")
            np.array(mapped)  # warm
            start = time.perf_counter()
            np.array(mapped)
            read = (time.perf_counter() - start) / heads
        start = time.perf_counter()
        G = head_gram(wq, wk)
        gram = (time.perf_counter() - start) / heads
        start = time.perf_counter()
        gram_statistics(G, N)
        stats = (time.perf_counter() - start) / heads
        start = time.perf_counter()
        null_law(n, N, samples=null_samples)
        null = (time.perf_counter() - start) * 2000 / null_samples  # per shape, at the default 2000 samples
    return {"read": read, "gram": gram, "stats": stats, "null": null}


def bench_costs(null_samples: int) -> None:
    print(
        "\n4. per-head costs, one thread (reading = copy from page cache; a cold read from disk or a "
        "network filesystem is slower: scale it by your bandwidth):"
    )
    costs = {}
    for n, N, dtype in [
        (32, 384, np.float32),
        (64, 768, np.float32),
        (64, 1024, np.float32),
        (128, 2048, np.float16),
        (128, 4096, np.float16),
        (128, 5120, np.float16),
        (128, 8192, np.float16),
    ]:
        c = per_head_costs(n, N, dtype, heads=8, null_samples=null_samples)
        costs[n, N] = c
        print(
            f"   n={n:4d} N={N:5d}: read {c['read'] * 1e3:7.3f} ms  Gram {c['gram'] * 1e3:7.3f} ms  "
            f"statistics {c['stats'] * 1e3:7.3f} ms per head;  null law (2000 samples) {c['null']:6.1f} s "
            f"per shape (from {null_samples})"
        )
    parts = {"read": 0.0, "gram": 0.0, "stats": 0.0}
    total_heads = 0.0
    for _, share, layers, heads, n, N, _ in MIX:
        count = 1000 * share * layers * heads
        total_heads += count
        for k in parts:
            parts[k] += count * costs[n, N][k]
    null_cost = DISTINCT_SHAPES * float(np.mean([c["null"] for c in costs.values()]))
    total = sum(parts.values()) + null_cost
    print("\n   On paper: the 1,000 most downloaded text models of the hub. Assumed mix:")
    for name, share, *_ in MIX:
        print(f"     {share:4.0%}  {name}")
    print(
        f"   -> {total_heads / 1e6:.2f} M heads, {DISTINCT_SHAPES} distinct (n, N) shapes (one null law each);"
    )
    print(
        f"   worker-hours: {total / 3600:.2f} (reading {parts['read'] / total:.0%}, Gram products "
        f"{parts['gram'] / total:.0%}, statistics {parts['stats'] / total:.0%}, null laws "
        f"{null_cost / total:.0%}), plus the downloads (not counted: network-bound)."
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--layers", type=int, default=3)
    parser.add_argument("--samples", type=int, default=1000)
    parser.add_argument("--workers", type=int, default=len(os.sched_getaffinity(0)))
    parser.add_argument("--repeat", type=int, default=1, help="interleaved rounds of section 1 (medians)")
    parser.add_argument("--null-samples", type=int, default=100, help="null draws timed for section 4")
    parser.add_argument(
        "--skip", default="", help="comma-separated sections to skip: speed,restart,memory,costs"
    )
    args = parser.parse_args()
    skip = set(filter(None, args.skip.split(",")))
    print(f"cores: {len(os.sched_getaffinity(0))}, load average: {os.getloadavg()[0]:.1f}")
    with tempfile.TemporaryDirectory() as name:
        tmp = Path(name)
        manifest = write_models(tmp, args.layers)
        if not {"speed", "restart"} <= skip:
            reference = bench_speed(manifest, tmp, args.samples, args.workers, args.repeat)
            if "restart" not in skip:
                bench_restart(manifest, tmp, args.samples, args.workers, reference)
        if "memory" not in skip:
            bench_memory(tmp, args.workers)
        if "costs" not in skip:
            bench_costs(args.null_samples)
    print(f"\nload average at the end: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()

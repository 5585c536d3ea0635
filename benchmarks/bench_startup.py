"""Start-up of the package and the command line, optionally against an older source tree.

Times, in fresh interpreters, ``import qkenergy``, the first use of the notebook API
(``qk.open`` on the embedded MiniLM: config and headers), ``qkenergy --help``, whole
``qkenergy analyze`` runs on the embedded MiniLM, started as the console script starts
them (qkenergy.console:main), and two fixed costs of a run:

- the summary: each run once with ``--quiet`` and once printing its summary to a pipe,
  without null laws and with the default null law from a warm cache (the summary's cost
  is the difference of the medians, within the noise of two whole runs on a busy machine);
  and, more precisely, the summary alone timed inside a fresh interpreter after a run
  (its imports included, the command line's own loaded first as in a run);
- reading bfloat16: ``analyze --no-null --quiet`` of a small llama-shaped bf16 checkpoint
  (2 layers, N = 512, 8 query / 2 key heads of 64; 2.6 MB, written to a temporary
  directory), and the same run with ``import ml_dtypes`` first, which the reader used to
  pay (0.6 s); the difference is what a bf16 run no longer pays.

With ``--before SRC`` each run of this tree is interleaved with one of the tree at SRC, so
a change of load does not pass for a change of speed; commands the older tree lacks are
skipped for it. Prints medians and minima and their ratios, with the load average;
asserts nothing.

    python benchmarks/bench_startup.py [--repeats 15] [--before /path/to/old/src]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

SRC = Path(__file__).resolve().parents[1] / "src"


def _console(*args: str, first: str = "") -> list[str]:
    script = f"{first}import sys; sys.argv = ['qkenergy', *{list(args)!r}]; from qkenergy.console import main; main()"
    return [sys.executable, "-c", script]


def write_bf16_llama(root: Path, *, layers: int = 2, N: int = 512, heads: int = 8, kv_heads: int = 2) -> Path:
    """A llama-shaped bfloat16 checkpoint (q/k projections and input norms), written from the bits."""
    head_dim = N // heads
    rng = np.random.default_rng(0)
    root.mkdir(parents=True, exist_ok=True)
    config = {
        "model_type": "llama",
        "num_hidden_layers": layers,
        "num_attention_heads": heads,
        "num_key_value_heads": kv_heads,
        "hidden_size": N,
        "head_dim": head_dim,
        "torch_dtype": "bfloat16",
    }
    (root / "config.json").write_text(json.dumps(config))

    def bf16(*shape: int) -> np.ndarray:  # float32 rounded to its top half, to nearest even
        bits = (0.02 * rng.standard_normal(shape, dtype=np.float32)).view(np.uint32)
        return ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)

    tensors: dict[str, np.ndarray] = {}
    for i in range(layers):
        p = f"model.layers.{i}."
        tensors[p + "self_attn.q_proj.weight"] = bf16(heads * head_dim, N)
        tensors[p + "self_attn.k_proj.weight"] = bf16(kv_heads * head_dim, N)
        tensors[p + "input_layernorm.weight"] = np.full(N, 0x3F80, np.uint16)  # 1.0
    header: dict[str, object] = {}
    offset = 0
    for name, array in tensors.items():
        header[name] = {
            "dtype": "BF16",
            "shape": list(array.shape),
            "data_offsets": [offset, offset + array.nbytes],
        }
        offset += array.nbytes
    raw = json.dumps(header).encode()
    raw += b" " * (-len(raw) % 8)
    with open(root / "model.safetensors", "wb") as fh:
        fh.write(len(raw).to_bytes(8, "little") + raw)
        for array in tensors.values():
            fh.write(array.tobytes())
    return root


def commands(work: Path) -> dict[str, list[str]]:
    cache, bf16 = str(work / "cache"), str(write_bf16_llama(work / "bf16"))
    return {
        "import qkenergy": [sys.executable, "-c", "import qkenergy"],
        "qk.open() (API)": [sys.executable, "-c", "import qkenergy as qk; qk.open()"],
        "qkenergy --help": _console("--help"),
        "qkenergy analyze --no-null --quiet": _console("analyze", "--no-null", "--quiet"),
        "qkenergy analyze --no-null (summary)": _console("analyze", "--no-null"),
        "analyze --quiet (null law cached)": _console("analyze", "--quiet", "--cache-dir", cache),
        "analyze (null law cached, summary)": _console("analyze", "--cache-dir", cache),
        "analyze bf16 --no-null --quiet": _console("analyze", bf16, "--no-null", "--quiet"),
        "  the same, ml_dtypes imported first": _console(
            "analyze", bf16, "--no-null", "--quiet", first="import ml_dtypes; "
        ),
    }


# The summary alone, as the command line prints it to a pipe after a run: imports included (the
# command line's own are loaded first, as in a run), timed inside a fresh interpreter.
SUMMARY_CHILD = r"""
import os, sys, time
import qkenergy.cli.main
from qkenergy.api.model import analyze
null = sys.argv[1] == "null"
result = analyze(None, threads=1, cache_dir=sys.argv[2]) if null else analyze(None, null=False, threads=1)
start = time.perf_counter()
from qkenergy.cli.output import stdout_console
result.print_summary(stdout_console(), top=5)
sys.stdout.flush()
os.write(2, f"{time.perf_counter() - start}\n".encode())
"""


def _summary_seconds(null: bool, cache: Path, src: Path) -> float | None:
    env = {**os.environ, "PYTHONPATH": str(src), "OPENBLAS_NUM_THREADS": "1"}
    argv = [sys.executable, "-c", SUMMARY_CHILD, "null" if null else "no", str(cache)]
    done = subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    return float(done.stderr.split()[-1]) if done.returncode == 0 else None


# (what, the run printing it, the same run without)
DIFFERENCES = [
    ("summary, no null laws", "qkenergy analyze --no-null (summary)", "qkenergy analyze --no-null --quiet"),
    ("summary, null law cached", "analyze (null law cached, summary)", "analyze --quiet (null law cached)"),
    (
        "ml_dtypes import in a bf16 run",
        "  the same, ml_dtypes imported first",
        "analyze bf16 --no-null --quiet",
    ),
]


def _run(command: list[str], src: Path) -> float | None:
    env = {**os.environ, "PYTHONPATH": str(src), "OPENBLAS_NUM_THREADS": "1"}
    start = time.perf_counter()
    done = subprocess.run(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - start if done.returncode == 0 else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--before", type=Path, default=None, help="an older tree's src directory")
    args = parser.parse_args()
    trees = {"this tree": SRC, **({"before": args.before} if args.before else {})}
    with tempfile.TemporaryDirectory(prefix="qkenergy-startup-") as tmp:
        work = Path(tmp)
        # each child compiles each tree once into a private cache, as an installed package is
        os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
        os.environ["PYTHONPYCACHEPREFIX"] = str(work / "pycache")
        runs = commands(work)
        for src in trees.values():  # draw and cache the null law, compile the bytecode
            _run(runs["analyze --quiet (null law cached)"], src)
        times: dict[tuple[str, str], list[float]] = {(c, t): [] for c in runs for t in trees}
        printing = {(null, t): [] for null in (False, True) for t in trees}
        for _ in range(args.repeats):
            for name, command in runs.items():
                for tree, src in trees.items():
                    seconds = _run(command, src)
                    if seconds is not None:
                        times[(name, tree)].append(seconds)
            for null in (False, True):
                for tree, src in trees.items():
                    seconds = _summary_seconds(null, work / "cache", src)
                    if seconds is not None:
                        printing[(null, tree)].append(seconds)
    print(f"{args.repeats} interleaved repeats, medians and minima in ms")
    for name in runs:
        line = f"{name:38s}"
        for tree in trees:
            got = times[(name, tree)]
            line += (
                f"  {tree}: median {statistics.median(got) * 1e3:7.1f}, min {min(got) * 1e3:7.1f}"
                if got
                else f"  {tree}: (fails)"
            )
        before, after = times.get((name, "before"), []), times[(name, "this tree")]
        if before and after:
            line += f"  ratio of medians {statistics.median(after) / statistics.median(before):.3f}"
        print(line)
    print("differences of medians (ms):")
    for what, loud, quiet in DIFFERENCES:
        line = f"  {what:36s}"
        for tree in trees:
            a, b = times[(loud, tree)], times[(quiet, tree)]
            line += f"  {tree}: {1e3 * (statistics.median(a) - statistics.median(b)):6.1f}" if a and b else ""
        print(line)
    print("the summary printed to a pipe after a run, timed in the process (imports included; ms):")
    for null in (False, True):
        line = f"  {'null law cached' if null else 'no null laws':36s}"
        for tree in trees:
            got = printing[(null, tree)]
            line += (
                f"  {tree}: median {1e3 * statistics.median(got):6.1f}, min {1e3 * min(got):6.1f}"
                if got
                else ""
            )
        print(line)
    print(f"load average {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()

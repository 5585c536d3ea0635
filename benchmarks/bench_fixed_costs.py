"""The fixed costs of a whole `qkenergy analyze` run: everything but the per-head statistics.

Each run is ``qkenergy analyze MODEL --no-null --quiet --threads 1 -o out.csv``
with one BLAS thread, started as the ``qkenergy`` script starts it
(qkenergy.console:main), and split at three instants the child notes:

- start-up: process start to the first ``head_statistics`` call (interpreter,
  imports, opening the checkpoint, the wait for the first layer's read);
- tail: the last ``head_statistics`` return to the interpreter's exit
  handlers (the table, the fingerprints, writing the csv and its sidecar);
- finalisation: exit handlers to the process's end, as its parent sees it.

Their sum is the run's fixed cost; "per-head" is what lies between. With
``--before`` the same runs of an older tree are interleaved with these, so a
change of load does not pass for a change of speed. Prints medians and minima
of the repeats with the load average; asserts nothing.

    python benchmarks/bench_fixed_costs.py [--shapes gpt2,llama,llama-8192] [--model PATH]
        [--repeats 7] [--before /path/to/old/src]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from bench_speed import ONE_THREAD, RUN_SHAPES, SRC, build  # noqa: E402

PHASES = ("start-up", "per-head", "tail", "finalisation")

# The child: qkenergy's console entry point, noting the first head_statistics call, the last
# return and the start of the exit handlers (the first handler registered runs last). The
# analysis module is patched as the command imports it, so the imports keep their order.
_CHILD = """import atexit, importlib.machinery, os, sys, time
marks = {}
def note():
    with open(os.environ["QK_BENCH_MARKS"], "w") as fh:
        fh.write(f"{marks.get('first', 0.0)} {marks.get('last', 0.0)} {time.monotonic()}")
atexit.register(note)
def patch(analysis):
    inner = analysis.head_statistics
    def head_statistics(*args, **kwargs):
        marks.setdefault("first", time.monotonic())
        out = inner(*args, **kwargs)
        marks["last"] = time.monotonic()
        return out
    analysis.head_statistics = head_statistics
class Hook:
    def find_spec(self, name, path, target=None):
        if name != "qkenergy.analysis.analyze":
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        run = spec.loader.exec_module
        def exec_module(module):
            run(module)
            patch(module)
        spec.loader.exec_module = exec_module
        return spec
sys.meta_path.insert(0, Hook())
sys.argv = ["qkenergy", *sys.argv[1:]]
from qkenergy.console import main
main()
"""


def run_phases(model: Path, out: Path, src: Path) -> tuple[float, float, float, float]:
    """Seconds of (start-up, per-head, tail, finalisation) of one run with ``src`` on the path."""
    with tempfile.NamedTemporaryFile() as marks:
        env = {**os.environ, **ONE_THREAD, "PYTHONPATH": str(src), "QK_BENCH_MARKS": marks.name}
        env.pop("PYTHONDONTWRITEBYTECODE", None)  # a real install has its bytecode caches
        args = ["analyze", str(model), "--no-null", "--quiet", "--threads", "1", "-o", str(out)]
        start = time.monotonic()
        subprocess.run([sys.executable, "-c", _CHILD, *args], env=env, stdout=subprocess.DEVNULL, check=True)
        end = time.monotonic()
        first, last, exiting = map(float, Path(marks.name).read_text().split())
    return first - start, last - first, exiting - last, end - exiting


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--shapes", default="gpt2,llama,llama-8192", help="synthetic checkpoints of bench_speed"
    )
    parser.add_argument("--model", type=Path, default=None, help="this checkpoint instead of the shapes")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--before", type=Path, default=None, help="src/ of an older qkenergy to compare")
    args = parser.parse_args()
    trees = {"qkenergy": SRC, **({"before": args.before} if args.before else {})}
    with tempfile.TemporaryDirectory() as work:
        root = Path(work)
        models = [args.model] if args.model else [build(root, RUN_SHAPES[s]) for s in args.shapes.split(",")]
        print(
            f"cpus: {os.cpu_count()}, load average at start: {', '.join(f'{x:.1f}' for x in os.getloadavg())}"
        )
        for model in models:
            runs: dict[str, list[tuple[float, ...]]] = {name: [] for name in trees}
            for _ in range(args.repeats):
                for name, src in trees.items():
                    runs[name].append(run_phases(model, root / "out.csv", src))
            print(
                f"\n== {model.name}: ms, median / min of {args.repeats} (load average {os.getloadavg()[0]:.1f})"
            )
            print(f"{'':10s}" + "".join(f"{p:>16s}" for p in (*PHASES, "fixed", "total")))
            fixed = {}
            for name, rounds in runs.items():
                cols = [list(c) for c in zip(*rounds, strict=True)]
                cols.append([r[0] + r[2] + r[3] for r in rounds])
                cols.append([sum(r) for r in rounds])
                fixed[name] = statistics.median(cols[-2])
                cells = "".join(f"{1e3 * statistics.median(c):9.0f} /{1e3 * min(c):5.0f}" for c in cols)
                print(f"{name:10s}{cells}")
            if args.before:
                print(f"fixed costs: {fixed['before'] / fixed['qkenergy']:.2f}x less than before (medians)")


if __name__ == "__main__":
    main()

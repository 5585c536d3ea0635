"""Start-up of the package and the command line, optionally against an older source tree.

Times, in fresh interpreters, ``import qkenergy``, the first use of the notebook API
(``qk.open`` on the embedded MiniLM: config and headers), ``qkenergy --help`` and a whole
``qkenergy analyze --no-null --quiet`` on the embedded MiniLM, started as the console
script starts them (qkenergy.console:main). With ``--before SRC`` each run of this tree is
interleaved with one of the tree at SRC, so a change of load does not pass for a change of
speed; commands the older tree lacks are skipped for it. Prints medians and minima and their
ratios, with the load average; asserts nothing.

    python benchmarks/bench_startup.py [--repeats 15] [--before /path/to/old/src]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"


def _console(*args: str) -> list[str]:
    script = (
        f"import sys; sys.argv = ['qkenergy', *{list(args)!r}]; from qkenergy.console import main; main()"
    )
    return [sys.executable, "-c", script]


COMMANDS = {
    "import qkenergy": [sys.executable, "-c", "import qkenergy"],
    "qk.open() (API)": [sys.executable, "-c", "import qkenergy as qk; qk.open()"],
    "qkenergy --help": _console("--help"),
    "qkenergy analyze --no-null --quiet": _console("analyze", "--no-null", "--quiet"),
}


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
    times: dict[tuple[str, str], list[float]] = {(c, t): [] for c in COMMANDS for t in trees}
    for _ in range(args.repeats):
        for name, command in COMMANDS.items():
            for tree, src in trees.items():
                seconds = _run(command, src)
                if seconds is not None:
                    times[(name, tree)].append(seconds)
    for name in COMMANDS:
        line = f"{name:38s}"
        for tree in trees:
            runs = times[(name, tree)]
            line += (
                f"  {tree}: median {statistics.median(runs) * 1e3:7.1f} ms, min {min(runs) * 1e3:7.1f} ms"
                if runs
                else f"  {tree}: (fails)"
            )
        before, after = times.get((name, "before"), []), times[(name, "this tree")]
        if before and after:
            line += f"  ratio of minima {min(after) / min(before):.3f}"
        print(line)
    print(f"{args.repeats} interleaved repeats; load average {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()

"""Bytes and time of ``qkenergy analyze ORG/NAME`` reading large checkpoints from a loopback Hub .

For each of the three repositories of ``benchmarks/hub_shapes.py`` (Llama-3.1-405B, Qwen3-235B-A22B,
DeepSeek-V3: the real headers over sparse data, built once under ``--root`` and kept), served by the
loopback Hub of ``tests/loopback_hub.py`` on 127.0.0.1, in one run:

1. **local**: ``qkenergy analyze FOLDER --layers 0,1 --no-null --quiet -o local.csv`` on the same
   files (their pages warm: the hub serves them from the same page cache);
2. **hub**: ``qkenergy analyze ORG/NAME --layers 0,1 --no-null --quiet -o hub.csv`` with HF_ENDPOINT
   at the loopback Hub, a fresh ``--cache-dir`` and fresh Hugging Face caches, counting the body bytes
   the server sends;
3. **rerun**: the same command again with the same caches (it must fetch 0 bytes);
4. **offline**: the same again with ``HF_HUB_OFFLINE=1`` (it must succeed from the cache alone).

Printed per model: the repository's size; the floor (``hub_shapes.floor``: config.json and the index
whole, the header of every shard holding a tensor read, the data of the tensors read); the bytes
fetched, fetched / size and fetched / floor; whether they are within the issue's bound (1.05 x the
floor + 64 KiB per file fetched from); the requests and files fetched from; whether the hub table
equals the local one (both runs use ``--name ORG/NAME``); the rerun's and the offline run's bytes; the
wall times, seconds per GB (hub: per GB fetched; local: per GB of tensor data read) and their ratio.
Every ratio comes from the measurements of this one run. The wall times include the analysis
itself (for DeepSeek-V3 most of it: each head's W_Q is multiplied out of the query latent), so
``(hub - local) / GB fetched`` is also printed: what fetching over loopback adds per GB.

    PYTHONPATH=src python benchmarks/bench_hub.py [--root results/hub_shapes] [--models llama,qwen3,deepseek]
        [--layers 0,1] [--json results/bench_hub.json]

Needs huggingface_hub (the ``hub`` extra). Building the repositories alone:
``python benchmarks/hub_shapes.py results/hub_shapes``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))

import hub_shapes  # noqa: E402  (beside this file)

KIB = 1024
BOUND_FACTOR, BOUND_PER_FILE = 1.05, 64 * KIB  # the "Done when"


def serve_hub(home: Path) -> AbstractContextManager[Any]:
    """The loopback Hub (tests/loopback_hub.py), started, with HF_ENDPOINT and the caches under ``home``.

    The one place this benchmark touches the server's interface: ``add_repo(repo_id, folder) ->
    commit``, ``bytes_served``, ``served`` (per (repo, path)), ``log`` (one entry per request),
    ``reset_counts()``.
    """
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    from tests.loopback_hub import serve_hub as serve

    context: AbstractContextManager[Any] = serve(home)
    return context


@dataclass
class Run:
    """One command's outcome."""

    seconds: float
    returncode: int
    fetched: int = 0
    requests: int = 0
    files: int = 0
    stderr: str = ""


@dataclass
class Result:
    """One model's measurements (bytes and seconds)."""

    repo_id: str
    size: int
    floor: int
    floor_tensors: int
    floor_headers: int
    floor_files: int
    local: Run
    hub: Run
    rerun: Run
    offline: Run
    equal_tables: bool | None

    @property
    def bound(self) -> float:
        return BOUND_FACTOR * self.floor + BOUND_PER_FILE * self.hub.files


def _command(model: str, out: Path, layers: str, cache: Path, name: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "qkenergy",
        "analyze",
        model,
        "--layers",
        layers,
        "--no-null",
        "--quiet",
        "--name",
        name,
        "--cache-dir",
        str(cache),
        "-o",
        str(out),
    ]


def _run(argv: list[str], env: dict[str, str] | None = None) -> Run:
    begin = time.perf_counter()
    done = subprocess.run(argv, env=env, capture_output=True, text=True, check=False)
    seconds = time.perf_counter() - begin
    return Run(seconds, done.returncode, stderr=done.stderr.strip()[-2000:])


def _served(hub: Any, argv: list[str], env: dict[str, str] | None = None) -> Run:
    hub.reset_counts()
    run = _run(argv, env)
    with hub.lock:
        run.fetched = hub.bytes_served
        run.requests = len(hub.log)
        run.files = sum(1 for v in hub.served.values() if v > 0)
    return run


def _same_table(a: Path, b: Path) -> bool | None:
    if not (a.is_file() and b.is_file()):
        return None
    import pandas as pd

    return bool(pd.read_csv(a).equals(pd.read_csv(b)))


def measure(
    models: Sequence[hub_shapes.ModelShape | str],
    root: Path,
    layers: Sequence[int] = (0, 1),
    *,
    work: Path | None = None,
    log: Any = print,
) -> Iterator[Result]:
    """Build (or reuse) each repository under ``root``, serve them, and measure each model in turn.

    Parameters
    ----------
    models : sequence of ModelShape or str
        The models (keys of ``hub_shapes.MODELS``, or shapes: the tests pass small ones).
    root : Path
        Where the repositories are built and kept.
    layers : sequence of int
        The layers analysed (and filled).
    work : Path or None
        Scratch folder for the outputs and caches (a temporary one by default).
    log : callable
        Called with a line as each repository is written.

    Yields
    ------
    Result
    """
    built = [hub_shapes.build(root, m, filled=layers, log=log) for m in models]
    text = ",".join(map(str, layers))
    with tempfile.TemporaryDirectory(dir=work) as scratch:
        tmp = Path(scratch)
        with serve_hub(tmp / "home") as hub:
            for folder, repo in built:
                repo_id = repo.model.repo_id
                hub.add_repo(repo_id, folder)
                fl = hub_shapes.floor(repo, layers)
                out = tmp / repo.model.folder_name
                out.mkdir()
                local = _run(_command(str(folder), out / "local.csv", text, out / "cache-local", repo_id))
                cache = out / "cache-hub"
                argv = _command(repo_id, out / "hub.csv", text, cache, repo_id)
                hub_run = _served(hub, argv)
                rerun = _served(hub, argv)
                offline = _served(hub, argv, {**os.environ, "HF_HUB_OFFLINE": "1"})
                yield Result(
                    repo_id,
                    hub_shapes.repo_size(repo),
                    fl.total,
                    sum(fl.tensors.values()),
                    sum(fl.headers.values()),
                    sum(fl.files.values()),
                    local,
                    hub_run,
                    rerun,
                    offline,
                    _same_table(out / "local.csv", out / "hub.csv"),
                )


def _gb(n: float) -> str:
    return f"{n / 1e9:,.3f} GB"


def report(r: Result) -> str:
    """The lines printed for one model.

    Parameters
    ----------
    r : Result
        Its measurements.

    Returns
    -------
    str
    """
    lines = [
        f"{r.repo_id}",
        f"  repository {_gb(r.size)}; floor {_gb(r.floor)} ({r.floor:,} bytes: tensors {r.floor_tensors:,}, "
        f"shard headers {r.floor_headers:,}, config + index {r.floor_files:,})",
    ]
    for what, run in (("local", r.local), ("hub", r.hub), ("rerun", r.rerun), ("offline", r.offline)):
        if run.returncode != 0:
            lines.append(f"  {what}: FAILED (exit {run.returncode}): {run.stderr.splitlines()[-1:]}")
    h = r.hub
    if h.returncode == 0:
        within = "within" if h.fetched <= r.bound else "OVER"
        lines.append(
            f"  fetched {h.fetched:,} bytes in {h.requests} requests from {h.files} files: "
            f"{h.fetched / r.size:.4%} of the repository, {h.fetched / r.floor:.4f} x the floor "
            f"({within} 1.05 x floor + 64 KiB per file = {r.bound:,.0f})"
        )
        lines.append(
            f"  table equal to the local analysis: {r.equal_tables}; rerun fetched {r.rerun.fetched:,} bytes "
            f"({r.rerun.requests} requests); offline (HF_HUB_OFFLINE=1) exit {r.offline.returncode}, "
            f"{r.offline.fetched:,} bytes"
        )
        hub_rate = h.seconds / (h.fetched / 1e9) if h.fetched else float("nan")
        local_rate = r.local.seconds / (r.floor_tensors / 1e9)
        lines.append(
            f"  wall: hub {h.seconds:.1f} s ({hub_rate:.1f} s per GB fetched), local {r.local.seconds:.1f} s "
            f"({local_rate:.1f} s per GB read); hub / local {h.seconds / r.local.seconds:.2f}; "
            f"fetching adds {(h.seconds - r.local.seconds) / max(h.fetched / 1e9, 1e-12):.1f} s per GB fetched"
        )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """The command line (see the module docstring)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", type=Path, default=ROOT / "results" / "hub_shapes")
    parser.add_argument("--models", default=",".join(hub_shapes.MODELS))
    parser.add_argument("--layers", default="0,1")
    parser.add_argument("--json", type=Path, default=None, help="also write the measurements here")
    args = parser.parse_args(argv)
    layers = [int(x) for x in args.layers.split(",")]
    results = []
    for result in measure(args.models.split(","), args.root, layers):
        print(report(result), flush=True)
        results.append(result)
    if args.json is not None:
        args.json.write_text(json.dumps([asdict(r) for r in results], indent=2) + "\n")
    ok = all(
        r.hub.returncode == 0 and r.rerun.fetched == 0 and r.offline.returncode == 0 and r.equal_tables
        for r in results
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

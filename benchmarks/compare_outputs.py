"""Prove that a refactoring changed no output: run the same commands under two source trees and compare.

Each case (a ``qkenergy`` command line, or a few lines of the notebook API) runs once under
``--before`` and once under ``--after`` (default: this repository's src/), with the same
interpreter, ``PYTHONPATH=TREE``, the same working directory path (``WORK/run``, emptied before
each run, its files then moved aside), a fresh empty null cache there (``XDG_CACHE_HOME``), no
network, output piped and ``COLUMNS=80``. Shared inputs (small synthetic checkpoints and a survey
manifest) are written once under ``WORK/fixtures``. Then, file by file:

- stdout and stderr, tables (.csv, .json, .parquet, the layer tables, the .meta.json sidecars):
  byte for byte; where the bytes differ, a JSON document or a Parquet file's table and metadata
  are compared as values, and recorded settings may only *gain* keys (listed, not a failure).
  The values that change from one run to the next by nature (``created`` times, durations) are
  masked first (:data:`VOLATILE_KEYS`, :data:`DURATION`), and a path inside either source tree
  (a model shipped in the package) reads ``<src>/...``.
- figures (.png, .svg, .html): listed when they differ, not a failure.
- the null-cache files each run wrote: listed when their names differ (a changed cache key),
  not a failure.

Prints one line per case (``same`` or ``differs: what``) and exits 1 on any unexpected difference.

    python benchmarks/compare_outputs.py --before /work/base/src [--after src] [--only NAME ...] [--keep DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
FIGURES = {".png", ".svg", ".pdf", ".html"}
# keys whose values differ between two runs of the same tree: masked before comparing
VOLATILE_KEYS = {"created", "elapsed", "elapsed_s", "seconds", "wall_s", "started", "finished", "duration_s"}
# durations printed in summaries ("3.1 s", "120 ms"); masked in outputs whose case says so
DURATION = re.compile(r"\b\d+(?:\.\d+)?\s?(?:ms|s|min|h)\b")
TREES: list[str] = []  # the two source trees: where a path names one (a model inside the package), "<src>"
SKIPPED = {"ledger.sqlite", "ledger.sqlite-wal", "ledger.sqlite-shm", "survey.lock"}


@dataclass(frozen=True)
class Case:
    """One command run under both trees: ``command`` after ``qkenergy`` (split on spaces), or Python ``code``."""

    name: str
    command: str = ""
    code: str = ""
    timed: bool = False  # its printed summary holds a duration (masked)


SURVEY = "--samples 100 --workers 1 --per-layer --null both --rotation-samples 20"
API_CODE = """
import qkenergy as qk
a = qk.analyze(samples=200, layers=[0, 5], per_layer=True, threads=1)
print(repr(a))
print(a.summary(top=3))
print(a.records()[:3] if hasattr(a, "records") else "")
a.write("api.parquet")
m = qk.open("smollm2")
b = m.analyze(samples=100, layers=[1], heads=[0, 3], null_kind="both", rotation_samples=20)
print(b.summary(top=2))
print(b._repr_html_())
b.write("api_smol.json")
"""


def cases(fx: Path) -> list[Case]:
    """The fixed list of commands (fixtures under ``fx``)."""
    gqa, gptq, manifest = str(fx / "llama-gqa"), str(fx / "llama-gptq"), str(fx / "survey" / "m.toml")
    return [
        Case("minilm-csv", "analyze -o x.csv"),
        Case("minilm-json-plot", "analyze -o x.json --samples 300 --plot figs"),
        Case("minilm-parquet", "analyze -o x.parquet --samples 300"),
        Case("minilm-both", "analyze -o x.csv --null both --rotation-samples 50 --samples 300"),
        Case("minilm-rotation", "analyze -o x.json --null rotation --rotation-samples 30"),
        Case("minilm-per-layer", "analyze -o x.csv --per-layer --samples 300"),
        Case("minilm-radius", "analyze -o x.csv --radius 0.05 --samples 300"),
        Case("minilm-type-radius", "analyze -o x.csv --type-rule radius --radius 0.05 --samples 300"),
        Case("minilm-cuts", "analyze -o x.csv --imbalance-cut 0.3 --edge-cut 0.02 --samples 300"),
        Case("minilm-select", "analyze -o x.csv --layers 0,2-3 --heads 1-4 --samples 300 --top 2"),
        Case("minilm-samples-seed", "analyze -o x.csv --samples 500 --seed 3 --layers 1"),
        Case("minilm-no-null", "analyze -o x.csv --no-null --fold-norm --name renamed"),
        Case("minilm-quiet", "analyze -o x.parquet --quiet --samples 200 --per-layer"),
        Case("smollm2", "analyze smollm2 -o s.csv --samples 200 --per-layer"),
        Case("smollm2-rope", "analyze smollm2 -o s.json --samples 200 --layers 0 --rope-offsets 0,1,4"),
        Case(
            "gqa-both",
            f"analyze {gqa} -o g.parquet --null both --rotation-samples 20 --samples 200 --per-layer",
        ),
        Case("gqa-csv", f"analyze {gqa} -o g.csv --samples 200 --type-rule radius"),
        Case("gptq", f"analyze {gptq} -o q.csv --samples 200 --per-layer"),
        Case("baseline", "baseline --n 8 --N 32 --samples 300"),
        Case("baseline-json", "baseline --n 4 --N 16 --dist rademacher --samples 200 --json"),
        Case("lobes", "lobes --n 10,100 --repeats 5"),
        Case("lobes-json", "lobes --law pareto:3 --rho 0.7 --n 10,50 --repeats 4 --json"),
        Case("survey", f"survey {manifest} -o sv {SURVEY}", timed=True),
        Case("api", code=API_CODE),
        Case("bad-samples", "analyze --samples 1"),
        Case("bad-radius", "analyze --radius 2"),
    ]


# ----------------------------------------------------------------------------- fixtures


def pack_words(fields: Any, bits: int, axis: int) -> Any:
    """Unsigned ``bits``-bit fields packed into int32 words along ``axis``, field k at bits [k*bits, (k+1)*bits)."""
    import numpy as np

    per = 32 // bits
    moved = np.moveaxis(fields.astype(np.uint64), axis, -1)
    groups = moved.reshape(*moved.shape[:-1], -1, per)
    words = np.zeros(groups.shape[:-1], dtype=np.uint64)
    for k in range(per):
        words |= groups[..., k] << np.uint64(k * bits)
    return np.moveaxis(words.astype(np.uint32).view(np.int32), -1, axis)


def write_gptq(root: Path) -> None:
    """A tiny 4-bit GPTQ llama (2 layers, 4 query heads, 2 key heads of 16, N = 64; RoPE)."""
    import numpy as np
    from safetensors.numpy import save_file

    heads, kv, n, N = 4, 2, 16, 64
    rng = np.random.default_rng(7)
    tensors = {}
    for layer in range(2):
        for proj, rows in (("q_proj", heads * n), ("k_proj", kv * n)):
            name = f"model.layers.{layer}.self_attn.{proj}"
            tensors[name + ".qweight"] = pack_words(rng.integers(0, 16, (N, rows)), 4, 0)
            tensors[name + ".qzeros"] = pack_words(np.full((4, rows), 7), 4, 1)
            tensors[name + ".scales"] = (10.0 ** rng.uniform(-3, 3, size=(4, rows))).astype(np.float16)
    config = {
        "model_type": "llama",
        "hidden_size": N,
        "num_attention_heads": heads,
        "num_key_value_heads": kv,
        "head_dim": n,
        "num_hidden_layers": 2,
        "max_position_embeddings": 128,
        "rope_theta": 10000.0,
        "quantization_config": {
            "quant_method": "gptq",
            "bits": 4,
            "group_size": 16,
            "desc_act": False,
            "sym": True,
        },
    }
    root.mkdir(parents=True)
    (root / "config.json").write_text(json.dumps(config))
    save_file(tensors, str(root / "model.safetensors"))


def write_fixtures(fx: Path) -> None:
    """The checkpoints and the survey manifest the cases read (the test suite's writers)."""
    sys.path.insert(0, str(REPO))
    from tests.survey_checkpoints import two_model_manifest, write_checkpoint

    write_checkpoint(fx / "llama-gqa", "llama", layers=2, N=64, heads=4, head_dim=16, kv_heads=2, seed=5)
    write_gptq(fx / "llama-gptq")
    two_model_manifest(fx / "survey")


# ----------------------------------------------------------------------------- running


def run_case(case: Case, tree: Path, work: Path, dest: Path) -> None:
    """Run ``case`` under ``tree`` in WORK/run; its files (and stdout, stderr, exit status) end in ``dest``."""
    run = work / "run"
    shutil.rmtree(run, ignore_errors=True)
    run.mkdir()
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(
            ("QKENERGY", "HF_", "XDG_", "PYTHON", "COLUMNS", "LINES", "FORCE_COLOR", "NO_COLOR")
        )
    }
    env.update(
        PYTHONPATH=str(tree),
        COLUMNS="80",
        XDG_CACHE_HOME=str(run / "xdg"),
        HF_HOME=str(run / "hf"),
        HF_HUB_OFFLINE="1",
        PYTHONHASHSEED="0",
        MATPLOTLIBRC=str(work / "matplotlibrc"),  # SVG ids from a fixed salt, not a random one
        SOURCE_DATE_EPOCH="0",
    )
    (work / "matplotlibrc").write_text("svg.hashsalt: qkenergy-compare\n")
    script = Path(sys.executable).with_name("qkenergy")
    if case.code:
        argv = [sys.executable, "-c", case.code]
    elif script.exists():
        argv = [str(script), *case.command.split()]
    else:
        argv = [sys.executable, "-m", "qkenergy", *case.command.split()]
    done = subprocess.run(argv, cwd=run, env=env, capture_output=True, timeout=600)
    (run / "stdout.txt").write_bytes(done.stdout)
    (run / "stderr.txt").write_bytes(done.stderr)
    (run / "exit.txt").write_text(f"{done.returncode}\n")
    shutil.move(str(run), str(dest))


# ----------------------------------------------------------------------------- comparing


@dataclass
class Verdict:
    """What differs in one case: failures, and the differences that are only listed."""

    failures: list[str] = field(default_factory=list)
    added: list[str] = field(default_factory=list)
    figures: list[str] = field(default_factory=list)
    cache: list[str] = field(default_factory=list)


def files(root: Path) -> Iterator[str]:
    """Relative paths of the outputs under ``root`` (the null cache apart)."""
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root).as_posix()
        if path.is_file() and not rel.startswith(("xdg/", "hf/")) and path.name not in SKIPPED:
            yield rel


def cache_files(root: Path) -> list[str]:
    return sorted(p.name for p in (root / "xdg").rglob("*") if p.is_file())


def masked(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: "<masked>" if k in VOLATILE_KEYS else masked(v) for k, v in value.items()}
    if isinstance(value, list):
        return [masked(v) for v in value]
    if isinstance(value, str):
        return DURATION.sub("<t>", _untreed(value))
    return value


def _untreed(text: str) -> str:
    for tree in TREES:
        text = text.replace(tree, "<src>")
    return text


def compare_json(before: Any, after: Any, where: str, verdict: Verdict) -> None:
    """Values equal, except keys only ``after`` has (listed as added)."""
    if isinstance(before, dict) and isinstance(after, dict):
        for key in before:
            if key not in after:
                verdict.failures.append(f"{where}.{key} removed")
            else:
                compare_json(before[key], after[key], f"{where}.{key}", verdict)
        verdict.added.extend(f"{where}.{key}" for key in after if key not in before)
    elif isinstance(before, list) and isinstance(after, list) and len(before) == len(after):
        for i, (b, a) in enumerate(zip(before, after)):
            compare_json(b, a, f"{where}[{i}]", verdict)
    elif before != after or type(before) is not type(after):
        verdict.failures.append(f"{where}: {json.dumps(before)[:60]} -> {json.dumps(after)[:60]}")


def compare_parquet(before: Path, after: Path, rel: str, verdict: Verdict) -> None:
    import pyarrow.parquet as pq

    b, a = pq.read_table(before), pq.read_table(after)
    if not b.equals(a):  # data and schema (field metadata aside)
        verdict.failures.append(f"{rel}: table values or schema differ")
    mb, ma = b.schema.metadata or {}, a.schema.metadata or {}
    for key in sorted(set(mb) | set(ma)):
        name = f"{rel}[{key.decode(errors='replace')}]"
        if key not in ma or key not in mb:
            (verdict.failures if key not in ma else verdict.added).append(f"{name} metadata key")
            continue
        try:
            compare_json(masked(json.loads(mb[key])), masked(json.loads(ma[key])), name, verdict)
        except ValueError:
            if mb[key] != ma[key]:
                verdict.failures.append(f"{name} metadata differs")


SVG_SETTINGS = re.compile(r"<dc:description>(.*?)</dc:description>", re.S)


def compare_figure(before: Path, after: Path, rel: str, verdict: Verdict) -> None:
    """Pixels (PNG) or drawing (SVG) equal, and the settings the figure records equal or only added to."""
    if before.suffix == ".png":
        import numpy as np
        from PIL import Image

        with Image.open(before) as ib, Image.open(after) as ia:
            same = np.array_equal(np.asarray(ib), np.asarray(ia))
            texts = dict(ib.text), dict(ia.text)  # type: ignore[attr-defined]
    elif before.suffix == ".svg":
        tb, ta = before.read_text(), after.read_text()
        same = SVG_SETTINGS.sub("", tb) == SVG_SETTINGS.sub("", ta)
        found = SVG_SETTINGS.search(tb), SVG_SETTINGS.search(ta)
        texts = tuple({"settings": m.group(1)} if m else {} for m in found)  # type: ignore[assignment]
    else:
        verdict.figures.append(rel)
        return
    if not same:
        verdict.figures.append(rel)
    for key in sorted(set(texts[0]) | set(texts[1])):
        try:
            compare_json(
                masked(json.loads(texts[0][key])), masked(json.loads(texts[1][key])), f"{rel}[{key}]", verdict
            )
        except (KeyError, ValueError):
            if texts[0].get(key) != texts[1].get(key):
                verdict.figures.append(f"{rel}[{key}]")


def compare_text(before: bytes, after: bytes, rel: str, case: Case, verdict: Verdict) -> None:
    tb, ta = _untreed(before.decode(errors="replace")), _untreed(after.decode(errors="replace"))
    if case.timed:  # a printed duration may also move where a line wraps
        tb, ta = DURATION.sub("<t>", " ".join(tb.split())), DURATION.sub("<t>", " ".join(ta.split()))
    if tb == ta:
        return
    lb, la = tb.splitlines(), ta.splitlines()
    first = next((i for i, (x, y) in enumerate(zip(lb, la)) if x != y), min(len(lb), len(la)))
    show = (lb[first] if first < len(lb) else "<end>")[:70], (la[first] if first < len(la) else "<end>")[:70]
    verdict.failures.append(f"{rel} line {first + 1}: {show[0]!r} -> {show[1]!r}")


def compare_case(case: Case, before: Path, after: Path) -> Verdict:
    verdict = Verdict()
    fb, fa = set(files(before)), set(files(after))
    for rel in sorted(fb ^ fa):
        target = verdict.figures if Path(rel).suffix in FIGURES else verdict.failures
        target.append(f"{rel} only {'before' if rel in fb else 'after'}")
    for rel in sorted(fb & fa):
        pb, pa = before / rel, after / rel
        db, da = pb.read_bytes(), pa.read_bytes()
        if db == da:
            continue
        suffix = pb.suffix
        if suffix in FIGURES:
            compare_figure(pb, pa, rel, verdict)
        elif suffix == ".parquet":
            compare_parquet(pb, pa, rel, verdict)
        elif suffix == ".json":
            try:
                jb, ja = json.loads(db), json.loads(da)
            except ValueError:
                compare_text(db, da, rel, case, verdict)
            else:
                compare_json(masked(jb), masked(ja), rel, verdict)
        else:
            compare_text(db, da, rel, case, verdict)
    if cache_files(before) != cache_files(after):
        verdict.cache.append(f"{cache_files(before)} -> {cache_files(after)}")
    return verdict


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", type=Path, required=True, help="the source tree before (its src/)")
    parser.add_argument(
        "--after", type=Path, default=REPO / "src", help="the source tree after (default: this repo's src/)"
    )
    parser.add_argument("--only", nargs="*", default=None, help="run only these cases")
    parser.add_argument(
        "--keep", type=Path, default=None, help="keep every run's files in this (new) directory"
    )
    parser.add_argument("--list", action="store_true", help="list the cases and exit")
    args = parser.parse_args(argv)
    trees = {"before": args.before.resolve(), "after": args.after.resolve()}
    TREES.extend(str(tree) for tree in trees.values())
    for label, tree in trees.items():
        if not (tree / "qkenergy" / "__init__.py").is_file():
            parser.error(f"--{label} {tree}: not a source tree holding qkenergy/")
    work = Path(tempfile.mkdtemp(prefix="qk-compare-")) if args.keep is None else args.keep.resolve()
    work.mkdir(parents=True, exist_ok=True)
    write_fixtures(work / "fixtures")
    chosen = [c for c in cases(work / "fixtures") if args.only is None or c.name in args.only]
    if args.list:
        print("\n".join(f"{c.name}: {c.command or 'python API'}" for c in chosen))
        return 0
    unexpected = 0
    try:
        for case in chosen:
            for label, tree in trees.items():
                run_case(case, tree, work, work / label / case.name)
            verdict = compare_case(case, work / "before" / case.name, work / "after" / case.name)
            status = "differs: " + "; ".join(verdict.failures) if verdict.failures else "same"
            notes = [f"added keys {', '.join(sorted(set(verdict.added)))}"] if verdict.added else []
            notes += [f"figures differ: {', '.join(verdict.figures)}"] if verdict.figures else []
            notes += [f"null cache files {verdict.cache[0]}"] if verdict.cache else []
            print(f"{case.name:22} {status}" + "".join(f"\n{'':22}   ({note})" for note in notes), flush=True)
            unexpected += bool(verdict.failures)
    finally:
        if args.keep is None:
            shutil.rmtree(work, ignore_errors=True)
    print(f"{len(chosen)} cases, {unexpected} with unexpected differences")
    return 1 if unexpected else 0


if __name__ == "__main__":
    sys.exit(main())

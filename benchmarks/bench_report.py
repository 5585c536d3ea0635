"""Benchmark of `qkenergy report` at the size of a published survey: 14 models, 9,512 heads.

The head table is made from the embedded MiniLM analysed once (72 heads),
repeated and jittered into 14 models of 1 to 48 layers (7 architectures, two
of them a training run with steps, groups for all) so that every figure,
including the training-step and group figures and a --baseline comparison,
is drawn. Reported, each measured in this one run:

- prepare: the per-model table, the reference comparison and the plotly
  figures (comparison + survey_figures);
- page: build_report(static=False), the HTML page and CSVs, and its size;
- static: build_report() (its default), the page plus PNG and SVG of every
  figure (through kaleido in headless Chromium; without one none, and
  Report.renderer is None), and the files' sizes;
- the ratio static / page (what the paper figures cost on top of the page).

No assertions on time.

    python benchmarks/bench_report.py [--heads 9512] [--models 14]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

from qkenergy.analysis.analyze import analyze_model
from qkenergy.analysis.comparison import baseline_comparison, model_summary
from qkenergy.figures.survey_figures import report_figures
from qkenergy.report.page import build_report

ARCHITECTURES = ("gpt2", "opt", "bloom", "gpt_neox", "llama", "mistral", "bert")


def survey_sized(heads_total: int, models: int, seed: int = 0) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(heads, models): MiniLM's heads replicated into ``models`` models with about ``heads_total`` heads."""
    base = analyze_model(samples=200).heads.drop(columns=["alpha", "beta"])
    rng = np.random.default_rng(seed)
    per_model = heads_total // models
    frames, facts = [], []
    for m in range(models):
        run = m < 4  # models 0-3: checkpoints of one training run, all of one shape
        heads_per_layer = 16 if run or m % 3 == 0 else 12
        layers = max(1, per_model // heads_per_layer)
        rows = base.sample(layers * heads_per_layer, replace=True, random_state=m).reset_index(drop=True)
        rows["layer"] = np.repeat(np.arange(layers), heads_per_layer)
        rows["head"] = np.tile(np.arange(heads_per_layer), layers)
        rows["symmetric_energy"] = np.clip(rows["symmetric_energy"] + rng.normal(0, 0.02, len(rows)), 0, 1)
        name = f"run@{1000 * m}" if run else f"model-{m}"
        rows["model"] = name
        rows["group"] = "run" if run else f"family-{m % 3}"
        rows["step"] = 1000 * m if run else np.nan
        frames.append(rows)
        facts.append({"model": name, "architecture": ARCHITECTURES[0 if run else m % len(ARCHITECTURES)]})
    return pd.concat(frames, ignore_index=True), pd.DataFrame(facts)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--heads", type=int, default=9512)
    parser.add_argument("--models", type=int, default=14)
    args = parser.parse_args()
    heads, models = survey_sized(args.heads, args.models)
    print(f"{heads['model'].nunique()} models, {len(heads)} heads")

    start = time.perf_counter()
    summary = model_summary(heads, None, models)
    comparison = baseline_comparison(heads, "run@0", models)
    figures = report_figures(heads, summary, models=models, comparison=comparison)
    prepare = time.perf_counter() - start
    print(f"prepare: {prepare:.2f} s ({len(figures)} figures)")

    with tempfile.TemporaryDirectory() as tmp:
        page_path = Path(tmp) / "page" / "report.html"
        start = time.perf_counter()
        build_report(heads, None, page_path, baseline="run@0", models=models, static=False)
        page = time.perf_counter() - start
        print(f"page: {page:.2f} s, report.html {page_path.stat().st_size / 1e6:.2f} MB")

        full_path = Path(tmp) / "full" / "report.html"
        start = time.perf_counter()
        result = build_report(heads, None, full_path, baseline="run@0", models=models)
        static = time.perf_counter() - start
        sizes = {
            suffix: sum(p.stat().st_size for p in result.files if p.suffix == suffix)
            for suffix in (".png", ".svg")
        }
        print(
            f"static: {static:.2f} s, {len(result.files)} files drawn by {result.renderer}, "
            f"PNG {sizes['.png'] / 1e6:.2f} MB, SVG {sizes['.svg'] / 1e6:.2f} MB"
        )
    print(f"ratio static / page: {static / page:.1f}")


if __name__ == "__main__":
    main()

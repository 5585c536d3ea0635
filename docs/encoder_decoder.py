"""`make demo`'s comparison: the embedded encoder and decoder side by side, and one figure of their heads.

    python docs/encoder_decoder.py results/minilm.csv results/smollm2.csv -o results/encoder_decoder.png

Reads the head tables that ``qkenergy analyze`` wrote for the two embedded models (``qkenergy analyze
-o results/minilm.csv`` and ``qkenergy analyze smollm2 -o results/smollm2.csv``, with their null laws),
prints one column per model (median s, the random baseline, the share of heads significantly above
and below the null, the head types, how the weights are stored) and draws every head's z-score
against its own null law by relative depth, beside the distribution of s - baseline of each model.
docs/decoder.md shows the output; a test keeps the two equal.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

COLOURS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd")


def _storage(settings: dict[str, Any]) -> str:
    gguf = settings.get("gguf")
    if gguf:
        kinds = "/".join(gguf.get("attention_types") or ["?"])
        return f"{kinds} GGUF"
    return "safetensors"


def side_by_side(tables: list[pd.DataFrame]) -> str:
    """One column per model: the lines `make demo` prints."""
    from qkenergy.analysis.comparison import model_summary

    heads = pd.concat(tables, ignore_index=True)
    summary = model_summary(heads).set_index("model")
    names = [str(t["model"].iloc[0]) for t in tables]
    rows: list[tuple[str, list[str]]] = []

    def row(label: str, values: list[str]) -> None:
        rows.append((label, values))

    row("", [name.split("/")[-1] for name in names])
    row("weights (W_Q, W_K)", [_storage(t.attrs.get("settings") or {}) for t in tables])
    row("heads (layers)", [f"{summary.at[m, 'heads']} ({summary.at[m, 'layers']})" for m in names])
    row("head shape n x N", [f"{summary.at[m, 'n']} x {summary.at[m, 'N']}" for m in names])
    row("median s", [f"{summary.at[m, 's_median']:.4f}" for m in names])
    row("random baseline", [f"{summary.at[m, 'baseline_min']:.4f}" for m in names])
    row("heads above the null", [f"{summary.at[m, 'share_above']:.0%}" for m in names])
    row("heads below the null", [f"{summary.at[m, 'share_below']:.0%}" for m in names])
    below_half = [float(np.mean(t["symmetric_energy"].to_numpy(np.float64) < 0.5)) for t in tables]
    row("heads with s < 1/2", [f"{x:.0%}" for x in below_half])
    near = [float(np.mean(np.abs(t["symmetric_energy_z"].to_numpy(np.float64)) < 3)) for t in tables]
    row("heads with |z| < 3", [f"{x:.0%}" for x in near])
    for kind in ("II", "I+", "I-"):
        row(f"type {kind}", [f"{summary.at[m, f'share_{kind}']:.0%}" for m in names])
    width = max(len(label) for label, _ in rows)
    cols = [max(len(r[1][k]) for r in rows) for k in range(len(names))]
    lines = []
    for label, values in rows:
        cells = "  ".join(v.rjust(w) for v, w in zip(values, cols))
        lines.append(f"{label.ljust(width)}  {cells}".rstrip())
    return "\n".join(lines)


def figure(tables: list[pd.DataFrame]) -> Any:
    """Left: every head's z against its null law by relative depth; right: s - baseline per model."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(11, 4.2))
    left, right = fig.subplots(1, 2, gridspec_kw={"width_ratios": [3, 2]})
    for k, table in enumerate(tables):
        name = str(table["model"].iloc[0]).split("/")[-1]
        colour = COLOURS[k % len(COLOURS)]
        layer = table["layer"].to_numpy(np.float64)
        depth = layer / max(1.0, layer.max())
        jitter = (table["head"].to_numpy(np.float64) / max(1.0, table["head"].max()) - 0.5) * 0.6
        depth = depth + jitter / max(1.0, layer.max() + 1)
        z = table["symmetric_energy_z"].to_numpy(np.float64)
        left.scatter(depth, z, s=12, alpha=0.7, color=colour, linewidths=0, label=name)
        N = table["N"].to_numpy(np.float64)
        shift = table["symmetric_energy"].to_numpy(np.float64) - (N + 1) / (2 * N)
        share = np.full(shift.size, 1 / shift.size)  # shares: the models have different head counts
        right.hist(
            shift, bins=np.linspace(-0.12, 0.4, 53), weights=share, alpha=0.55, color=colour, label=name
        )
    left.axhline(0.0, color="black", lw=0.8)
    for bound in (-1.96, 1.96):
        label = "|z| = 1.96 (p = 0.05 two-sided, before the BH adjustment)" if bound > 0 else None
        left.axhline(bound, color="grey", lw=0.6, ls="--", label=label)
    left.set_yscale("symlog", linthresh=2.0)
    left.set_xlabel("relative depth (layer / last layer)")
    left.set_ylabel("z of s against the null law (symlog)")
    left.set_title("each head against a random head of its shape")
    # under the axes: the heads fill the panel
    left.legend(loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=3, frameon=False, fontsize=8)
    right.axvline(0.0, color="black", lw=0.8)
    right.set_xlabel("s - (N + 1)/(2N)")
    right.set_ylabel("share of the model's heads")
    right.legend(loc="upper right", frameon=False)
    right.set_title("symmetric energy above its baseline")
    fig.tight_layout()
    return fig


def write_figure(fig: Any, path: Path) -> None:
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    from qkenergy.base.atomic import atomic_path

    FigureCanvasAgg(fig)
    with atomic_path(path) as staged:
        fig.savefig(staged, format=path.suffix.lstrip(".") or "png", dpi=150, bbox_inches="tight")


def main(argv: list[str] | None = None) -> None:
    from qkenergy.formats.tables import read_table

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("tables", nargs="+", type=Path, help="head tables from qkenergy analyze -o")
    parser.add_argument("-o", "--output", type=Path, required=True, help="the figure (.png, .svg or .pdf)")
    args = parser.parse_args(argv)
    tables = [read_table(path) for path in args.tables]
    print(side_by_side(tables))
    write_figure(figure(tables), args.output)
    print(f"wrote {args.output}")


if __name__ == "__main__":
    sys.exit(main())

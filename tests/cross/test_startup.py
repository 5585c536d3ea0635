"""Start-up stays light: heavy libraries are imported where they are used (issue 7).

A structural check rather than a timed one: in a fresh interpreter, importing
qkenergy, running ``qkenergy --help`` and importing the computational modules
must not pull in scipy.stats (~0.5 s), matplotlib, pandas or dask. Nor may a
whole ``qkenergy analyze -o table.csv`` run, with or without null laws: its table
is written from numpy columns, pandas (~0.25 s) is imported only when a DataFrame
is asked for (the summary reads the numpy columns too), and the Beta tail of the
null columns needs scipy.special only. Lighter modules a run may not need are
checked too: the Monte Carlo engine without null laws, ml_dtypes without bfloat16.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

PROBE = r"""
import contextlib, io, json, sys

def heavy():
    return sorted(m for m in ("scipy.stats", "matplotlib", "pandas", "dask", "distributed") if m in sys.modules)

seen = {}
import qkenergy
seen["import qkenergy"] = heavy()
from qkenergy import cli
with contextlib.redirect_stdout(io.StringIO()) as out:
    try:
        cli.main(["--help"])
    except SystemExit:
        pass
assert "analyze" in out.getvalue()
seen["qkenergy --help"] = heavy()
import qkenergy.analysis.analyze
seen["analysis.analyze"] = heavy()
try:
    cli.main(["analyze", "--layers", "0", "--no-null", "--quiet", "-o", sys.argv[1]])
except SystemExit as done:
    assert done.code in (0, None), done.code
seen["analyze --no-null -o csv"] = heavy()
seen["deferred, analyze --no-null of a float32 model"] = sorted(
    m for m in ("qkenergy.math.montecarlo", "qkenergy.math.entry_laws", "ml_dtypes") if m in sys.modules
)
import qkenergy.math.baselines, qkenergy.math.montecarlo, qkenergy.math.nulls, qkenergy.math.statistics
seen["math modules"] = heavy()
try:
    cli.main(["analyze", "--layers", "0", "--samples", "50", "--cache-dir", sys.argv[2], "--quiet",
              "-o", sys.argv[1]])
except SystemExit as done:
    assert done.code in (0, None), done.code
seen["analyze -o csv, with null laws"] = heavy()
with contextlib.redirect_stdout(io.StringIO()) as summary:
    try:
        cli.main(["analyze", "--layers", "0", "--samples", "50", "--cache-dir", sys.argv[2], "-o", sys.argv[1]])
    except SystemExit as done:
        assert done.code in (0, None), done.code
assert "Symmetric energy per layer" in summary.getvalue()
seen["analyze with its summary"] = heavy()
print(json.dumps(seen))
"""


def test_start_up_imports_no_heavy_library(tmp_path: Path) -> None:
    table = tmp_path / "heads.csv"
    done = subprocess.run(
        [sys.executable, "-c", PROBE, str(table), str(tmp_path / "cache")],
        capture_output=True,
        text=True,
        check=True,
    )
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["import qkenergy"] == []
    assert seen["qkenergy --help"] == []
    assert seen["math modules"] == []
    assert seen["analysis.analyze"] == []
    assert seen["analyze --no-null -o csv"] == []
    # a run without null laws draws nothing (the Monte Carlo engine, ~4 ms), and MiniLM's float32
    # weights need no bfloat16 (ml_dtypes, ~4 ms)
    assert seen["deferred, analyze --no-null of a float32 model"] == []
    assert seen["analyze -o csv, with null laws"] == []  # the Beta tail needs scipy.special only
    assert seen["analyze with its summary"] == []  # the summary reads the numpy columns
    assert len(table.read_text().splitlines()) == 1 + 12  # MiniLM's layer 0: 12 heads


def test_console_entry_leaves_the_collector_on() -> None:
    # The console script imports the command line with the garbage collector paused and then
    # freezes what the imports made; the commands themselves run with it on.
    probe = (
        "import gc, qkenergy.cli\n"
        "qkenergy.cli.main = lambda: print(gc.isenabled(), gc.get_freeze_count() > 0)\n"
        "from qkenergy.console import main\n"
        "main()\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert done.stdout.split() == ["True", "True"]


def test_opening_a_model_reads_weights_only() -> None:
    # qk.open reads the config and the headers: neither numpy's consumers in the analysis nor
    # the heads' mathematics are imported before a head or an analysis is asked for.
    probe = (
        "import sys, qkenergy as qk\n"
        "model = qk.open()\n"
        "print(sorted({m.split('.')[1] for m in sys.modules if m.startswith('qkenergy.')}))\n"
        "model.head(0, 0).symmetric_energy\n"
        "print('qkenergy.math.statistics' in sys.modules)\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    packages, after_head = done.stdout.split("\n")[:2]
    assert packages == "['api', 'base', 'weights']"
    assert after_head == "True"

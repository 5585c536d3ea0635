"""Start-up stays light: heavy libraries are imported where they are used (issue 7).

A structural check rather than a timed one: in a fresh interpreter, importing
qkenergy, running ``qkenergy --help`` and importing the computational modules
must not pull in scipy.stats (~0.7 s), matplotlib, pandas or dask; the
analysis module may import pandas (its results are DataFrames) but not the rest.
"""

from __future__ import annotations

import json
import subprocess
import sys

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
import qkenergy.math.baselines, qkenergy.math.montecarlo, qkenergy.math.nulls, qkenergy.math.statistics
seen["math modules"] = heavy()
import qkenergy.analysis.analyze
seen["analysis.analyze"] = heavy()
print(json.dumps(seen))
"""


def test_start_up_imports_no_heavy_library() -> None:
    done = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, check=True)
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["import qkenergy"] == []
    assert seen["qkenergy --help"] == []
    assert seen["math modules"] == []
    assert seen["analysis.analyze"] == ["pandas"]

"""Start-up stays light: heavy libraries are imported where they are used (issue 7).

A structural check rather than a timed one: in a fresh interpreter, importing
qkenergy, running ``qkenergy --help`` and importing the computational modules
must not pull in scipy.stats (~0.5 s), matplotlib, pandas or dask. Nor may a
whole ``qkenergy analyze -o table.csv`` run, with or without null laws: its table
is written from numpy columns, pandas (~0.25 s) is imported only when a DataFrame
is asked for (the summary reads the numpy columns too), and the Beta tail of the
null columns needs scipy.special only. Lighter modules a run may not need are
checked too: the Monte Carlo engine without null laws, and ml_dtypes (~0.6 s) even
for bfloat16 weights, which are widened from their bits (base.small_floats).
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
    # a run without null laws draws nothing (the Monte Carlo engine, ~4 ms)
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
    # the heads' mathematics are imported before a head or an analysis is asked for (math.defaults,
    # the defaults of Model.head's signature, is constants only).
    probe = (
        "import sys, qkenergy as qk\n"
        "model = qk.open()\n"
        "constants = {'qkenergy.math', 'qkenergy.math.defaults'}\n"
        "print(sorted({m.split('.')[1] for m in set(sys.modules) - constants if m.startswith('qkenergy.')}))\n"
        "model.head(0, 0).symmetric_energy\n"
        "print('qkenergy.math.statistics' in sys.modules)\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    packages, after_head = done.stdout.split("\n")[:2]
    assert packages == "['api', 'base', 'weights']"
    assert after_head == "True"


BF16_PROBE = r"""
import contextlib, io, json, sys
import numpy as np
import qkenergy as qk
from qkenergy import cli
from qkenergy.base.small_floats import as_float
from qkenergy.weights.safetensors_io import SafetensorsFile

model, table, widened = sys.argv[1:4]
try:
    cli.main(["analyze", model, "--no-null", "--quiet", "-o", table])
except SystemExit as done:
    assert done.code in (0, None), done.code
energy = qk.open(model).head(1, 3).symmetric_energy
with SafetensorsFile(model + "/model.safetensors") as f:
    np.save(widened, as_float(f.tensor("model.layers.1.self_attn.q_proj.weight")))
print(json.dumps({"ml_dtypes": "ml_dtypes" in sys.modules, "energy": energy}))
"""


def test_bf16_checkpoint_reads_without_ml_dtypes_and_exactly(tmp_path: Path) -> None:
    # A bfloat16 checkpoint is analysed (command line and API) without importing ml_dtypes; its
    # weights widen to the float32 values ml_dtypes' cast gives, bit for bit, and the statistics
    # are those of the ml_dtypes arrays (the route before), exactly.
    import ml_dtypes
    import numpy as np

    from qkenergy.api.head import Head
    from qkenergy.math.statistics import head_statistics
    from qkenergy.weights.safetensors_io import SafetensorsFile
    from tests.survey_checkpoints import write_checkpoint

    model = write_checkpoint(
        tmp_path / "bf16", layers=2, N=64, heads=4, head_dim=8, kv_heads=2, dtype=ml_dtypes.bfloat16, seed=5
    )
    table, widened = tmp_path / "heads.csv", tmp_path / "q1.npy"
    done = subprocess.run(
        [sys.executable, "-c", BF16_PROBE, str(model), str(table), str(widened)],
        capture_output=True,
        text=True,
        check=True,
    )
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["ml_dtypes"] is False

    with SafetensorsFile(model / "model.safetensors") as f:

        def stored(name: str) -> np.ndarray:
            return f.tensor(name).view(np.uint16).view(ml_dtypes.bfloat16)

        wq, wk = (stored(f"model.layers.1.self_attn.{x}_proj.weight").reshape(-1, 8, 64) for x in "qk")
    np.testing.assert_array_equal(
        np.load(widened).view(np.uint32), wq.reshape(-1, 64).astype(np.float32).view(np.uint32)
    )
    want = head_statistics(wq, wk, kv_head=np.array([0, 0, 1, 1]))
    rows = [line.split(",") for line in table.read_text().splitlines()]
    column = rows[0].index("symmetric_energy")
    layer1 = [float(r[column]) for r in rows[1:] if r[rows[0].index("layer")] == "1"]
    assert layer1 == want.symmetric_energy.tolist()
    assert seen["energy"] == Head(wq[3], wk[1], layer=1, head=3).symmetric_energy  # the API's route


def test_help_imports_no_numpy() -> None:
    # `qkenergy --help` is click alone: a command module importing a numpy helper at the top
    # made it 1.8x slower (53 -> 95 ms by benchmarks/bench_startup.py) before this test.
    probe = (
        "import contextlib, io, sys\n"
        "from qkenergy import cli\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        "    try:\n"
        "        cli.main(['--help'])\n"
        "    except SystemExit:\n"
        "        pass\n"
        "print('numpy' in sys.modules)\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "False"

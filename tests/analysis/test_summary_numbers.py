"""The summary's quantiles and medians: numpy's, bit for bit, without numpy's first-call import of numpy.ma."""

from __future__ import annotations

import subprocess
import sys

import numpy as np

from qkenergy.analysis.summary import _median, _quantiles


def test_quantiles_and_medians_equal_numpys_bit_for_bit() -> None:
    rng = np.random.default_rng(11)
    for n in [*range(1, 40), 72, 143, 144, 1001]:
        for trial in range(60):
            x = rng.standard_normal(n) * 10.0 ** float(rng.integers(-6, 6))
            if trial % 3 == 0:
                x = np.round(x, 2)  # ties
            levels = (0.25, 0.5, 0.75, float(rng.random()))
            assert _quantiles(x, levels) == np.quantile(x, levels).tolist(), (n, trial)
            assert _median(x) == float(np.median(x)), (n, trial)


def test_a_summary_without_null_laws_imports_no_numpy_ma() -> None:
    probe = (
        "import io, sys\n"
        "from rich.console import Console\n"
        "import qkenergy as qk\n"
        "analysis = qk.analyze(null=False, layers=[0, 1])\n"
        "analysis.print_summary(Console(file=io.StringIO(), width=80))\n"
        "print('numpy.ma' in sys.modules)\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert done.stdout.split()[-1] == "False"

"""The README's Python tour (docs/api_tour.py) must keep running as shown."""

import runpy
from pathlib import Path

import numpy as np

TOUR = Path(__file__).resolve().parents[1] / "docs" / "api_tour.py"


def test_api_tour_runs(capsys) -> None:
    namespace = runpy.run_path(str(TOUR))
    out = capsys.readouterr().out
    assert "I+" in out  # MiniLM layer 2 heads are judged in the printed table
    # The figures the README quotes from this script.
    assert namespace["law"].mean("symmetric_energy") == 385 / 768
    assert np.isclose(namespace["est"].expectation_of_ratio.value, 0.766862, atol=1e-6)
    assert len(namespace["result"].heads) == 12

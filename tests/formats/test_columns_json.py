"""The JSON records of a column table, without pandas, equal those pandas gives (formats.columns)."""

from __future__ import annotations

import numpy as np

from qkenergy.analysis.analyze import analyze_model
from qkenergy.formats.columns import column_records, to_frame
from qkenergy.formats.table_format import records


def test_records_of_an_analysis_equal_pandas_records() -> None:
    columns = analyze_model(layers=[0, 5], samples=200).columns
    assert column_records(columns) == records(to_frame(columns))


def test_missing_values_counts_and_lists_as_pandas_writes_them() -> None:
    columns = {
        "model": np.array(["a", None, "=b"], dtype=object),
        "layer": np.array([0, 1, 2]),
        "qk_norm": np.array([True, False, True]),
        "s": np.array([0.5, np.nan, np.inf]),
        "n_pos": np.array([3.0, np.nan, 2.4]),
        "alpha": np.array([[0.1, np.nan], [], [2.0]], dtype=object),
    }
    mine = column_records(columns)
    assert mine == records(to_frame(columns))
    assert mine[1] == {"model": None, "layer": 1, "qk_norm": False, "s": None, "n_pos": None, "alpha": []}
    assert mine[2]["n_pos"] == 2 and isinstance(mine[2]["n_pos"], int) and mine[2]["s"] is None

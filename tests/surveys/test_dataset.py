"""The survey's unit files: written and read by the package's Parquet module, as analyze's tables are."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from qkenergy.analysis.analyze import analyze_model
from qkenergy.base.errors import QKEnergyError
from qkenergy.formats import parquet_table
from qkenergy.formats.provenance import read_settings
from qkenergy.formats.tables import write_table
from qkenergy.surveys.dataset import UNIT_KEY, load_survey, unit_path, write_unit

SETTINGS = {"model": "m", "samples": 300, "seed": 0, "null": True}
EXTRA = {"group": "g", "step": 7, "source": "./m", "revision": None}


@pytest.fixture(scope="module")
def heads(tmp_path_factory: pytest.TempPathFactory) -> pd.DataFrame:
    cache = tmp_path_factory.getbasetemp() / "qkenergy-null-cache"
    return analyze_model(layers=[0, 1], samples=300, seed=0, cache_dir=cache).heads


def _survey(out: Path, heads: pd.DataFrame) -> Path:
    for layer in (0, 1):
        write_unit(out, "heads", "m", layer, heads[heads["layer"] == layer].copy(), EXTRA, SETTINGS)
    (out / "survey.json").write_text(json.dumps({"settings": SETTINGS}))
    return out


def test_unit_files_have_the_schema_of_analyze_parquet(heads: pd.DataFrame, tmp_path: Path) -> None:
    table = write_table(heads, tmp_path / "heads.parquet", settings=SETTINGS)
    unit = write_unit(tmp_path / "out", "heads", "m", 0, heads[heads["layer"] == 0].copy(), EXTRA, SETTINGS)
    assert unit == unit_path(tmp_path / "out", "heads", "m", 0)
    analyzed, surveyed = pq.read_schema(table), pq.read_schema(unit)
    shared = [name for name in surveyed.names if name in analyzed.names]
    assert (
        len(shared) > 60 and "model" not in surveyed.names and "symmetric_energy_p_bh" not in surveyed.names
    )
    assert [surveyed.field(n).type for n in shared] == [analyzed.field(n).type for n in shared]
    assert [str(surveyed.field(n).type) for n in ("group", "step", "source", "revision")] == [
        "string",
        "int64",
        "string",
        "string",  # None in every row of the unit: text, so that every file of the dataset agrees
    ]
    # only qkenergy's keys; the settings where every qkenergy Parquet table has them
    assert list(surveyed.metadata) == [UNIT_KEY.encode(), b"qkenergy"]
    assert json.loads(surveyed.metadata[UNIT_KEY.encode()]) == {"model": "m", "layer": 0, "table": "heads"}
    assert read_settings(unit) == read_settings(table) == SETTINGS
    assert b"pandas" in analyzed.metadata  # analyze's own file keeps pyarrow's pandas key


def test_load_survey_reads_the_units_back(heads: pd.DataFrame, tmp_path: Path) -> None:
    loaded, layers = load_survey(_survey(tmp_path / "out", heads))
    assert layers is None
    assert list(loaded.columns[:1]) == ["model"] and set(loaded["model"]) == {"m"}
    assert loaded["group"].tolist() == ["g"] * len(heads) and loaded["step"].tolist() == [7] * len(heads)
    for name in ("layer", "head", "symmetric_energy", "symmetric_energy_p"):
        np.testing.assert_array_equal(loaded[name].to_numpy(float), heads[name].to_numpy(float), err_msg=name)
    assert [list(v) for v in loaded["alpha"]] == [list(v) for v in heads["alpha"]]
    # BH is recomputed over the model's heads, as analyze computed it over the same heads
    np.testing.assert_allclose(loaded["symmetric_energy_p_bh"], heads["symmetric_energy_p_bh"], rtol=1e-12)


def _rewrite(path: Path, change: Any) -> None:
    pq.write_table(change(pq.read_table(path)), path)


@pytest.mark.parametrize(
    ("change", "needle"),
    [
        (
            lambda t: pa.table(
                {
                    **{c: t.column(c) for c in t.column_names},
                    **{f"x{i}": [0.0] * t.num_rows for i in range(1100)},
                }
            ),
            "columns, more than the 1024",
        ),
        (
            lambda t: t.set_column(t.schema.get_field_index("layer"), "layer", pa.array(["0"] * t.num_rows)),
            "column 'layer' has Parquet type string; expected numbers",
        ),
        (
            lambda t: t.replace_schema_metadata({**t.schema.metadata, b"qkenergy": b'{"samples": -1}'}),
            "field 'samples'",
        ),
        (lambda t: t.replace_schema_metadata({b"qkenergy": b"[1, 2]"}), "settings"),
    ],
    ids=["too many columns", "layer as text", "settings of the wrong type", "settings not an object"],
)
def test_unit_files_have_the_bounds_of_every_table(
    heads: pd.DataFrame, tmp_path: Path, change: Any, needle: str
) -> None:
    out = _survey(tmp_path / "out", heads)
    part = unit_path(out, "heads", "m", 1)
    _rewrite(part, change)
    with pytest.raises(QKEnergyError) as info:
        load_survey(out)
    message = str(info.value)
    assert needle in message and "layer-00001.parquet" in message and "\n" not in message
    assert message.endswith("rerun the survey to recompute it (or remove the file)")


def test_unit_files_have_the_size_bound_of_every_table(
    heads: pd.DataFrame, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = _survey(tmp_path / "out", heads)
    size = unit_path(out, "heads", "m", 0).stat().st_size
    monkeypatch.setattr(parquet_table, "MAX_TABLE_BYTES", size - 1)  # the bound analyze's tables have
    with pytest.raises(QKEnergyError, match=rf"layer-00000\.parquet: larger than the {size - 1}-byte limit"):
        load_survey(out)
    unit_path(out, "heads", "m", 0).write_bytes(b"PAR1" + bytes(100))
    monkeypatch.undo()
    with pytest.raises(QKEnergyError, match=r"layer-00000\.parquet: not a readable Parquet file \("):
        load_survey(out)

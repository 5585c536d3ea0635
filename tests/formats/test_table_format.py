"""Table formats: every registered module implements TableFormat and round-trips a table and its
settings exactly; a format registered anywhere is picked up by write_table / read_table /
write_results / read_settings."""

from __future__ import annotations

import inspect
import json
import math
import tempfile
import types
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from qkenergy.base.atomic import OutputTransaction
from qkenergy.base.display import show_path
from qkenergy.base.errors import QKEnergyError
from qkenergy.base.formatting import json_safe
from qkenergy.base.json_input import parse_value, read_bytes
from qkenergy.formats import columns, provenance, tables
from qkenergy.formats.columns import Columns, with_integer_counts
from qkenergy.formats.recorded_settings import check_settings
from qkenergy.formats.schema import MAX_TABLE_BYTES
from qkenergy.formats.table_format import TableFormat, checked_frame, frame_of, records

# ----------------------------------------------------------------------------- the interface


def _parameters(function: Any) -> list[tuple[str, Any, bool]]:
    """(name, kind, has a default) of each parameter, ``self`` left out."""
    return [
        (p.name, p.kind, p.default is not inspect.Parameter.empty)
        for p in inspect.signature(function).parameters.values()
        if p.name != "self"
    ]


@pytest.mark.parametrize("suffix", sorted(tables.FORMATS))
def test_every_format_implements_the_protocol(suffix: str) -> None:
    module = tables.FORMATS[suffix]
    assert isinstance(module, TableFormat)
    assert suffix == suffix.lower() and suffix.startswith(".")
    assert isinstance(module.NAME, str) and module.NAME and isinstance(module.EMBEDS_LAYERS, bool)
    for name in ("write", "read", "read_settings"):
        protocol = _parameters(getattr(TableFormat, name))
        # the module may give defaults the protocol does not require, never drop one it has
        mine = _parameters(getattr(module, name))
        assert [(n, k) for n, k, _ in mine] == [(n, k) for n, k, _ in protocol], (suffix, name)
        assert all(ours or not theirs for (_, _, ours), (_, _, theirs) in zip(mine, protocol)), (suffix, name)


def test_a_module_without_the_interface_is_not_a_format() -> None:
    assert not isinstance(columns, TableFormat)  # a formats module, but no write / read / read_settings
    assert [m.NAME for m in tables.FORMATS.values()] == ["csv", "parquet", "json"]
    assert [m.EMBEDS_LAYERS for m in tables.FORMATS.values()] == [False, False, True]


# ----------------------------------------------------------------------------- exact round trips

_TEXT = st.text(st.characters(blacklist_categories=("Cs",)), max_size=10)
_FINITE = st.floats(allow_nan=False, allow_infinity=False)
_MISSING_OR = lambda values: st.one_of(st.just(math.nan), values)  # noqa: E731
_SHARE = _MISSING_OR(st.floats(0.0, 1.0))
_LOBE = st.lists(_FINITE, max_size=4)
_JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**53), 2**53) | _FINITE | _TEXT,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_TEXT, inner, max_size=3),
    max_leaves=8,
)


@st.composite
def head_tables(draw: st.DrawFn) -> pd.DataFrame:
    """A head table with a column of every kind a table may hold (missing values where allowed)."""
    rows = draw(st.integers(1, 5))

    def column(values: st.SearchStrategy[Any]) -> list[Any]:
        return draw(st.lists(values, min_size=rows, max_size=rows))

    frame = pd.DataFrame(
        {
            "model": column(_TEXT),
            "stack": column(_TEXT),
            "layer": np.array(column(st.integers(0, 10**6)), dtype=np.int64),
            "head": np.array(column(st.integers(0, 10**6)), dtype=np.int64),
            "n": np.array(column(st.integers(1, 4096)), dtype=np.int64),
            "N": np.array(column(st.integers(1, 2**31)), dtype=np.int64),
            "offset": np.array(column(st.integers(-(2**40), 2**40)), dtype=np.int64),
            "qk_norm": np.array(column(st.booleans()), dtype=bool),
            "symmetric_energy": np.array(column(_SHARE), dtype=np.float64),
            "pairing": np.array(column(_MISSING_OR(_FINITE)), dtype=np.float64),
            "symmetric_energy_z": np.array(column(_MISSING_OR(_FINITE)), dtype=np.float64),
            "n_pos": pd.array(column(st.one_of(st.none(), st.integers(0, 2**40))), dtype="Int64"),
            "head_type": column(_TEXT),
            "reason": column(_TEXT),
            "alpha": column(_LOBE),
            "beta": column(_LOBE),
            "extra_measure": np.array(column(_FINITE), dtype=np.float64),  # a column docs do not name
        }
    )
    return frame


@st.composite
def run_settings(draw: st.DrawFn) -> dict[str, Any]:
    """Settings as a run records them: typed keys readers use, and anything JSON besides."""
    out: dict[str, Any] = {
        "model": draw(_TEXT),
        "samples": draw(st.integers(0, 10**6)),
        "null": draw(st.booleans()),
    }
    out.update(draw(st.dictionaries(_TEXT.map(lambda k: "x_" + k), _JSON, max_size=4)))
    return out


def _bits(values: Any) -> np.ndarray:
    return np.asarray(values, dtype=np.float64).view(np.int64)


def assert_same_table(written: pd.DataFrame, read: pd.DataFrame) -> None:
    """Column names, order, dtypes and every value exactly (floats bit for bit, NaN where missing)."""
    expected = with_integer_counts(written.copy())
    assert list(read.columns) == list(expected.columns)
    for name in expected.columns:
        a, b = expected[name], read[name]
        if name in ("alpha", "beta"):
            assert [_bits(x).tolist() for x in a] == [_bits(y).tolist() for y in b], name
        elif a.dtype == object or pd.api.types.is_string_dtype(a.dtype):
            assert b.tolist() == a.tolist(), name
        elif str(a.dtype) == "Int64":
            assert str(b.dtype) == "Int64" and b.isna().tolist() == a.isna().tolist(), name
            assert b.dropna().tolist() == a.dropna().tolist(), name
        elif a.dtype.kind == "f":
            nan = np.isnan(a.to_numpy())
            assert np.array_equal(np.isnan(b.to_numpy(np.float64)), nan), name
            assert (_bits(a.to_numpy()[~nan]) == _bits(b.to_numpy(np.float64)[~nan])).all(), name
        else:
            assert b.dtype == a.dtype and b.tolist() == a.tolist(), name


@pytest.mark.parametrize("suffix", sorted(tables.FORMATS))
@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(heads=head_tables(), layers=head_tables(), recorded=run_settings())
def test_every_format_round_trips_exactly(
    suffix: str, heads: pd.DataFrame, layers: pd.DataFrame, recorded: dict[str, Any]
) -> None:
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / f"t{suffix}"
        written = tables.write_results(heads, path, settings=recorded, layers=layers)
        assert written[0] == path and all(p.is_file() for p in written)
        back = tables.read_table(path)
        assert_same_table(heads, back)
        assert back.attrs["settings"] == json.loads(json.dumps(json_safe(recorded)))
        assert provenance.read_settings(path) == back.attrs["settings"]
        where = path if tables.FORMATS[suffix].EMBEDS_LAYERS else tables.layers_path(path)
        assert_same_table(layers, tables.read_table(where, table="layers"))


# ----------------------------------------------------------------------------- a new format


def _jsonl_write(
    table: pd.DataFrame | Columns,
    path: Path,
    *,
    settings: dict[str, Any] | None,
    layers: pd.DataFrame | None = None,
    outputs: OutputTransaction,
) -> list[Path]:
    """JSON lines: the settings object first, then one record per line."""
    lines = [{"settings": settings}, *records(frame_of(table))]
    with open(outputs.stage(path), "w", encoding="utf-8") as fh:
        fh.writelines(json.dumps(json_safe(line), allow_nan=False) + "\n" for line in lines)
    return [Path(path)]


def _jsonl_lines(path: Path) -> list[Any]:
    where = show_path(path)
    raw = read_bytes(path, where, "the table", MAX_TABLE_BYTES)
    return [parse_value(line, where, "a line") for line in raw.splitlines()]


def _jsonl_read(path: Path, *, table: str = "heads") -> tuple[pd.DataFrame, dict[str, Any] | None]:
    first, *rows = _jsonl_lines(path)
    names = list(dict.fromkeys(key for row in rows for key in row))
    cells = {name: [row.get(name) for row in rows] for name in names}
    frame = checked_frame(names, cells, show_path(path), table=table, source="json")
    return frame, check_settings(first["settings"], show_path(path))


def _jsonl_read_settings(path: Path) -> dict[str, Any] | None:
    return check_settings(_jsonl_lines(path)[0]["settings"], show_path(path))


JSONL = types.SimpleNamespace(
    NAME="jsonl",
    EMBEDS_LAYERS=False,
    write=_jsonl_write,
    read=_jsonl_read,
    read_settings=_jsonl_read_settings,
)


def test_a_registered_format_is_used_by_every_dispatch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    frame = pd.DataFrame(
        {
            "model": ["m", "m"],
            "layer": [0, 1],
            "head": [0, 0],
            "n": [4, 4],
            "N": [16, 16],
            "symmetric_energy": [0.25, math.nan],
            "n_pos": pd.array([3, None], dtype="Int64"),
            "alpha": [[0.5], []],
        }
    )
    recorded = {"model": "m", "samples": 10}
    with pytest.raises(QKEnergyError, match="unknown table format '.jsonl'"):
        tables.write_table(frame, tmp_path / "before.jsonl")

    monkeypatch.setitem(tables.FORMATS, ".jsonl", JSONL)
    assert isinstance(JSONL, TableFormat)
    path = tables.write_table(frame, tmp_path / "t.JSONL", settings=recorded)
    assert path.read_text().count("\n") == 3  # the settings line and two records
    back = tables.read_table(path)
    assert_same_table(frame, back)
    assert back.attrs["settings"] == recorded == provenance.read_settings(path)
    written = tables.write_results(
        frame, tmp_path / "r.jsonl", settings=recorded, layers=frame[["model", "layer"]]
    )
    assert written == [tmp_path / "r.jsonl", tmp_path / "r.layers.jsonl"]
    assert tables.read_table(written[1], table="layers")["layer"].tolist() == [0, 1]
    with pytest.raises(ValueError, match="embedded in json tables only"):
        tables.write_table(frame, tmp_path / "x.jsonl", layers=frame)
    with pytest.raises(QKEnergyError, match=r"accepted extensions: \.csv, \.parquet, \.json, \.jsonl"):
        tables.read_table(tmp_path / "t.xlsx")
    tables.write_table(frame.drop(columns="head"), tmp_path / "no_head.jsonl")
    with pytest.raises(
        QKEnergyError, match=r"no_head\.jsonl: not a qkenergy head table; missing column\(s\) head"
    ):
        tables.read_table(tmp_path / "no_head.jsonl")  # the shared checks apply to it too

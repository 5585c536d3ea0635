"""report: atomic table round trips, per-layer summary, rich summary."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from rich.console import Console

from qkenergy.analysis.analyze import analyze_model
from qkenergy.analysis.summary import layer_summary, print_summary, verdict
from qkenergy.base.errors import QKEnergyError
from qkenergy.formats import csv_table
from qkenergy.formats.columns import concat, list_column, to_frame
from qkenergy.formats.tables import read_table, write_table
from qkenergy.report.outputs import write_outputs


@pytest.fixture(scope="module")
def analysis(tmp_path_factory: pytest.TempPathFactory):
    # Shared with the other modules' fixtures: the null law is drawn once per session.
    cache = tmp_path_factory.getbasetemp() / "qkenergy-null-cache"
    return analyze_model(samples=300, seed=0, cache_dir=cache, per_layer=True)


@pytest.fixture()
def table(analysis) -> pd.DataFrame:
    df = analysis.heads.copy()
    # Exercise the awkward cells: an undefined head (NaN, empty lobes, reason).
    df.loc[3, ["symmetric_energy", "symmetric_energy_p", "symmetric_energy_p_bh"]] = np.nan
    df.loc[3, "head_type"] = ""
    df.loc[3, "reason"] = "zero head (L = 0)"
    df.at[3, "alpha"] = []
    df.at[3, "beta"] = []
    return df


def _same(a: pd.DataFrame, b: pd.DataFrame) -> None:
    assert list(a.columns) == list(b.columns)
    for col in a.columns:
        if col in ("alpha", "beta"):
            for x, y in zip(a[col], b[col], strict=True):
                assert list(x) == list(y)  # exact: floats are written at full precision
        elif not pd.api.types.is_numeric_dtype(a[col]):
            assert a[col].tolist() == b[col].tolist(), col
        else:
            np.testing.assert_array_equal(a[col].to_numpy(float), b[col].to_numpy(float), err_msg=col)


@pytest.mark.parametrize("ext", [".csv", ".parquet", ".json", ".CSV"])
def test_round_trip(table: pd.DataFrame, tmp_path: Path, ext: str) -> None:
    path = tmp_path / "sub" / f"heads{ext}"
    assert write_table(table, path) == path
    assert sorted(p.name for p in path.parent.iterdir()) == [path.name]  # no temp file left
    _same(table, read_table(path))


def test_csv_lobes_are_json(table: pd.DataFrame, tmp_path: Path) -> None:
    path = write_table(table, tmp_path / "t.csv")
    raw = pd.read_csv(path)
    assert json.loads(raw.loc[0, "alpha"]) == table.loc[0, "alpha"]
    assert raw.loc[3, "alpha"] == "[]"


def test_csv_from_columns_is_the_pandas_csv(analysis, tmp_path: Path) -> None:
    # An analysis writes its csv from numpy columns, without pandas: the bytes must be those
    # pandas writes for the same table (floats by repr, NaN and None empty, quoted commas, quotes
    # and line breaks, lobes quoted when they hold a comma).
    columns = concat(
        [
            {**analysis.columns, "offset": np.arange(len(analysis.columns["head"]))},
            {
                "model": np.array(["a, b", 'say "hi"'], dtype=object),
                "n_pos": np.array([np.nan, 3.0]),
                "symmetric_energy": np.array([-0.0, 1e16]),
                "qk_norm": np.array([True, False]),
                "reason": np.array([None, ""], dtype=object),
                "head_type": np.array(["two\nlines", "carriage\rreturn"], dtype=object),
                "alpha": list_column([[], [0.1, float("nan")]]),
                "beta": list_column([[1e-300], [2.0 / 3.0]]),
            },
        ]
    )  # the second part lacks most columns: NaN there, as pandas.concat fills them
    assert write_table(columns, tmp_path / "columns.csv") == tmp_path / "columns.csv"
    write_table(to_frame(columns), tmp_path / "frame.csv")
    assert (tmp_path / "columns.csv").read_bytes() == (tmp_path / "frame.csv").read_bytes()
    lone = {"reason": np.array(["", "x"], dtype=object)}  # a lone empty field is quoted
    write_table(lone, tmp_path / "lone.csv")
    write_table(to_frame(lone), tmp_path / "lone_frame.csv")
    assert (tmp_path / "lone.csv").read_bytes() == (tmp_path / "lone_frame.csv").read_bytes()


def test_written_table_is_the_changed_dataframe(tmp_path: Path) -> None:
    # Once a caller has built and changed analysis.heads, the files hold the change.
    result = analyze_model(layers=[0], null=False)
    write_outputs(result, output=tmp_path / "columns.csv")
    result.heads["symmetric_energy"] = 0.25
    write_outputs(result, output=tmp_path / "frame.csv")
    assert (read_table(tmp_path / "columns.csv")["symmetric_energy"] != 0.25).all()
    assert (read_table(tmp_path / "frame.csv")["symmetric_energy"] == 0.25).all()


def test_json_is_strict(table: pd.DataFrame, tmp_path: Path) -> None:
    path = write_table(table, tmp_path / "t.json")
    document = json.loads(path.read_text(), parse_constant=lambda c: pytest.fail(f"non-JSON constant {c}"))
    records = document["heads"]
    assert len(records) == len(table) and records[3]["symmetric_energy"] is None


def test_file_mode_is_ordinary(table: pd.DataFrame, tmp_path: Path) -> None:
    path = write_table(table, tmp_path / "t.csv")
    umask = os.umask(0)
    os.umask(umask)
    assert path.stat().st_mode & 0o777 == 0o666 & ~umask


def test_unknown_extension(table: pd.DataFrame, tmp_path: Path) -> None:
    with pytest.raises(QKEnergyError, match=r"t\.xlsx.*\.csv, \.parquet, \.json"):
        write_table(table, tmp_path / "t.xlsx")
    with pytest.raises(QKEnergyError, match="accepted extensions"):
        read_table(tmp_path / "t")
    assert list(tmp_path.iterdir()) == []


def test_atomic_on_failure(table: pd.DataFrame, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / "t.csv"
    target.write_text("old contents")

    def broken(columns, path, **kwargs):
        Path(path).write_text("half a tab")
        raise RuntimeError("disk full")

    # DataFrames are written through the column writer (text cells neutralised, CR quoted)
    monkeypatch.setattr(csv_table, "write_csv", broken)
    with pytest.raises(RuntimeError, match="disk full"):
        write_table(table, target)
    assert [p.name for p in tmp_path.iterdir()] == ["t.csv"]
    assert target.read_text() == "old contents"
    with pytest.raises(RuntimeError):
        write_table(table, tmp_path / "new.csv")
    assert [p.name for p in tmp_path.iterdir()] == ["t.csv"]


def test_read_errors(tmp_path: Path) -> None:
    with pytest.raises(QKEnergyError, match="no such file"):
        read_table(tmp_path / "missing.csv")
    (tmp_path / "other.csv").write_text("a,b\n1,2\n")
    with pytest.raises(
        QKEnergyError, match=r"other\.csv: not a qkenergy head table; missing column\(s\) model"
    ):
        read_table(tmp_path / "other.csv")
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(QKEnergyError, match=r"bad\.json: cannot read as json"):
        read_table(tmp_path / "bad.json")
    (tmp_path / "bad.parquet").write_bytes(b"PAR1 nope")
    with pytest.raises(QKEnergyError, match=r"bad\.parquet: cannot read as parquet"):
        read_table(tmp_path / "bad.parquet")


def test_layer_summary(analysis) -> None:
    df = analysis.heads
    summary = layer_summary(df)
    assert summary["layer"].tolist() == list(range(6))
    assert (summary["heads"] == 12).all()
    assert (summary["baseline"] == 385 / 768).all()
    layer2 = df[df["layer"] == 2]["symmetric_energy"]
    row = summary.iloc[2]
    assert row["symmetric_energy_median"] == pytest.approx(layer2.median())
    assert row["symmetric_energy_iqr"] == pytest.approx(layer2.quantile(0.75) - layer2.quantile(0.25))
    assert ((summary["share_above"] + summary["share_below"]) <= 1).all()
    counts = summary[["type_II", "type_I+", "type_I-", "undefined"]].sum(axis=1)
    assert (counts == 12).all()
    sig = (df["symmetric_energy_p_bh"] < 0.05) & (df["symmetric_energy_z"] > 0)
    assert summary["share_above"].mean() == pytest.approx(sig.mean())


def test_layer_summary_without_null(analysis) -> None:
    df = analysis.heads.copy()
    df[[c for c in df.columns if c.endswith(("_p", "_p_bh", "_z"))]] = np.nan
    summary = layer_summary(df)
    assert summary["share_above"].isna().all() and summary["share_below"].isna().all()
    assert "no significance is claimed" in verdict(df, null=False)


def test_summary_from_columns_is_the_summary_from_the_dataframe(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    # print_summary reads the analysis' numpy columns (no pandas) until .heads is built; both
    # must print the same, including the top heads' order and the per-layer shares.
    cache = tmp_path_factory.getbasetemp() / "qkenergy-null-cache"
    result = analyze_model(layers=[0, 3], samples=300, seed=0, cache_dir=cache)
    from_columns = Console(record=True, width=140)
    print_summary(result, from_columns, top=30)
    assert "heads" not in result.__dict__  # the DataFrame was not built for it
    from_frame = Console(record=True, width=140)
    result.heads  # noqa: B018 - build the DataFrame: the summary now reads it
    print_summary(result, from_frame, top=30)
    text = from_frame.export_text()
    assert from_columns.export_text() == text and "Heads worth a look" in text


def test_print_summary(analysis) -> None:
    console = Console(record=True, width=140)
    print_summary(analysis, console)
    text = console.export_text()
    assert analysis.model in text
    assert "72 heads" in text and "fold-norm not used" in text and "300 null samples" in text
    assert "baseline" in text and "directionality" in text
    assert "significantly more symmetric" in text

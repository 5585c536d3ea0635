"""The table schema (formats/schema.py) knows every column analyze writes, and docs/columns.md names it."""

from __future__ import annotations

from pathlib import Path

from qkenergy.analysis.analyze import analyze_model
from qkenergy.formats.schema import _NAMED, column_kind
from qkenergy.formats.tables import read_table, write_table
from tests.survey_checkpoints import write_checkpoint

ROOT = Path(__file__).resolve().parents[2]


def test_every_column_has_a_kind_and_reads_back(tmp_path: Path) -> None:
    model = write_checkpoint(tmp_path / "m", "llama", layers=2, N=16, heads=2, head_dim=4)
    result = analyze_model(
        model, per_layer=True, samples=8, null_kind="both", rotation_samples=4, rope_offsets=[0, 1]
    )
    assert result.layers is not None
    for table, frame in (("heads", result.heads), ("layers", result.layers)):
        assert [c for c in frame.columns if column_kind(c) is None] == []
        for ext in ("csv", "parquet"):
            path = write_table(frame, tmp_path / f"{table}.{ext}", settings=result.settings)
            assert list(read_table(path, table=table).columns) == list(frame.columns)
    path = write_table(result.heads, tmp_path / "t.json", settings=result.settings, layers=result.layers)
    assert list(read_table(path, table="layers").columns) == list(result.layers.columns)
    docs = (ROOT / "docs" / "columns.md").read_text(encoding="utf-8")
    assert [c for c in _NAMED if f"`{c}`" not in docs] == []

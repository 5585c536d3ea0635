"""Structured fuzzing of the inputs of issue 21: result tables, manifests, TOML layouts, survey
ledgers, Hugging Face cache folders.

Hypothesis starts from a valid input of each kind and mutates it (bytes flipped, cut or inserted; a
JSON or TOML value replaced; a CSV cell replaced by any text); whatever comes out, the reader either
works or raises QKEnergyError with one short line, never another exception. Derandomized (conftest
profile), fixed max_examples: this file runs in seconds. fuzz/fuzz_parsers.py is the open-ended,
coverage-guided version of the same contract (fuzz/README.md).
"""

from __future__ import annotations

import csv
import io
import json
import sqlite3
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from qkenergy.base.errors import QKEnergyError
from tests.cross.test_fuzz_inputs import json_values, mutate_bytes, mutate_json

FUZZ = settings(
    max_examples=60, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow]
)
cell_text = st.text(st.characters(codec="utf-8"), max_size=12) | st.sampled_from(
    ["", "nan", "inf", "-inf", "1e999", "-1", "0.5", "[1, 2]", "[[", "True", "=1+1", "'", '"', "\r", "9" * 40]
)


def one_line(call: object) -> None:
    """``call()`` works, or raises QKEnergyError with one short line."""
    try:
        call()  # type: ignore[operator]
    except QKEnergyError as error:
        message = str(error)
        assert "\n" not in message and len(message) < 2000, message


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("fuzz-surfaces")


@pytest.fixture(scope="module")
def tables(workdir: Path) -> dict[str, bytes]:
    """A valid head table (2 layers x 2 heads, 8 null samples) in each format, as bytes."""
    from qkenergy.analysis.analyze import analyze_model
    from qkenergy.formats.tables import write_table
    from tests.survey_checkpoints import write_checkpoint

    model = write_checkpoint(workdir / "model", "llama", layers=2, N=16, heads=2, head_dim=4)
    result = analyze_model(model, samples=8)
    out = {}
    for ext in ("csv", "parquet", "json"):
        path = workdir / f"valid.{ext}"
        write_table(result.heads, path, settings=result.settings)
        out[ext] = path.read_bytes()
    out["sidecar"] = (workdir / "valid.csv.meta.json").read_bytes()
    return out


def _read(path: Path) -> None:
    from qkenergy.formats.tables import read_table

    read_table(path)


def test_the_valid_tables_read(workdir: Path, tables: dict[str, bytes]) -> None:
    from qkenergy.formats.tables import read_table

    for ext in ("csv", "parquet", "json"):
        (workdir / f"t.{ext}").write_bytes(tables[ext])
        assert len(read_table(workdir / f"t.{ext}")) == 4


@FUZZ
@given(data=st.data())
def test_mutated_csv_tables(workdir: Path, tables: dict[str, bytes], data: st.DataObject) -> None:
    path = workdir / "m.csv"
    if data.draw(st.booleans()):
        rows = list(csv.reader(io.StringIO(tables["csv"].decode(), newline="")))
        for _ in range(data.draw(st.integers(1, 3))):
            row = data.draw(st.integers(0, len(rows) - 1))
            rows[row][data.draw(st.integers(0, len(rows[row]) - 1))] = data.draw(cell_text)
        text = io.StringIO()
        csv.writer(text, lineterminator="\n").writerows(rows)
        path.write_text(text.getvalue())
    else:
        path.write_bytes(mutate_bytes(data, tables["csv"]))
    sidecar = tables["sidecar"]
    if data.draw(st.booleans()):
        sidecar = (
            json.dumps(mutate_json(data, json.loads(sidecar))).encode()
            if data.draw(st.booleans())
            else mutate_bytes(data, sidecar)
        )
    (workdir / "m.csv.meta.json").write_bytes(sidecar)
    one_line(lambda: _read(path))


@FUZZ
@given(data=st.data())
def test_mutated_json_tables(workdir: Path, tables: dict[str, bytes], data: st.DataObject) -> None:
    path = workdir / "m.json"
    document = json.loads(tables["json"])
    if data.draw(st.booleans()):
        row = document["heads"][data.draw(st.integers(0, 3))]
        row[data.draw(st.sampled_from(sorted(row)))] = data.draw(json_values)
        path.write_text(json.dumps(document))
    elif data.draw(st.booleans()):
        path.write_text(json.dumps(mutate_json(data, document)))
    else:
        path.write_bytes(mutate_bytes(data, tables["json"]))
    one_line(lambda: _read(path))


@FUZZ
@given(data=st.data())
def test_mutated_parquet_tables(workdir: Path, tables: dict[str, bytes], data: st.DataObject) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = workdir / "m.parquet"
    kind = data.draw(st.sampled_from(["bytes", "metadata", "column"]))
    if kind == "bytes":
        path.write_bytes(mutate_bytes(data, tables["parquet"]))
    else:
        table = pq.read_table(pa.BufferReader(tables["parquet"]))
        if kind == "metadata":
            settings_ = json.loads(table.schema.metadata[b"qkenergy"])
            raw = (
                json.dumps(mutate_json(data, settings_)).encode()
                if data.draw(st.booleans())
                else mutate_bytes(data, table.schema.metadata[b"qkenergy"])
            )
            table = table.replace_schema_metadata({b"qkenergy": raw})
        else:
            i = data.draw(st.integers(0, table.num_columns - 1))
            values = data.draw(
                st.sampled_from(
                    [
                        pa.array(["x"] * 4),
                        pa.array([1.5, np.nan, np.inf, -1.0]),
                        pa.array([True, False, True, False]),
                        pa.array([[1.0], None, [], [np.nan]]),
                        pa.array([2**62, -(2**62), 0, 1]),
                        pa.array([None] * 4, pa.null()),
                        pa.array([{"a": 1}] * 4),
                    ]
                )
            )
            table = table.set_column(i, table.schema.names[i], values)
        pq.write_table(table, path)
    one_line(lambda: _read(path))


MANIFEST = (
    '[[model]]\nsource = "embedded"\nname = "minilm"\nlayers = "0-3,5"\ngroup = "g"\nstep = 10\n'
    'fold_norm = true\nrevision = "main"\n\n[[model]]\nsource = "./runs/ckpt"\nlayers = [0, 2]\n'
)
toml_values = st.sampled_from(
    ['"x"', "1", "-1", "1.5", "inf", "nan", "true", "[]", "[1, [2]]", "{a = 1}", '"0-99999999999"', '""',
     '"\\u0000"', "1979-05-27", "[[[[[[", '"{j}"', '"{i}"', '"{"', "0x7fffffffffffffff", "9" * 31]
)  # fmt: skip


def mutate_toml(data: st.DataObject, text: str) -> str:
    """Replace one value of a TOML text (by line), add a line, or change its bytes."""
    lines = text.splitlines()
    candidates = [i for i, line in enumerate(lines) if " = " in line]
    kind = data.draw(st.sampled_from(["value", "line", "bytes"] if candidates else ["line", "bytes"]))
    if kind == "value":
        i = data.draw(st.sampled_from(candidates))
        lines[i] = lines[i].split(" = ", 1)[0] + " = " + data.draw(toml_values)
    elif kind == "line":
        key = data.draw(st.text(st.sampled_from("abcdefghijklmnopqrstuvwxyz_."), min_size=1, max_size=8))
        lines.insert(data.draw(st.integers(0, len(lines))), f"{key} = {data.draw(toml_values)}")
    else:
        return mutate_bytes(data, text.encode()).decode("utf-8", "surrogateescape")
    return "\n".join(lines) + "\n"


@FUZZ
@given(data=st.data())
def test_mutated_manifests(workdir: Path, data: st.DataObject) -> None:
    from qkenergy.surveys.manifest import read_manifest

    path = workdir / ("m.toml" if data.draw(st.booleans()) else "m.txt")
    text = MANIFEST if path.suffix == ".toml" else "embedded\n# a comment\n./runs/ckpt  # local\n"
    path.write_bytes(mutate_toml(data, text).encode("utf-8", "surrogateescape"))
    one_line(lambda: read_manifest(path))


LAYOUT = (
    'query = "layers.{i}.self_attn.q_proj.weight"\nkey = "layers.{i}.self_attn.k_proj.weight"\n'
    'norm = "layers.{i}.input_layernorm.weight"\nkv_heads_key = "num_key_value_heads"\n'
    'head_dim_key = "head_dim"\nkv_heads = 2\nnorm_offset = 0.0\n'
    '[qk_norm]\nquery = "layers.{i}.q_norm.{h}.weight"\nkey = "layers.{i}.k_norm.weight"\n'
)


@FUZZ
@given(data=st.data())
def test_mutated_layouts(workdir: Path, data: st.DataObject) -> None:
    """A layout that loads has templates that format with a layer index (and head), nothing else."""
    import dataclasses

    from qkenergy.weights.layout_toml import load_layout

    path = workdir / "layout.toml"
    path.write_bytes(mutate_toml(data, LAYOUT).encode("utf-8", "surrogateescape"))
    try:
        layout = load_layout(path)
    except QKEnergyError as error:
        assert "\n" not in str(error) and len(str(error)) < 2000, str(error)
        return
    parts = [layout, *(p for p in (layout.qk_norm, layout.latent) if p is not None)]
    for part in parts:
        for field in dataclasses.fields(part):
            value = getattr(part, field.name)
            if isinstance(value, str) and field.name in ("query", "key", "norm", "first_norm", "final_norm"):
                value.replace("{h}", "0").format(i=0)
    assert layout.kv_heads is None or layout.kv_heads >= 1


@pytest.fixture(scope="module")
def ledger_bytes(workdir: Path) -> bytes:
    from qkenergy.surveys.ledger import Ledger

    path = workdir / "valid-ledger.sqlite"
    with Ledger(path) as ledger:
        ledger.start_run("test")
        for layer in range(3):
            ledger.mark_running("m", layer, "params")
            ledger.mark_done(
                "m", layer, outcome="computed", worker="w", started=0.0, finished=1.0, fingerprint="f",
                files_digest="d", heads=4, heads_file=f"heads/model=m/layer-{layer:05d}.parquet",
                heads_sha256="0" * 64,
            )  # fmt: skip
        ledger.finish_run("done", {"units": 3, "computed": 3, "unchanged": 0, "skipped": 0, "failed": 0})
    db = sqlite3.connect(path)
    db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    db.close()
    return path.read_bytes()


@FUZZ
@given(data=st.data())
def test_mutated_ledgers(workdir: Path, ledger_bytes: bytes, data: st.DataObject) -> None:
    from qkenergy.surveys.ledger import Ledger, done_files

    path = workdir / "ledger.sqlite"
    for stale in workdir.glob("ledger.sqlite*"):
        stale.unlink()
    blob = bytearray(ledger_bytes)
    if data.draw(st.booleans()):  # a page's worth of damage somewhere, as a crash or a disk might do
        at = data.draw(st.integers(0, len(blob) - 1))
        blob[at : at + data.draw(st.integers(1, 4096))] = data.draw(st.binary(min_size=1, max_size=64))
    else:
        blob = bytearray(mutate_bytes(data, bytes(blob)))
    path.write_bytes(bytes(blob))

    def use() -> None:
        done_files(path)
        with Ledger(path) as ledger:
            ledger.units()
            ledger.start_run("again")

    one_line(use)


COMMIT = "c" * 40


@FUZZ
@given(
    ref=st.binary(max_size=64) | st.sampled_from([b"..", b"../..", COMMIT.encode(), b"x/../..", b"/etc"]),
    revision=st.none() | st.text(max_size=20) | st.sampled_from(["..", "main", COMMIT, "a/../..", "/"]),
)
def test_cache_folders_resolve_inside_snapshots(workdir: Path, ref: bytes, revision: str | None) -> None:
    """Whatever refs/main holds and whatever revision is asked for, the snapshot chosen is a
    directory in the folder's snapshots/, or the answer is one line."""
    from qkenergy.weights.checkpoint import _cached_snapshot

    repo = workdir / "models--org--fuzz"
    (repo / "snapshots" / COMMIT).mkdir(parents=True, exist_ok=True)
    (repo / "refs").mkdir(exist_ok=True)
    (repo / "refs" / "main").write_bytes(ref)
    try:
        chosen = _cached_snapshot(repo, revision)
    except QKEnergyError as error:
        assert "\n" not in str(error) and len(str(error)) < 2000, str(error)
        return
    assert chosen.resolve().parent == (repo / "snapshots").resolve() and chosen.is_dir()

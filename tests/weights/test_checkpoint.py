"""Tests of MODEL resolution: embedded default, files, directories, shards, pickles, hub ids."""

from __future__ import annotations

import json
import pickle
import sys
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import save_file

from qkenergy.base.errors import QKEnergyError
from qkenergy.weights.checkpoint import DEFAULT_MODEL_NAME, open_model

CONFIG = {"model_type": "bert", "num_hidden_layers": 1, "hidden_size": 4, "num_attention_heads": 2}
Q = "encoder.layer.0.attention.self.query.weight"
K = "encoder.layer.0.attention.self.key.weight"


def error(model: object, *needles: str) -> str:
    """Expect a one-line QKEnergyError from open_model containing ``needles``."""
    with pytest.raises(QKEnergyError) as info:
        open_model(model)  # type: ignore[arg-type]
    msg = str(info.value)
    assert "\n" not in msg
    for needle in needles:
        assert needle in msg, msg
    return msg


def make_dir(root: Path, config: dict | None = CONFIG) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    if config is not None:
        (root / "config.json").write_text(json.dumps(config))
    return root


class Trap:
    """Unpickling this creates a marker file: proof that a pickle was loaded."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple:
        return (Path.touch, (self.marker,))


def write_trap(path: Path, marker: Path) -> Path:
    path.write_bytes(pickle.dumps(Trap(marker)))
    return path


@pytest.fixture
def no_unpickling(monkeypatch: pytest.MonkeyPatch) -> None:
    def boom(*args: object, **kwargs: object) -> None:
        raise AssertionError("a pickle was loaded")

    monkeypatch.setattr(pickle, "load", boom)
    monkeypatch.setattr(pickle, "loads", boom)
    monkeypatch.setattr(pickle, "Unpickler", boom)
    if "torch" in sys.modules:
        monkeypatch.setattr(sys.modules["torch"], "load", boom)


# --- embedded default ------------------------------------------------------------------


def test_default_is_embedded_minilm() -> None:
    with open_model(None) as source:
        assert source.name == DEFAULT_MODEL_NAME and source.origin == "embedded"
        assert source.config["model_type"] == "bert"
        assert source.config["num_hidden_layers"] == 6
        assert (source.root / "config.json").is_file()
        w = source.tensors.tensor(Q)
        assert w.shape == (384, 384) and w.dtype == np.float32
        assert not w.flags.writeable and np.isfinite(w).all()


def test_default_matches_safetensors_library() -> None:
    from safetensors import safe_open

    with open_model(None) as source:
        path = source.tensors.file_of(K).path
        with safe_open(str(path), "np") as ref:
            assert sorted(ref.keys()) == sorted(source.tensors.names)
            np.testing.assert_array_equal(source.tensors.tensor(K), ref.get_tensor(K))


def test_default_model_files_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    # The MiniLM ships inside qkenergy (package data); a broken install names the repair.
    import dataclasses

    from qkenergy.weights import embedded

    broken = dataclasses.replace(embedded.EMBEDDED_MODELS["minilm"], weights="data/gone/model.safetensors")
    monkeypatch.setitem(embedded.EMBEDDED_MODELS, "minilm", broken)
    error(None, "gone", "model.safetensors: missing", "pip install --force-reinstall qkenergy")


# --- files and directories -------------------------------------------------------------


def test_safetensors_file_with_config_beside(tmp_path: Path) -> None:
    root = make_dir(tmp_path / "m")
    save_file({Q: np.eye(4, dtype=np.float32)}, str(root / "weights.safetensors"))
    with open_model(root / "weights.safetensors") as source:
        assert source.origin == "file" and source.root == root
        assert source.config == CONFIG and source.tensors.names == [Q]


def test_safetensors_file_without_config(tmp_path: Path) -> None:
    root = make_dir(tmp_path / "m", config=None)
    save_file({Q: np.eye(4, dtype=np.float32)}, str(root / "model.safetensors"))
    error(root / "model.safetensors", "config.json", "needed to know the architecture")
    error(root, "config.json", "needed to know the architecture")


def test_invalid_config_json(tmp_path: Path) -> None:
    root = make_dir(tmp_path / "m", config=None)
    (root / "config.json").write_text('{"model_type": ')
    save_file({Q: np.eye(4, dtype=np.float32)}, str(root / "model.safetensors"))
    error(root, "config.json", "not valid UTF-8 JSON")
    (root / "config.json").write_text("[1]")
    error(root, "config.json", "must be a JSON object")


def test_directory_with_model_safetensors(tmp_path: Path) -> None:
    root = make_dir(tmp_path / "m")
    save_file({Q: np.eye(4, dtype=np.float32)}, str(root / "model.safetensors"))
    with open_model(str(root)) as source:
        assert source.name == str(root) and source.origin == "directory"
        np.testing.assert_array_equal(source.tensors.tensor(Q), np.eye(4))


def test_corrupt_weights_name_the_file(tmp_path: Path) -> None:
    root = make_dir(tmp_path / "m")
    (root / "model.safetensors").write_bytes(b"\x05" + bytes(3))
    error(root, "model.safetensors", "too short")


def test_directory_with_unindexed_shards(tmp_path: Path) -> None:
    root = make_dir(tmp_path / "m")
    save_file({Q: np.eye(4, dtype=np.float32)}, str(root / "a.safetensors"))
    save_file({K: np.eye(4, dtype=np.float32)}, str(root / "b.safetensors"))
    with open_model(root) as source:
        assert source.tensors.file_of(K).path.name == "b.safetensors"
        assert len(source.tensors.files) == 2


def test_empty_directory(tmp_path: Path) -> None:
    root = make_dir(tmp_path / "m")
    error(root, str(root), "no weights found", "*.safetensors shards, a *.gguf file")


# --- sharded index ---------------------------------------------------------------------


def make_sharded(root: Path) -> Path:
    make_dir(root)
    save_file({Q: np.eye(4, dtype=np.float32)}, str(root / "model-00001-of-00002.safetensors"))
    save_file({K: 2 * np.eye(4, dtype=np.float32)}, str(root / "model-00002-of-00002.safetensors"))
    index = {
        "metadata": {"total_size": 128},
        "weight_map": {Q: "model-00001-of-00002.safetensors", K: "model-00002-of-00002.safetensors"},
    }
    (root / "model.safetensors.index.json").write_text(json.dumps(index))
    return root


def test_sharded_index(tmp_path: Path) -> None:
    root = make_sharded(tmp_path / "m")
    for model in (root, root / "model.safetensors.index.json"):
        with open_model(model) as source:
            assert set(source.tensors.names) == {Q, K}
            assert source.tensors.file_of(K).path.name == "model-00002-of-00002.safetensors"
            np.testing.assert_array_equal(source.tensors.tensor(K), 2 * np.eye(4))


def test_sharded_index_missing_shard(tmp_path: Path) -> None:
    root = make_sharded(tmp_path / "m")
    (root / "model-00002-of-00002.safetensors").unlink()
    error(root, "model.safetensors.index.json", "model-00002-of-00002.safetensors", "does not exist")


def test_sharded_index_invalid_json(tmp_path: Path) -> None:
    root = make_sharded(tmp_path / "m")
    (root / "model.safetensors.index.json").write_text("{not json")
    error(root, "model.safetensors.index.json", "not valid UTF-8 JSON")


def test_sharded_index_without_weight_map(tmp_path: Path) -> None:
    root = make_sharded(tmp_path / "m")
    (root / "model.safetensors.index.json").write_text(json.dumps({"weight_map": [1]}))
    error(root, "model.safetensors.index.json", "weight_map")


def test_sharded_index_wrong_shard(tmp_path: Path) -> None:
    root = make_sharded(tmp_path / "m")
    index = json.loads((root / "model.safetensors.index.json").read_text())
    index["weight_map"][Q], index["weight_map"][K] = index["weight_map"][K], index["weight_map"][Q]
    (root / "model.safetensors.index.json").write_text(json.dumps(index))
    error(root, "model.safetensors.index.json", repr(Q), "model-00001-of-00002.safetensors")
    shard1 = "model-00001-of-00002.safetensors"
    index["weight_map"] = {Q: shard1, "extra": shard1}
    (root / "model.safetensors.index.json").write_text(json.dumps(index))
    error(root, "model.safetensors.index.json", "'extra'", "no listed shard holds it")


def test_sharded_index_escaping_directory(tmp_path: Path) -> None:
    root = make_sharded(tmp_path / "m")
    index = {"weight_map": {Q: "../elsewhere.safetensors"}}
    (root / "model.safetensors.index.json").write_text(json.dumps(index))
    error(root, "model.safetensors.index.json", "inside the directory")


# --- pickles ---------------------------------------------------------------------------


@pytest.mark.usefixtures("no_unpickling")
@pytest.mark.parametrize("filename", ["pytorch_model.bin", "model.pt", "weights.pth", "last.ckpt"])
def test_pickle_only_directory_is_refused_unopened(tmp_path: Path, filename: str) -> None:
    root = make_dir(tmp_path / "m")
    marker = tmp_path / "unpickled"
    weights = write_trap(root / filename, marker)
    before = weights.read_bytes()
    error(root, filename, "convert it to safetensors")
    error(weights, filename, "convert it to safetensors")
    assert not marker.exists()
    assert weights.read_bytes() == before


@pytest.mark.usefixtures("no_unpickling")
def test_pickle_index_directory_is_refused(tmp_path: Path) -> None:
    root = make_dir(tmp_path / "m")
    (root / "pytorch_model.bin.index.json").write_text(
        json.dumps({"weight_map": {Q: "pytorch_model-00001-of-00001.bin"}})
    )
    write_trap(root / "pytorch_model-00001-of-00001.bin", tmp_path / "unpickled")
    error(root, "pytorch_model", "convert it to safetensors")
    assert not (tmp_path / "unpickled").exists()


def test_safetensors_preferred_over_pickles(tmp_path: Path) -> None:
    root = make_dir(tmp_path / "m")
    write_trap(root / "pytorch_model.bin", tmp_path / "unpickled")
    save_file({Q: np.eye(4, dtype=np.float32)}, str(root / "model.safetensors"))
    with open_model(root) as source:
        assert source.tensors.names == [Q]


# --- missing paths and hub ids ---------------------------------------------------------


@pytest.mark.parametrize(
    "model", ["./nowhere", "nowhere/deep/model", "missing.safetensors", "/abs/missing", "../up"]
)
def test_missing_local_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, model: str) -> None:
    monkeypatch.chdir(tmp_path)
    error(model, model, "no such file or directory")


@pytest.mark.parametrize("model", ["gpt2", "qkenergy-tests/no-such-model", "org/name@v1", "org/name/x.gguf"])
def test_hub_id_offline(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, model: str) -> None:
    pytest.importorskip("huggingface_hub")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))  # nothing cached
    msg = error(model, model.split("/x.gguf")[0], "HF_HUB_OFFLINE is set", "pass a local path")
    assert str(tmp_path / "cache" / "qkenergy" / "hub") in msg


def test_hub_id_without_huggingface_hub(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setitem(sys.modules, "huggingface_hub", None)  # import now raises ImportError
    error("org/name", "org/name", "pip install 'qkenergy[hub]'", "local path")

"""qk.open takes what analyze takes: arrays + config, transformers models, --model-type and TOML layouts."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import load_file

import qkenergy as qk
from tests.weights.test_in_memory import DOCS, _llama_dir


def _heads_equal_rows(model: qk.Model, analysis: qk.Analysis, *, fold_norm: bool = False) -> None:
    table = analysis.heads
    for row in table.itertuples():
        head = model.head(row.layer, row.head, fold_norm=fold_norm)
        assert head.symmetric_energy == pytest.approx(row.symmetric_energy, rel=1e-12)
        assert head.head_type == row.head_type and head.kv_head == row.kv_head


def test_arrays_with_config_and_the_path_give_the_same_heads(tmp_path: Path) -> None:
    _llama_dir(tmp_path, np.random.default_rng(0))
    config = json.loads((tmp_path / "config.json").read_text())
    arrays = load_file(str(tmp_path / "model.safetensors"))
    on_disk = qk.open(tmp_path)
    in_memory = qk.open(arrays, config=config)
    assert in_memory.source == "arrays" and on_disk.source == "directory"
    for fold in (False, True):
        reference = on_disk.analyze(null=False, fold_norm=fold)
        _heads_equal_rows(in_memory, reference, fold_norm=fold)
        assert in_memory.analyze(null=False, fold_norm=fold).heads["symmetric_energy"].tolist() == (
            reference.heads["symmetric_energy"].tolist()
        )
    with on_disk:
        assert on_disk.head(1, 7).w_key.shape == (4, 32)
    with pytest.raises(qk.QKEnergyError, match="already an opened Model"):
        qk.open(on_disk)


def test_model_type_and_toml_layout(tmp_path: Path) -> None:
    _llama_dir(tmp_path / "unknown", np.random.default_rng(2), model_type="mystery")
    with pytest.raises(qk.QKEnergyError, match="is not supported|not a supported"):
        qk.open(tmp_path / "unknown")
    by_type = qk.open(tmp_path / "unknown", model_type="llama")
    by_toml = qk.open(tmp_path / "unknown", layout=DOCS / "layouts" / "llama.toml")
    assert by_type.model_type == "llama" and by_toml.model_type == "mystery"
    analysis = by_toml.analyze(null=False)
    assert analysis.settings["layout_file"] == str(DOCS / "layouts" / "llama.toml")
    _heads_equal_rows(by_type, analysis)
    # qk.analyze on a path opens it lazily, with the same options, only when a head is asked for
    lazy = qk.analyze(tmp_path / "unknown", model_type="llama", null=False)
    assert lazy.head(1, 2).symmetric_energy == pytest.approx(
        lazy.heads.query("layer == 1 and head == 2")["symmetric_energy"].item(), rel=1e-12
    )


def test_a_transformers_model_in_memory(tmp_path: Path) -> None:
    transformers = pytest.importorskip("transformers")
    torch = pytest.importorskip("torch")
    config = transformers.LlamaConfig(
        hidden_size=32,
        num_attention_heads=4,
        num_key_value_heads=2,
        num_hidden_layers=2,
        intermediate_size=64,
        vocab_size=64,
        max_position_embeddings=64,
    )
    torch.manual_seed(0)
    module = transformers.LlamaForCausalLM(config).eval()
    model = qk.open(module)
    assert (model.model_type, model.layers, model.heads) == ("llama", 2, 4)
    analysis = qk.analyze(module, null=False, rope_offsets=[0, 5])
    row = analysis.heads.query("layer == 1 and head == 3 and offset == 5").iloc[0]
    assert model.head(1, 3, offset=5).symmetric_energy == pytest.approx(row["symmetric_energy"], rel=1e-10)
    assert (
        repr(model) == "<Model LlamaForCausalLM (llama): 2 layers x 4 heads>"
        and model.source == "transformers"
    )

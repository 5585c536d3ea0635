"""Models in memory, Hugging Face cache folders, --model-type and TOML layouts.

Every in-memory route is checked against the path route on the same weights:
a tiny llama (grouped-query) is saved with safetensors, and the table from the
saved folder must equal the table from the object in memory.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from safetensors.numpy import load_file, save_file

from qkenergy import cli
from qkenergy.analysis.analyze import analyze_model
from qkenergy.base.errors import ArgumentError, QKEnergyError
from qkenergy.base.small_floats import BFLOAT16
from qkenergy.weights.checkpoint import open_model
from qkenergy.weights.families import FAMILIES
from qkenergy.weights.layout_toml import layout_from_mapping, load_layout

DOCS = Path(__file__).resolve().parents[2] / "docs"
# Every column except the model's display name (a path here, a class name there).
SAME = [
    "layer",
    "head",
    "kv_head",
    "n",
    "N",
    "symmetric_energy",
    "pairing",
    "rho",
    "lobe_departure",
    "head_type",
]


def _same(a: pd.DataFrame, b: pd.DataFrame, rtol: float = 0.0) -> None:
    assert len(a) == len(b) > 0
    for column in SAME:
        if a[column].dtype.kind in "fc" and rtol:
            np.testing.assert_allclose(a[column], b[column], rtol=rtol, err_msg=column)
        else:
            assert a[column].tolist() == b[column].tolist(), column


def _llama_dir(root: Path, rng: np.random.Generator, model_type: str = "llama") -> dict[str, np.ndarray]:
    """A 2-layer grouped-query llama checkpoint (8 query heads on 2 key heads) in ``root``."""
    root.mkdir(parents=True, exist_ok=True)
    config = {
        "model_type": model_type,
        "num_hidden_layers": 2,
        "num_attention_heads": 8,
        "num_key_value_heads": 2,
        "hidden_size": 32,
        "head_dim": 4,
    }
    (root / "config.json").write_text(json.dumps(config))
    tensors = {}
    for i in range(2):
        tensors[f"model.layers.{i}.self_attn.q_proj.weight"] = rng.standard_normal((32, 32)).astype(
            np.float32
        )
        tensors[f"model.layers.{i}.self_attn.k_proj.weight"] = rng.standard_normal((8, 32)).astype(np.float32)
        tensors[f"model.layers.{i}.input_layernorm.weight"] = rng.uniform(0.5, 2, 32).astype(np.float32)
    save_file(tensors, str(root / "model.safetensors"))
    return tensors


# ----------------------------------------------------------------------------- arrays and cache folders


def test_mapping_with_config_equals_the_path_route(tmp_path: Path) -> None:
    _llama_dir(tmp_path, np.random.default_rng(0))
    config = json.loads((tmp_path / "config.json").read_text())
    arrays = load_file(str(tmp_path / "model.safetensors"))
    for fold in (False, True):
        on_disk = analyze_model(tmp_path, null=False, fold_norm=fold)
        in_memory = analyze_model(arrays, config=config, null=False, fold_norm=fold)
        _same(on_disk.heads, in_memory.heads)
        assert in_memory.settings["source"] == "arrays"
    with pytest.raises(QKEnergyError, match="needs config="):
        analyze_model(arrays, null=False)
    with pytest.raises(QKEnergyError, match="cannot analyze a int"):
        analyze_model(3, null=False)
    with pytest.raises(QKEnergyError, match="config= is only for"):
        analyze_model(tmp_path, config=config, null=False)


def test_hugging_face_cache_folder(tmp_path: Path) -> None:
    repo = tmp_path / "models--org--tiny"
    rng = np.random.default_rng(1)
    main = _llama_dir(repo / "snapshots" / "aaa", rng)
    _llama_dir(repo / "snapshots" / "bbb", rng)
    with pytest.raises(QKEnergyError, match="2 snapshots and no refs/main") as info:
        open_model(repo)
    assert "\n" not in str(info.value)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("aaa\n")
    with open_model(repo) as source:
        assert source.origin == "cache"
        q = "model.layers.0.self_attn.q_proj.weight"
        np.testing.assert_array_equal(source.tensors.tensor(q), main[q])
    (repo / "refs" / "main").write_text("ccc")
    with pytest.raises(QKEnergyError, match="names snapshot 'ccc'"):
        open_model(repo)
    (repo / "refs" / "main").unlink()
    (repo / "snapshots" / "bbb" / "model.safetensors").unlink()
    (repo / "snapshots" / "bbb" / "config.json").unlink()
    (repo / "snapshots" / "bbb").rmdir()
    with open_model(repo) as source:  # the only snapshot
        assert source.root.name == "aaa"


# ----------------------------------------------------------------------------- transformers and TransformerLens


torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")


def _tiny_llama(path: Path) -> Any:
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
    model = transformers.LlamaForCausalLM(config).eval()
    with torch.no_grad():  # gains away from 1, so folding them changes the forms
        for layer in model.model.layers:
            layer.input_layernorm.weight.uniform_(0.5, 1.5)
    model.save_pretrained(path)
    return model


def test_transformers_model_equals_the_path_route(tmp_path: Path) -> None:
    from qkenergy.weights.in_memory import to_numpy

    model = _tiny_llama(tmp_path / "f32")
    for fold in (False, True):
        _same(
            analyze_model(tmp_path / "f32", null=False, fold_norm=fold).heads,
            analyze_model(model, null=False, fold_norm=fold).heads,
        )
    model = model.to(torch.bfloat16)
    model.save_pretrained(tmp_path / "bf16")
    _same(analyze_model(tmp_path / "bf16", null=False).heads, analyze_model(model, null=False).heads)
    # bfloat16 and float32 tensors are read in place, not copied (let alone widened to float64).
    weight = model.model.layers[0].self_attn.q_proj.weight
    view = to_numpy(weight)
    assert view.dtype == BFLOAT16 and view.ctypes.data == weight.data_ptr()  # its bits, no ml_dtypes
    weight32 = weight.float()
    assert to_numpy(weight32).ctypes.data == weight32.data_ptr()


def _bridge(path: Path, model: Any) -> Any:
    """A TransformerLens 4 TransformerBridge over ``model`` (offline: a word-level tokenizer beside it)."""
    bridge_module = pytest.importorskip("transformer_lens.model_bridge")
    from tokenizers import Tokenizer, models, pre_tokenizers

    words = Tokenizer(models.WordLevel({"[UNK]": 0} | {f"t{i}": i for i in range(1, 64)}, unk_token="[UNK]"))
    words.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer = transformers.PreTrainedTokenizerFast(
        tokenizer_object=words, unk_token="[UNK]", pad_token="t1", eos_token="t2", bos_token="t3"
    )
    tokenizer.save_pretrained(path)
    return bridge_module.TransformerBridge.boot_transformers(str(path), hf_model=model)


def test_transformer_lens_model_equals_the_path_route(tmp_path: Path) -> None:
    model = _tiny_llama(tmp_path)
    bridge = _bridge(tmp_path, model)
    on_disk = analyze_model(tmp_path, null=False)
    lens = analyze_model(bridge, null=False)
    _same(on_disk.heads, lens.heads, rtol=1e-12)
    assert lens.settings["n_kv_heads"] == 2  # grouped-query: key heads not repeated
    assert lens.settings["transformer_lens_layer_norm_folded"] is False
    # TransformerLens' own folding of the RMSNorm gains is --fold-norm on the checkpoint.
    bridge.enable_compatibility_mode(disable_warnings=True)
    folded = analyze_model(bridge, null=False)
    assert folded.settings["transformer_lens_layer_norm_folded"] is True
    _same(analyze_model(tmp_path, null=False, fold_norm=True).heads, folded.heads, rtol=1e-5)


# ----------------------------------------------------------------------------- TOML layouts and --model-type


def test_example_toml_is_the_shipped_llama_layout() -> None:
    assert load_layout(DOCS / "layouts" / "llama.toml") == FAMILIES["llama"].stacks[0]
    assert layout_from_mapping({"query": "h.{i}.attn.c_attn.weight", "storage": "conv1d"}).storage == "conv1d"


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ('query = "q"\nbogus = 1\n', "unknown key 'bogus'"),
        ('query = "q"\nstorage = "fused"\n', "key 'storage' must be one of 'separate'"),
        ('query = "q"\nheads_keys = "n_head"\n', "key 'heads_keys' must be a list of a string"),
        ('query = "q"\nnorm_offset = "1"\n', "key 'norm_offset' must be a number"),
        ('key = "k"\n', "missing key 'query'"),
        ("query = [\n", "not valid TOML"),
    ],
)
def test_bad_toml_layout_is_one_line_naming_file_and_key(tmp_path: Path, text: str, needle: str) -> None:
    path = tmp_path / "mine.toml"
    path.write_text(text)
    with pytest.raises(QKEnergyError) as info:
        load_layout(path)
    message = str(info.value)
    assert "\n" not in message and message.startswith(str(path)) and needle in message, message


def test_model_type_and_layout_read_an_unknown_architecture(tmp_path: Path, capsys: Any) -> None:
    _llama_dir(tmp_path / "known", np.random.default_rng(2))
    _llama_dir(tmp_path / "unknown", np.random.default_rng(2), model_type="mystery")
    reference = analyze_model(tmp_path / "known", null=False).heads
    with pytest.raises(QKEnergyError, match="`model_type` TYPE .* `layout` FILE"):
        analyze_model(tmp_path / "unknown", null=False)
    _same(reference, analyze_model(tmp_path / "unknown", model_type="llama", null=False).heads)
    toml = DOCS / "layouts" / "llama.toml"
    by_toml = analyze_model(tmp_path / "unknown", layout=toml, null=False)
    _same(reference, by_toml.heads)
    assert by_toml.settings["layout_file"] == str(toml) and by_toml.settings["model_type"] == "mystery"
    with pytest.raises(ArgumentError, match="^model_type 'nope' is not a supported type"):
        analyze_model(tmp_path / "unknown", model_type="nope", null=False)

    out = tmp_path / "heads.csv"
    with pytest.raises(SystemExit) as status:
        cli.main(
            [
                "analyze",
                str(tmp_path / "unknown"),
                "--layout",
                str(toml),
                "--no-null",
                "--quiet",
                "-o",
                str(out),
            ]
        )
    assert status.value.code in (0, None) and len(pd.read_csv(out)) == len(reference)
    with pytest.raises(SystemExit) as status:
        cli.main(["analyze", str(tmp_path / "unknown"), "--model-type", "nope", "--no-null", "--quiet"])
    err = capsys.readouterr().err
    assert status.value.code == 2 and len(err.splitlines()) == 1 and "--model-type" in err

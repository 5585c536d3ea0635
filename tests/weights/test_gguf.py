"""GGUF files: the header against gguf.GGUFReader, every ggml type against gguf's dequantisation, each
supported architecture against the Hugging Face checkpoint it was converted from, llama.cpp's Q/K row
permutation against transformers' own GGUF loader, and truncated or garbled files.

The tiny files are written with ``gguf.GGUFWriter`` the way llama.cpp's converter writes them: tensor
names from the gguf package's own map (``gguf.get_tensor_name_map``), each head's query and key rows
permuted for llama, gemma's norm gains stored as 1 + w, quantised with ``gguf.quants``.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Any

import gguf
import numpy as np
import pytest
from gguf.constants import GGMLQuantizationType as T
from gguf.quants import dequantize, quantize
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from qkenergy.analysis.analyze import analyze_model
from qkenergy.base.errors import QKEnergyError
from qkenergy.base.small_floats import as_float
from qkenergy.math.statistics import STATISTICS
from qkenergy.weights.checkpoint import open_model
from qkenergy.weights.gguf_archs import GGUF_ARCHITECTURES
from qkenergy.weights.gguf_io import GGUFArray, read_header

OFFSETS = [0, 1, 16, 256]
N, H, HKV, n, LAYERS = 64, 4, 2, 16, 2
ARCH_ENUM = {name: arch for arch, name in gguf.MODEL_ARCH_NAMES.items()}


def permute(w: np.ndarray, heads: int) -> np.ndarray:
    """llama.cpp's converter: each head's rows (k, k + n/2) become (2k, 2k + 1)."""
    return w.reshape(heads, 2, w.shape[0] // heads // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def stored(w: np.ndarray, qtype: T) -> tuple[np.ndarray, np.ndarray]:
    """(what the file stores, the values it reads back) for ``w`` in ``qtype``."""
    w = np.ascontiguousarray(w, dtype=np.float32)
    if qtype == T.F32:
        return w, w
    if qtype == T.F16:
        return w.astype(np.float16), w.astype(np.float16)
    data = quantize(w, qtype)
    back = dequantize(data, qtype)
    if qtype == T.BF16:
        import ml_dtypes

        back = back.astype(ml_dtypes.bfloat16)
    return data, back


def write_gguf(
    path: Path, arch: str, meta: dict[str, Any], tensors: dict[str, tuple[np.ndarray, T]], split: int = 0
) -> Path:
    """A GGUF file (``split`` > 0: parts of at most that many tensors, named as gguf-split names them)."""
    writer = gguf.GGUFWriter(path, arch, split_max_tensors=split)
    for key, value in meta.items():
        full = f"{arch}.{key}"
        if isinstance(value, float):
            writer.add_float32(full, value)
        elif isinstance(value, str):
            writer.add_string(full, value)
        else:
            writer.add_uint32(full, value)
    for name, (data, qtype) in tensors.items():
        if qtype in (T.F32, T.F16):
            writer.add_tensor(name, data)
        else:
            writer.add_tensor(name, data, raw_dtype=qtype)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


@dataclasses.dataclass(frozen=True)
class Case:
    """A tiny checkpoint of one GGUF architecture: its Hugging Face config and attention tensors."""

    arch: str
    config: dict[str, Any]
    shapes: dict[str, tuple[int, ...]]  # per-layer HF name (with {i}) -> shape
    gains: tuple[str, ...] = ()  # norm gains among them (stored 1 + w by gemma's converter)
    meta: dict[str, Any] = dataclasses.field(default_factory=dict)


_ATTN = {
    "model.layers.{i}.input_layernorm.weight": (N,),
    "model.layers.{i}.self_attn.q_proj.weight": (H * n, N),
    "model.layers.{i}.self_attn.k_proj.weight": (HKV * n, N),
}
_QK_NORM = {
    "model.layers.{i}.self_attn.q_norm.weight": (n,),
    "model.layers.{i}.self_attn.k_norm.weight": (n,),
}
_BASE = dict(
    num_hidden_layers=LAYERS,
    hidden_size=N,
    num_attention_heads=H,
    num_key_value_heads=HKV,
    head_dim=n,
    max_position_embeddings=512,
    rope_theta=10000.0,
)
_META = {
    "block_count": LAYERS,
    "embedding_length": N,
    "attention.head_count": H,
    "attention.head_count_kv": HKV,
    "attention.key_length": n,
    "context_length": 512,
    "rope.freq_base": 10000.0,
}
_NORMS = ("model.layers.{i}.input_layernorm.weight",)
_QKN = ("model.layers.{i}.self_attn.q_norm.weight", "model.layers.{i}.self_attn.k_norm.weight")
_R_NOPE, _R_ROPE, _RANK, _Q_RANK, _V = 8, 4, 32, 32, 8
CASES = {
    "llama": Case("llama", dict(_BASE, model_type="llama"), _ATTN),
    "qwen2": Case("qwen2", dict(_BASE, model_type="qwen2"), _ATTN),
    "qwen3": Case("qwen3", dict(_BASE, model_type="qwen3"), {**_ATTN, **_QK_NORM}),
    "qwen3moe": Case("qwen3moe", dict(_BASE, model_type="qwen3_moe"), {**_ATTN, **_QK_NORM}),
    "gemma": Case("gemma", dict(_BASE, model_type="gemma"), _ATTN, _NORMS),
    "gemma2": Case("gemma2", dict(_BASE, model_type="gemma2"), _ATTN, _NORMS),
    "gemma3": Case(
        "gemma3",
        dict(
            _BASE,
            model_type="gemma3_text",
            num_hidden_layers=6,
            rope_theta=1e6,
            rope_scaling={"rope_type": "linear", "factor": 8.0},
            rope_local_base_freq=10000.0,
            layer_types=["sliding_attention"] * 5 + ["full_attention"],
        ),
        {**_ATTN, **_QK_NORM},
        _NORMS + _QKN,
        {"block_count": 6, "rope.freq_base": 1e6, "rope.scaling.type": "linear", "rope.scaling.factor": 8.0},
    ),
    "phi3": Case(
        "phi3",
        dict(_BASE, model_type="phi3", partial_rotary_factor=0.5),
        {
            "model.layers.{i}.input_layernorm.weight": (N,),
            "model.layers.{i}.self_attn.qkv_proj.weight": ((H + 2 * HKV) * n, N),
        },
        meta={"rope.dimension_count": n // 2},
    ),
    "starcoder2": Case(
        "starcoder2",
        dict(_BASE, model_type="starcoder2"),
        {**_ATTN, "model.layers.{i}.input_layernorm.bias": (N,)},
    ),
    "olmo2": Case(
        "olmo2",
        dict(_BASE, model_type="olmo2"),
        {
            "model.layers.{i}.self_attn.q_proj.weight": (H * n, N),
            "model.layers.{i}.self_attn.k_proj.weight": (HKV * n, N),
            "model.layers.{i}.self_attn.q_norm.weight": (H * n,),
            "model.layers.{i}.self_attn.k_norm.weight": (HKV * n,),
        },
    ),
    "deepseek2": Case(
        "deepseek2",
        dict(
            _BASE,
            model_type="deepseek_v3",
            num_key_value_heads=H,
            q_lora_rank=_Q_RANK,
            kv_lora_rank=_RANK,
            qk_nope_head_dim=_R_NOPE,
            qk_rope_head_dim=_R_ROPE,
            v_head_dim=_V,
            rope_interleave=True,
        ),
        {
            "model.layers.{i}.input_layernorm.weight": (N,),
            "model.layers.{i}.self_attn.q_a_proj.weight": (_Q_RANK, N),
            "model.layers.{i}.self_attn.q_a_layernorm.weight": (_Q_RANK,),
            "model.layers.{i}.self_attn.q_b_proj.weight": (H * (_R_NOPE + _R_ROPE), _Q_RANK),
            "model.layers.{i}.self_attn.kv_a_proj_with_mqa.weight": (_RANK + _R_ROPE, N),
            "model.layers.{i}.self_attn.kv_a_layernorm.weight": (_RANK,),
            "model.layers.{i}.self_attn.kv_b_proj.weight": (H * (_R_NOPE + _V), _RANK),
        },
        meta={
            "attention.head_count_kv": H,
            "attention.key_length": _R_NOPE + _R_ROPE,
            "attention.value_length": _V,
            "attention.q_lora_rank": _Q_RANK,
            "attention.kv_lora_rank": _RANK,
            "rope.dimension_count": _R_ROPE,
        },
    ),
}
# Storage types cycled over the tensors: plain, half and block-quantised (blocks of 32 need rows of 32).
_TYPES = (T.Q8_0, T.Q4_1, T.F16, T.Q5_0, T.BF16, T.Q4_0, T.Q5_1, T.F32)


def convert(case: Case, path: Path, seed: int = 0, split: int = 0) -> tuple[Path, dict[str, np.ndarray]]:
    """A random checkpoint of ``case`` written as llama.cpp's converter would; returns (file, HF arrays).

    The HF arrays hold the values the file reads back (the dequantised ones), so both sides analyse
    the same weights.
    """
    rng = np.random.default_rng(seed)
    layers = int(case.config["num_hidden_layers"])
    names = gguf.get_tensor_name_map(ARCH_ENUM[case.arch], layers)
    hf: dict[str, np.ndarray] = {}
    tensors: dict[str, tuple[np.ndarray, T]] = {}
    k = 0
    for i in range(layers):
        for template, shape in case.shapes.items():
            name = template.format(i=i)
            gain = len(shape) == 1
            w = (1 + 0.3 * rng.standard_normal(shape)) if gain else rng.standard_normal(shape)
            qtype = T.F32 if gain or shape[-1] % 32 else _TYPES[k % len(_TYPES)]
            k += 1
            if template in case.gains:  # gemma's converter stores 1 + w; the checkpoint holds w
                data, back = stored(w + 1, qtype)
                hf[name] = back - 1
            elif case.arch == "llama" and name.endswith(("q_proj.weight", "k_proj.weight")):
                heads = H if "q_proj" in name else HKV
                data, back = stored(permute(w, heads), qtype)
                hf[name] = unpermute(back, heads)  # the checkpoint holds the rows before the permutation
            else:
                data, hf[name] = stored(w, qtype)
            gguf_name = names.get_name(name, try_suffixes=(".weight", ".bias"))
            assert gguf_name is not None, name
            tensors[gguf_name] = (data, qtype)
    meta = {**_META, **case.meta}
    return write_gguf(path, case.arch, meta, tensors, split), hf


def unpermute(w: np.ndarray, heads: int) -> np.ndarray:
    """The inverse of :func:`permute` (transformers' reverse permutation)."""
    return w.reshape(heads, w.shape[0] // heads // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def _rows(result: Any) -> np.ndarray:
    return np.stack([np.asarray(result.columns[name], dtype=np.float64) for name in STATISTICS], axis=1)


# ----------------------------------------------------------------------------- architectures


def test_every_architecture_has_a_case() -> None:
    assert set(CASES) == set(GGUF_ARCHITECTURES) - {"mistral"}


@pytest.mark.parametrize("arch", sorted(CASES))
def test_gguf_reads_as_the_checkpoint_it_was_converted_from(arch: str, tmp_path: Path) -> None:
    """Every statistic of every head at offsets 0, 1, 16, 256, norms folded in: GGUF = Hugging Face."""
    case = CASES[arch]
    path, hf = convert(case, tmp_path / f"{arch}.gguf")
    options = dict(null=False, rope_offsets=OFFSETS, fold_norm=True, progress=False)
    got = analyze_model(str(path), **options)
    want = analyze_model(hf, config=case.config, **options)
    assert got.settings["model_type"] == case.config["model_type"]
    assert len(got.columns["offset"]) == len(want.columns["offset"]) > 0
    np.testing.assert_array_equal(got.columns["offset"], want.columns["offset"])
    np.testing.assert_allclose(_rows(got), _rows(want), rtol=1e-9, atol=1e-12)
    assert got.settings["gguf"]["architecture"] == arch


def test_llama_rows_are_paired_as_permuted(tmp_path: Path) -> None:
    """The permutation leaves offset 0 alone and changes every other offset unless the pairs follow it."""
    path, _ = convert(CASES["llama"], tmp_path / "llama.gguf")
    with open_model(str(path)) as source:
        config, arrays = dict(source.config), {m: source.tensors.tensor(m) for m in source.tensors.names}
    assert config.pop("rope_interleave") is True
    plain = analyze_model(arrays, config=config, null=False, rope_offsets=OFFSETS, progress=False)
    paired = analyze_model(str(path), null=False, rope_offsets=OFFSETS, progress=False)
    offset = np.asarray(paired.columns["offset"])
    s_plain = np.asarray(plain.columns["symmetric_energy"])
    s_paired = np.asarray(paired.columns["symmetric_energy"])
    np.testing.assert_allclose(s_plain[offset == 0], s_paired[offset == 0], rtol=1e-12)
    assert np.all(np.abs(s_plain - s_paired)[offset > 0] > 1e-6)


@pytest.mark.slow  # imports torch and transformers
def test_llama_against_transformers_gguf_loader(tmp_path: Path) -> None:
    """transformers' from_pretrained(gguf_file=...) undoes the permutation: per-head s equal at every offset."""
    pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    rng = np.random.default_rng(7)
    V, F = 32, 64
    tensors: dict[str, tuple[np.ndarray, T]] = {
        "token_embd.weight": (stored(rng.standard_normal((V, N)), T.Q8_0)[0], T.Q8_0),
        "output_norm.weight": (np.ones(N, np.float32), T.F32),
    }
    for i in range(LAYERS):
        layer = {
            "attn_norm": ((1 + 0.3 * rng.standard_normal(N)), T.F32),
            "attn_q": (permute(rng.standard_normal((H * n, N)), H), T.Q4_1),
            "attn_k": (permute(rng.standard_normal((HKV * n, N)), HKV), T.Q4_0),
            "attn_v": (rng.standard_normal((HKV * n, N)), T.Q8_0),
            "attn_output": (rng.standard_normal((N, H * n)), T.Q8_0),
            "ffn_norm": (np.ones(N), T.F32),
            "ffn_gate": (rng.standard_normal((F, N)), T.Q8_0),
            "ffn_up": (rng.standard_normal((F, N)), T.Q8_0),
            "ffn_down": (rng.standard_normal((N, F)), T.Q8_0),
        }
        for key, (w, qtype) in layer.items():
            tensors[f"blk.{i}.{key}.weight"] = (stored(w, qtype)[0], qtype)
    meta = {**_META, "feed_forward_length": F, "vocab_size": V, "rope.dimension_count": n}
    meta.pop("attention.key_length")
    path = write_gguf(tmp_path / "tiny-llama.gguf", "llama", meta, tensors)
    model = transformers.AutoModelForCausalLM.from_pretrained(str(tmp_path), gguf_file=path.name)
    options = dict(null=False, rope_offsets=OFFSETS, fold_norm=True, progress=False)
    ours = analyze_model(str(path), **options)
    theirs = analyze_model(model, **options)
    np.testing.assert_array_equal(ours.columns["offset"], theirs.columns["offset"])
    np.testing.assert_allclose(
        ours.columns["symmetric_energy"], theirs.columns["symmetric_energy"], rtol=1e-9
    )
    np.testing.assert_allclose(_rows(ours), _rows(theirs), rtol=1e-9, atol=1e-12)


# ----------------------------------------------------------------------------- header and types


def test_header_equals_gguf_reader(tmp_path: Path) -> None:
    path, _ = convert(CASES["deepseek2"], tmp_path / "d.gguf")
    reader = gguf.GGUFReader(path)
    header = read_header(path)
    assert [t.gguf_name for t in header.tensors] == [t.name for t in reader.tensors]
    for mine, theirs in zip(header.tensors, reader.tensors, strict=True):
        assert mine.dtype == theirs.tensor_type.name
        assert mine.shape == tuple(int(d) for d in reversed(theirs.shape.tolist()))
        assert (mine.begin, mine.end - mine.begin) == (theirs.data_offset, theirs.n_bytes)
    assert header.data_start == reader.data_offset
    fields = {k: f.contents() for k, f in reader.fields.items() if not k.startswith("GGUF.")}
    assert {k: list(v) if isinstance(v, tuple) else v for k, v in header.fields.items()} == fields


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # random blocks hold inf and NaN scales
def test_every_dequantisable_type_reads_as_gguf_dequantises(tmp_path: Path) -> None:
    """One tensor per ggml type (random blocks for the types gguf cannot quantise): the values gguf gives."""
    rng = np.random.default_rng(3)
    tensors: dict[str, tuple[np.ndarray, T]] = {}
    for qtype, (block, nbytes) in gguf.GGML_QUANT_SIZES.items():
        if qtype in (T.F32, T.F16) or (qtype.name.startswith("I") and qtype.name[1:].isdigit()):
            continue
        raw = rng.integers(0, 256, size=(3, 256 // block * nbytes), dtype=np.uint8)
        try:
            dequantize(raw, qtype)
        except NotImplementedError:
            continue
        tensors[f"t.{qtype.name}"] = (raw, qtype)
    tensors["t.F16"] = (rng.standard_normal((3, 256)).astype(np.float16), T.F16)
    assert {"t.Q4_K", "t.Q6_K", "t.IQ2_XXS", "t.IQ4_XS", "t.BF16", "t.Q4_1"} <= set(tensors)
    path = tmp_path / "types.gguf"
    writer = gguf.GGUFWriter(path, "llama")
    for name, (data, qtype) in tensors.items():
        writer.add_tensor(name, data, raw_dtype=None if qtype == T.F16 else qtype)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    from qkenergy.weights.gguf_io import GGUFFile

    weights = GGUFFile(path, read_header(path), {})
    for name, (data, qtype) in tensors.items():
        got = weights.tensor(name)
        want = data if qtype == T.F16 else dequantize(data, qtype)
        assert got.shape == (3, 256), name
        np.testing.assert_array_equal(as_float(got), np.asarray(want, np.float32), err_msg=name)
    weights.close()


def test_long_arrays_are_walked_not_kept(tmp_path: Path) -> None:
    writer = gguf.GGUFWriter(tmp_path / "v.gguf", "qwen2")
    writer.add_token_list([f"t{k}" for k in range(5000)])
    writer.add_array("qwen2.short", [1, 2, 3])
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    fields = read_header(tmp_path / "v.gguf").fields
    assert fields["tokenizer.ggml.tokens"] == GGUFArray("string", 5000)
    assert fields["qwen2.short"] == (1, 2, 3)


# ----------------------------------------------------------------------------- files, folders, blobs


def test_directory_and_ollama_blob(tmp_path: Path) -> None:
    (tmp_path / "m").mkdir()
    path, _ = convert(CASES["qwen2"], tmp_path / "m" / "model-Q8_0.gguf")
    direct = analyze_model(str(path), null=False, progress=False)
    folder = analyze_model(str(tmp_path / "m"), null=False, progress=False)
    blobs = tmp_path / "blobs"
    blobs.mkdir()
    blob = blobs / ("sha256-" + "0" * 64)
    os.link(path, blob)
    (blobs / ("sha256-" + "1" * 64)).write_text('{"template": "..."}')  # ollama keeps other blobs beside it
    for other in (
        analyze_model(str(blob), null=False, progress=False),
        analyze_model(str(blobs), null=False, progress=False),
    ):
        np.testing.assert_array_equal(other.columns["symmetric_energy"], direct.columns["symmetric_energy"])
    np.testing.assert_array_equal(folder.columns["symmetric_energy"], direct.columns["symmetric_energy"])
    (tmp_path / "m" / "model-Q4_0.gguf").write_bytes(path.read_bytes())
    with pytest.raises(QKEnergyError, match=r"2 GGUF files \(model-Q4_0.gguf, model-Q8_0.gguf\); pass one"):
        open_model(str(tmp_path / "m"))


def _gguf_names(names: list[str]) -> list[str]:
    from qkenergy.weights.gguf_archs import tensor_names

    inverse = {
        v: k
        for k, v in tensor_names(
            [f"blk.{i}.{t}.weight" for i in range(8) for t in ("attn_q", "attn_k", "attn_norm")]
        ).items()
    }
    return [inverse[name] for name in names]


def test_split_model(tmp_path: Path) -> None:
    """A model split by gguf-split reads as one, from its first part, any part or its folder."""
    whole, _ = convert(CASES["qwen3"], tmp_path / "whole.gguf")
    (tmp_path / "parts").mkdir()
    convert(CASES["qwen3"], tmp_path / "parts" / "m.gguf", split=3)
    parts = sorted((tmp_path / "parts").iterdir())
    count = len(parts)
    assert count > 2 and [p.name for p in parts] == [
        f"m-{k:05d}-of-{count:05d}.gguf" for k in range(1, count + 1)
    ]
    want = analyze_model(str(whole), null=False, progress=False).columns["symmetric_energy"]
    for source in (parts[0], parts[2], tmp_path / "parts"):
        result = analyze_model(str(source), null=False, progress=False)
        np.testing.assert_array_equal(result.columns["symmetric_energy"], want)
        assert result.settings["gguf"]["parts"] == count
    parts[1].unlink()
    missing = rf"m-00001-of-{count:05d}.gguf: part m-00002-of-{count:05d}.gguf of this {count}-part model is missing"
    with pytest.raises(QKEnergyError, match=missing):
        open_model(str(parts[0]))


def test_fingerprint_is_the_file_hash_when_everything_is_read(tmp_path: Path) -> None:
    import hashlib

    from qkenergy.formats.provenance import fingerprint_files

    path, _ = convert(CASES["qwen2"], tmp_path / "q.gguf")
    header = read_header(path)
    data = path.read_bytes()
    want = hashlib.sha256(data[: header.data_start])
    for t in sorted(header.tensors, key=lambda t: t.begin):
        want.update(data[t.begin : t.end])
    with open_model(str(path)) as source:
        entry = fingerprint_files(source.tensors, source.tensors.names)[0]
    assert entry["sha256"] == want.hexdigest()
    # what analyze records: the tensors it read, hashed as they were read (plain ones) or after
    result = analyze_model(str(path), null=False, progress=False)
    recorded = result.settings["model_source"]["files"][0]
    read = sorted(
        (
            header.tensors[[t.gguf_name for t in header.tensors].index(g)]
            for g in _gguf_names(recorded["tensors"])
        ),
        key=lambda t: t.begin,
    )
    want = hashlib.sha256(data[: header.data_start])
    for t in read:
        want.update(data[t.begin : t.end])
    assert recorded["sha256"] == want.hexdigest()


# ----------------------------------------------------------------------------- bad files


def _tiny(tmp_path: Path) -> Path:
    return convert(CASES["qwen3"], tmp_path / "good.gguf")[0]


@pytest.mark.parametrize(
    ("cut", "message"),
    [
        (3, r"the file ends \(3 bytes\) inside the magic"),
        (30, r"the file ends \(30 bytes\) inside the (name|length of the name) of key 0"),
        (b"qwen3.attention.head_count_kv", r"inside the name of key \d"),
        (b"qwen3.context_length", r"inside key 'qwen3.context_length'"),
        (
            -100,
            r"tensor 'blk\.1\.[a-z_]+\.weight': its \d+ bytes at data offset \d+ \(file offset \d+: the tensor "
            r"table counts from the data section, which starts at byte \d+\) run past the end of the \d+-byte "
            r"file, which would need \d+ bytes; truncated",
        ),
    ],
)
def test_truncated_files_name_the_key_or_tensor(tmp_path: Path, cut: int | bytes, message: str) -> None:
    good = _tiny(tmp_path)
    data = good.read_bytes()
    if isinstance(cut, bytes):  # inside that key's name, or inside its value
        at = data.index(cut)
        cut = at + 5 if "name" in message else at + len(cut) + 4 + 2
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(data[:cut])
    with pytest.raises(QKEnergyError, match=message) as info:
        open_model(str(bad))
    assert "bad.gguf" in str(info.value) and "\n" not in str(info.value)


def test_truncated_inside_the_tensor_table(tmp_path: Path) -> None:
    good = _tiny(tmp_path)
    header = read_header(good)
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(good.read_bytes()[: header.data_start - 20])
    with pytest.raises(
        QKEnergyError,
        match=r"bad.gguf: the file ends \(\d+ bytes\) inside the (offset|type|shape|name) of (tensor '[^']+'|tensor \d+)",
    ):
        open_model(str(bad))


def _patched(path: Path, at: int, new: bytes, out: Path) -> Path:
    data = bytearray(path.read_bytes())
    data[at : at + len(new)] = new
    out.write_bytes(bytes(data))
    return out


def test_garbled_headers(tmp_path: Path) -> None:
    good = _tiny(tmp_path)
    data = good.read_bytes()
    cases = [
        (0, b"GGML", r"does not start with the GGUF magic"),
        (4, (1).to_bytes(4, "little"), r"GGUF version 1; this reader knows versions 2, 3"),
        (4, (3 << 24).to_bytes(4, "little"), r"big-endian GGUF"),
        (
            8,
            (1 << 60).to_bytes(8, "little"),
            r"header claims \d+ keys and \d+ tensors \(at most 16777216 each\); corrupt",
        ),
    ]
    # the value type of the first key (general.architecture: name length 20, then the name)
    key_type = 24 + 8 + len("general.architecture")
    cases.append(
        (
            24,
            (1 << 40).to_bytes(8, "little"),
            r"the name of key 0 claims \d+ bytes of text \(at most 16777216\)",
        )
    )
    cases.append((key_type, (99).to_bytes(4, "little"), r"key 'general.architecture' has value type 99"))
    for k, (at, new, message) in enumerate(cases):
        bad = _patched(good, at, new, tmp_path / f"bad{k}.gguf")
        with pytest.raises(QKEnergyError, match=message) as info:
            open_model(str(bad))
        assert f"bad{k}.gguf" in str(info.value), message
    # a tensor's ggml type that gguf does not know, and an offset off the alignment
    header = read_header(good)
    last = header.tensors[-1]
    table = data.rfind(last.gguf_name.encode()) + len(last.gguf_name)
    type_at = table + 4 + 8 * len(last.shape)
    bad = _patched(good, type_at, (77).to_bytes(4, "little"), tmp_path / "type.gguf")
    with pytest.raises(QKEnergyError, match=rf"tensor '{last.gguf_name}' has ggml type 77"):
        open_model(str(bad))
    offset = last.begin - header.data_start
    bad = _patched(good, type_at + 4, (offset + 4).to_bytes(8, "little"), tmp_path / "align.gguf")
    with pytest.raises(
        QKEnergyError,
        match=rf"tensor '{last.gguf_name}': data offset {offset + 4} is not a multiple of the alignment 32",
    ):
        open_model(str(bad))


def test_unsupported_architecture_and_missing_sizes(tmp_path: Path) -> None:
    path = write_gguf(tmp_path / "rwkv.gguf", "rwkv6", {"block_count": 1}, {})
    with pytest.raises(
        QKEnergyError,
        match=r"rwkv.gguf: GGUF architecture 'rwkv6' is not supported; supported: deepseek2, gemma",
    ):
        open_model(str(path))
    path = write_gguf(tmp_path / "q.gguf", "qwen2", {"block_count": 1}, {})
    with pytest.raises(QKEnergyError, match=r"q.gguf: key 'qwen2.embedding_length' is missing"):
        open_model(str(path))


def _rewrite(path: Path, out: Path, arch: str, extra: Any) -> Path:
    """The tensors and ``<arch>.*`` keys of ``path`` written again to ``out``, after ``extra(writer)``."""
    header = read_header(path)
    writer = gguf.GGUFWriter(out, arch)
    extra(writer)
    for key, value in header.fields.items():
        if not key.startswith(f"{arch}."):
            continue
        if isinstance(value, float):
            writer.add_float32(key, value)
        elif isinstance(value, str):
            writer.add_string(key, value)
        else:
            writer.add_uint32(key, value)
    for t in gguf.GGUFReader(path).tensors:
        plain = t.tensor_type in (T.F32, T.F16)
        writer.add_tensor(t.name, np.asarray(t.data), raw_dtype=None if plain else t.tensor_type)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return out


def test_gemma3_sliding_pattern_from_the_metadata(tmp_path: Path) -> None:
    """A stated pattern (one flag per layer, true = sliding) and sliding theta win over llama.cpp's fixed ones."""
    flags = [True, False, True, True, False, True]
    config = dict(CASES["gemma3"].config, rope_local_base_freq=20000.0)
    config["layer_types"] = ["sliding_attention" if f else "full_attention" for f in flags]
    path, hf = convert(CASES["gemma3"], tmp_path / "g.gguf")

    def extra(writer: Any) -> None:
        writer.add_sliding_window_pattern(flags)
        writer.add_float32("gemma3.rope.freq_base_swa", 20000.0)

    stated = _rewrite(path, tmp_path / "stated.gguf", "gemma3", extra)
    options = dict(null=False, rope_offsets=OFFSETS, progress=False)
    got = analyze_model(str(stated), **options)
    want = analyze_model(hf, config=config, **options)
    np.testing.assert_allclose(_rows(got), _rows(want), rtol=1e-9, atol=1e-12)
    plain = analyze_model(str(path), **options)  # llama.cpp's fixed pattern: other layers slide
    assert np.abs(_rows(plain) - _rows(got)).max() > 1e-6


def test_rope_offsets_refuse_frequencies_stored_as_a_tensor(tmp_path: Path) -> None:
    """Llama 3.1's GGUF files hold their rotary frequency factors in rope_freqs.weight: offsets are refused."""
    plain, _ = convert(CASES["llama"], tmp_path / "plain.gguf")

    def extra(writer: Any) -> None:
        writer.add_tensor("rope_freqs.weight", np.ones(n // 2, np.float32))

    path = _rewrite(plain, tmp_path / "llama31.gguf", "llama", extra)
    assert len(analyze_model(str(path), null=False, progress=False).columns["head"]) == LAYERS * H
    with pytest.raises(
        QKEnergyError,
        match=r"llama31.gguf \(GGUF metadata\): rope_type 'per-frequency factors in a GGUF tensor' is not supported for `rope_offsets`",
    ):
        analyze_model(str(path), null=False, progress=False, rope_offsets=[0, 1])


def test_deepseek_with_split_kv_b_is_refused(tmp_path: Path) -> None:
    meta = {**_META, **CASES["deepseek2"].meta}
    tensors = {"blk.0.attn_k_b.weight": (np.zeros((H, _RANK, _R_NOPE), np.float32), T.F32)}
    path = write_gguf(tmp_path / "r1.gguf", "deepseek2", meta, tensors)
    with pytest.raises(QKEnergyError, match=r"r1.gguf: kv_b is stored split into attn_k_b and attn_v_b"):
        open_model(str(path))


_GOOD: dict[str, bytes] = {}


def _good_bytes(tmp: Path) -> bytes:
    if "qwen3" not in _GOOD:
        _GOOD["qwen3"] = convert(CASES["qwen3"], tmp / "good-for-mutation.gguf")[0].read_bytes()
    return _GOOD["qwen3"]


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # non-finite weights from mutated scales
@settings(max_examples=200, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    edits=st.lists(
        st.tuples(
            st.sampled_from(["flip", "cut", "insert", "word"]), st.floats(0, 1), st.integers(0, 2**64 - 1)
        ),
        min_size=1,
        max_size=3,
    )
)
def test_mutated_files_open_or_fail_in_one_line(tmp_path: Path, edits: list[tuple[str, float, int]]) -> None:
    """Flipped bytes, cuts, insertions, 8-byte words overwritten: the file is read or refused in one line."""
    data = bytearray(_good_bytes(tmp_path))
    for kind, where, value in edits:
        if not data:
            break
        # half the edits inside the header (the first KiB: keys and tensor table), half anywhere
        at = int(where * (min(len(data), 1024) if value % 2 else len(data)) - 1) if where else 0
        if kind == "flip":
            data[at] ^= 1 << (value % 8)
        elif kind == "cut":
            del data[at:]
        elif kind == "insert":
            data[at:at] = value.to_bytes(8, "little")[: 1 + value % 8]
        else:
            data[at : at + 8] = value.to_bytes(8, "little")
    path = tmp_path / "mutated.gguf"
    path.write_bytes(bytes(data))
    try:
        analyze_model(str(path), null=False, progress=False)
    except QKEnergyError as error:
        assert "\n" not in str(error) and "mutated.gguf" in str(error), str(error)


def test_cli_one_line_exit_1(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from qkenergy.cli.main import main

    good = _tiny(tmp_path)
    bad = tmp_path / "cut.gguf"
    bad.write_bytes(good.read_bytes()[:-100])
    with pytest.raises(SystemExit) as exit_info:
        main(["analyze", str(bad), "--no-null", "-o", str(tmp_path / "out.csv")])
    assert exit_info.value.code == 1
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "cut.gguf" in lines[0] and "truncated" in lines[0], err
    assert not (tmp_path / "out.csv").exists()

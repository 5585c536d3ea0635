"""Hostile input, third round (issue 27): non-finite weights in every storage kind, and refusals that
show the value at fault in the user's terms.

Every NaN or infinity here is written into a file byte by byte, as a corrupted download or a broken
quantiser would leave it: a plain F32 / F16 / BF16 weight, an F8_E4M3 weight byte, an FP8 block
scale, a GPTQ group scale, a GGUF block's float16 scale (Q8_0, Q4_K), a plain GGUF tensor, a norm
gain folded in with --fold-norm and a qk-norm gain. Each run of ``analyze`` ends in exit status 1,
one line on stderr naming the file, the tensor, the element or block and the layer's heads, and
nothing written; ``--skip-nonfinite`` analyses the other heads and lists the skipped ones. The
survey records the same line in its ledger, the training tracker logs the heads it leaves out.
"""

from __future__ import annotations

import json
import logging
import os
import sqlite3
import struct
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.cross.test_hostile_input_surfaces import Result, assert_one_line, run
from tests.survey_checkpoints import thread_cluster

H, HKV, n, N = 4, 2, 16, 64  # GQA: query heads 2h and 2h + 1 share key head h
LAYERS = 2
Q = "model.layers.{i}.self_attn.q_proj"
K = "model.layers.{i}.self_attn.k_proj"
NORM = "model.layers.{i}.input_layernorm.weight"
RNG_SEED = 27


def llama_config(**extra: Any) -> dict[str, Any]:
    return {
        "model_type": "llama",
        "num_hidden_layers": LAYERS,
        "num_attention_heads": H,
        "num_key_value_heads": HKV,
        "head_dim": n,
        "hidden_size": N,
        "max_position_embeddings": 128,
        "rope_theta": 10000.0,
        **extra,
    }


def write_safetensors(path: Path, tensors: dict[str, tuple[str, tuple[int, ...], bytes]]) -> Path:
    """A safetensors file written by hand: name -> (dtype code, shape, raw little-endian bytes)."""
    header: dict[str, Any] = {}
    offset = 0
    for name, (code, shape, data) in tensors.items():
        header[name] = {"dtype": code, "shape": list(shape), "data_offsets": [offset, offset + len(data)]}
        offset += len(data)
    raw = json.dumps(header).encode()
    raw += b" " * (-len(raw) % 8)
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + b"".join(t[2] for t in tensors.values()))
    return path


def floats(shape: tuple[int, ...], code: str, rng: np.random.Generator) -> tuple[str, tuple[int, ...], bytes]:
    """Gaussian values stored as ``code`` (F32, F16, or BF16: the top half of each float32)."""
    values = rng.standard_normal(shape).astype("<f4")
    if code == "F16":
        return code, shape, values.astype("<f2").tobytes()
    if code == "BF16":
        return code, shape, (values.view("<u4") >> 16).astype("<u2").tobytes()
    return code, shape, values.tobytes()


def with_value(entry: tuple[str, tuple[int, ...], bytes], index: tuple[int, ...], raw: bytes) -> tuple:
    """``entry`` with the element at ``index`` replaced by the bytes ``raw``."""
    code, shape, data = entry
    size = len(raw)
    at = int(np.ravel_multi_index(index, shape)) * size
    return code, shape, data[:at] + raw + data[at + size :]


NAN = {"F32": struct.pack("<f", float("nan")), "F16": b"\x00\x7e", "BF16": b"\xc0\x7f"}
INF = {"F32": struct.pack("<f", float("inf")), "F16": b"\x00\x7c", "BF16": b"\x80\x7f"}
NEG_INF = {"F32": struct.pack("<f", float("-inf")), "F16": b"\x00\xfc", "BF16": b"\x80\xff"}


def plain_model(
    root: Path,
    code: str = "F32",
    change: Callable[[dict[str, tuple]], None] | None = None,
    config: dict[str, Any] | None = None,
    extra: dict[str, tuple] | None = None,
) -> Path:
    """A 2-layer llama checkpoint in ``code`` (norm gains F32), ``change`` applied to its tensors."""
    rng = np.random.default_rng(RNG_SEED)
    tensors: dict[str, tuple] = {}
    for i in range(LAYERS):
        tensors[Q.format(i=i) + ".weight"] = floats((H * n, N), code, rng)
        tensors[K.format(i=i) + ".weight"] = floats((HKV * n, N), code, rng)
        tensors[NORM.format(i=i)] = ("F32", (N,), np.ones(N, "<f4").tobytes())
    tensors.update(extra or {})
    if change is not None:
        change(tensors)
    root.mkdir(parents=True)
    write_safetensors(root / "model.safetensors", tensors)
    (root / "config.json").write_text(json.dumps(config or llama_config()))
    return root


def set_value(name: str, index: tuple[int, ...], raw: bytes) -> Callable[[dict[str, tuple]], None]:
    def change(tensors: dict[str, tuple]) -> None:
        tensors[name] = with_value(tensors[name], index, raw)

    return change


# ----------------------------------------------------------------------------- quantised safetensors


def float8_bytes(shape: tuple[int, int], rng: np.random.Generator) -> bytes:
    """F8_E4M3 bytes of finite values (0x7f and 0xff, E4M3's NaN codes, left out)."""
    data = rng.integers(0, 0x7F, size=shape, dtype=np.uint8) | (
        rng.integers(0, 2, size=shape, dtype=np.uint8) << 7
    )
    return data.tobytes()


def fp8_model(root: Path, change: Callable[[dict[str, tuple]], None]) -> Path:
    """DeepSeek-V3 style FP8: float8 weights, float32 weight_scale_inv per 16 x 16 block."""
    rng = np.random.default_rng(RNG_SEED)
    tensors: dict[str, tuple] = {}
    for i in range(LAYERS):
        for module, rows in ((Q.format(i=i), H * n), (K.format(i=i), HKV * n)):
            tensors[module + ".weight"] = ("F8_E4M3", (rows, N), float8_bytes((rows, N), rng))
            grid = (rows // 16, N // 16)
            scales = (10.0 ** rng.uniform(-2, 0, size=grid)).astype("<f4")
            tensors[module + ".weight_scale_inv"] = ("F32", grid, scales.tobytes())
    change(tensors)
    root.mkdir(parents=True)
    write_safetensors(root / "model.safetensors", tensors)
    block = {"quant_method": "fp8", "fmt": "e4m3", "weight_block_size": [16, 16]}
    (root / "config.json").write_text(json.dumps(llama_config(quantization_config=block)))
    return root


def gptq_model(root: Path, change: Callable[[dict[str, tuple]], None]) -> Path:
    """4-bit GPTQ, groups of 16 input columns: any packed word is valid, the scales are float16."""
    rng = np.random.default_rng(RNG_SEED)
    tensors: dict[str, tuple] = {}
    for i in range(LAYERS):
        for module, rows in ((Q.format(i=i), H * n), (K.format(i=i), HKV * n)):
            words = rng.integers(0, 2**31, size=(N // 8, rows), dtype=np.int64).astype("<i4")
            tensors[module + ".qweight"] = ("I32", (N // 8, rows), words.tobytes())
            zeros = np.full((N // 16, rows // 8), 0x77777777, "<i4")
            tensors[module + ".qzeros"] = ("I32", zeros.shape, zeros.tobytes())
            scales = (10.0 ** rng.uniform(-3, -1, size=(N // 16, rows))).astype("<f2")
            tensors[module + ".scales"] = ("F16", scales.shape, scales.tobytes())
    change(tensors)
    root.mkdir(parents=True)
    write_safetensors(root / "model.safetensors", tensors)
    config = {"quant_method": "gptq", "bits": 4, "group_size": 16, "desc_act": False, "sym": True}
    (root / "config.json").write_text(json.dumps(llama_config(quantization_config=config)))
    return root


def awq_model(root: Path, change: Callable[[dict[str, tuple]], None]) -> Path:
    """4-bit AWQ (GEMM packing), groups of 16 input columns, float16 scales."""
    rng = np.random.default_rng(RNG_SEED)
    tensors: dict[str, tuple] = {}
    for i in range(LAYERS):
        for module, rows in ((Q.format(i=i), H * n), (K.format(i=i), HKV * n)):
            words = rng.integers(0, 2**31, size=(N, rows // 8), dtype=np.int64).astype("<i4")
            tensors[module + ".qweight"] = ("I32", words.shape, words.tobytes())
            zeros = rng.integers(0, 2**31, size=(N // 16, rows // 8), dtype=np.int64).astype("<i4")
            tensors[module + ".qzeros"] = ("I32", zeros.shape, zeros.tobytes())
            scales = (10.0 ** rng.uniform(-3, -1, size=(N // 16, rows))).astype("<f2")
            tensors[module + ".scales"] = ("F16", scales.shape, scales.tobytes())
    change(tensors)
    root.mkdir(parents=True)
    write_safetensors(root / "model.safetensors", tensors)
    config = {"quant_method": "awq", "bits": 4, "group_size": 16, "version": "gemm", "zero_point": True}
    (root / "config.json").write_text(json.dumps(llama_config(quantization_config=config)))
    return root


def compressed_model(root: Path, change: Callable[[dict[str, tuple]], None]) -> Path:
    """compressed-tensors int-quantized, one float32 scale per output row (channel strategy)."""
    rng = np.random.default_rng(RNG_SEED)
    tensors: dict[str, tuple] = {}
    for i in range(LAYERS):
        for module, rows in ((Q.format(i=i), H * n), (K.format(i=i), HKV * n)):
            values = rng.integers(-127, 128, size=(rows, N), dtype=np.int64).astype("i1")
            tensors[module + ".weight"] = ("I8", values.shape, values.tobytes())
            scales = (10.0 ** rng.uniform(-3, -1, size=(rows, 1))).astype("<f4")
            tensors[module + ".weight_scale"] = ("F32", scales.shape, scales.tobytes())
    change(tensors)
    root.mkdir(parents=True)
    write_safetensors(root / "model.safetensors", tensors)
    weights = {"type": "int", "num_bits": 8, "strategy": "channel", "symmetric": True}
    config = {
        "quant_method": "compressed-tensors",
        "format": "int-quantized",
        "config_groups": {"group_0": {"targets": ["Linear"], "weights": weights}},
    }
    (root / "config.json").write_text(json.dumps(llama_config(quantization_config=config)))
    return root


# ----------------------------------------------------------------------------- GGUF


GN = 256  # GGUF models: the K-quants' blocks are 256 values long


def gguf_model(path: Path, q_type: str, *, scale_at: tuple[int, bytes] | None = None) -> Path:
    """A one-layer llama GGUF file; ``scale_at`` = (block, float16 bytes) overwrites the first two
    bytes of that block of blk.0.attn_q.weight (its scale d in Q8_0 and Q4_K)."""
    import gguf
    from gguf.constants import GGMLQuantizationType as T
    from gguf.quants import quantize

    from qkenergy.weights.gguf_io import read_header

    rng = np.random.default_rng(RNG_SEED)
    writer = gguf.GGUFWriter(path, "llama")
    for key, value in {
        "block_count": 1,
        "embedding_length": GN,
        "attention.head_count": H,
        "attention.head_count_kv": HKV,
        "attention.key_length": n,
        "context_length": 128,
    }.items():
        writer.add_uint32(f"llama.{key}", value)
    writer.add_float32("llama.rope.freq_base", 10000.0)
    writer.add_tensor("blk.0.attn_norm.weight", np.ones(GN, np.float32))
    for name, rows, kind in (
        ("blk.0.attn_q.weight", H * n, q_type),
        ("blk.0.attn_k.weight", HKV * n, "Q8_0"),
    ):
        w = rng.standard_normal((rows, GN)).astype(np.float32)
        if kind == "F32":
            writer.add_tensor(name, w)
        elif kind == "Q4_K":  # no quantiser in the gguf package: random blocks with finite d, dmin
            blocks = rng.integers(0, 256, size=(rows * GN // 256, 144), dtype=np.uint8)
            blocks[:, 0:2] = np.array([0.01], "<f2").view(np.uint8)
            blocks[:, 2:4] = np.array([0.001], "<f2").view(np.uint8)
            writer.add_tensor(name, blocks.reshape(rows, -1), raw_dtype=T.Q4_K)
        else:
            writer.add_tensor(name, quantize(w, T[kind]), raw_dtype=T[kind])
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    if scale_at is not None:
        from gguf.constants import GGML_QUANT_SIZES

        block, raw = scale_at
        info = next(t for t in read_header(path).tensors if t.gguf_name == "blk.0.attn_q.weight")
        at = info.begin + block * GGML_QUANT_SIZES[T[q_type]][1]
        data = bytearray(path.read_bytes())
        data[at : at + len(raw)] = raw
        path.write_bytes(bytes(data))
    return path


def plain_gguf_nan(path: Path) -> Path:
    """The F32 query weight of a GGUF file with one NaN (row 5, column 7)."""
    from qkenergy.weights.gguf_io import read_header

    gguf_model(path, "F32")
    info = next(t for t in read_header(path).tensors if t.gguf_name == "blk.0.attn_q.weight")
    data = bytearray(path.read_bytes())
    at = info.begin + (5 * GN + 7) * 4
    data[at : at + 4] = NAN["F32"]
    path.write_bytes(bytes(data))
    return path


# ----------------------------------------------------------------------------- the cases


def qwen3_model(root: Path) -> Path:
    """qwen3: qk-norm gains (one per head dimension, shared by the layer's heads); one is inf."""
    q_norm = np.ones(n, "<f4")
    q_norm[3] = np.inf
    extra = {
        f"model.layers.{i}.self_attn.{side}_norm.weight": (
            "F32",
            (n,),
            (q_norm if side == "q" and i == 1 else np.ones(n, "<f4")).tobytes(),
        )
        for i in range(LAYERS)
        for side in ("q", "k")
    }
    return plain_model(root, config=llama_config(model_type="qwen3"), extra=extra)


def norm_nan(tensors: dict[str, tuple]) -> None:
    gain = np.ones(N, "<f4")
    gain[11] = np.nan
    tensors[NORM.format(i=0)] = ("F32", (N,), gain.tobytes())


# case -> (build MODEL in a folder, extra analyze arguments, texts the one line must hold)
NONFINITE: dict[str, tuple[Callable[[Path], Path], tuple[str, ...], tuple[str, ...]]] = {
    "F32 query NaN": (
        lambda d: plain_model(d / "m", "F32", set_value(Q.format(i=1) + ".weight", (37, 5), NAN["F32"])),
        (),
        (
            "model.safetensors",
            "'model.layers.1.self_attn.q_proj.weight' holds NaN at [37, 5]",
            "layer 1's query head 2 (of 4)",
        ),
    ),
    "F16 key inf": (
        lambda d: plain_model(d / "m", "F16", set_value(K.format(i=0) + ".weight", (20, 63), INF["F16"])),
        (),
        (
            "'model.layers.0.self_attn.k_proj.weight' holds inf at [20, 63]",
            "layer 0's query heads 2, 3 (of 4)",
        ),
    ),
    "BF16 query -inf": (
        lambda d: plain_model(d / "m", "BF16", set_value(Q.format(i=0) + ".weight", (0, 0), NEG_INF["BF16"])),
        (),
        ("'model.layers.0.self_attn.q_proj.weight' holds -inf at [0, 0]", "query head 0 (of 4)"),
    ),
    "BF16 key NaN, 2 values": (
        lambda d: plain_model(
            d / "m",
            "BF16",
            lambda t: [
                set_value(K.format(i=1) + ".weight", idx, NAN["BF16"])(t) for idx in ((3, 9), (30, 1))
            ],
        ),
        (),
        (
            "'model.layers.1.self_attn.k_proj.weight' holds NaN at [3, 9] (2 non-finite values in all)",
            "heads 0, 1, 2, 3",
        ),
    ),
    "F8_E4M3 weight byte 0xff": (
        lambda d: fp8_model(d / "m", set_value(Q.format(i=0) + ".weight", (50, 40), b"\xff")),
        (),
        ("'model.layers.0.self_attn.q_proj.weight' holds NaN (byte 0xff) at [50, 40]", "query head 3 (of 4)"),
    ),
    "FP8 block scale inf": (
        lambda d: fp8_model(d / "m", set_value(K.format(i=1) + ".weight_scale_inv", (1, 2), INF["F32"])),
        (),
        (
            "'model.layers.1.self_attn.k_proj.weight_scale_inv' holds inf at [1, 2], the scale of block [1, 2] "
            "of 'model.layers.1.self_attn.k_proj.weight'",
            "layer 1's query heads 2, 3",
        ),
    ),
    "GPTQ group scale NaN": (
        lambda d: gptq_model(d / "m", set_value(Q.format(i=1) + ".scales", (2, 17), NAN["F16"])),
        (),
        (
            "'model.layers.1.self_attn.q_proj.scales' holds NaN at [2, 17], the scale of group 2 of output row 17",
            "query head 1 (of 4)",
        ),
    ),
    "AWQ group scale inf": (
        lambda d: awq_model(d / "m", set_value(K.format(i=0) + ".scales", (3, 5), INF["F16"])),
        (),
        (
            "'model.layers.0.self_attn.k_proj.scales' holds inf at [3, 5], the scale of group 3 of output row 5",
            "layer 0's query heads 0, 1 (of 4)",
        ),
    ),
    "compressed-tensors channel scale NaN": (
        lambda d: compressed_model(d / "m", set_value(Q.format(i=1) + ".weight_scale", (40, 0), NAN["F32"])),
        (),
        (
            "'model.layers.1.self_attn.q_proj.weight_scale' holds NaN at [40, 0], the scale of block [40, 0]",
            "layer 1's query head 2 (of 4)",
        ),
    ),
    "GGUF Q8_0 block scale NaN": (
        lambda d: gguf_model(d / "m.gguf", "Q8_0", scale_at=(37, NAN["F16"])),
        (),
        (
            "m.gguf: tensor 'blk.0.attn_q.weight' (Q8_0): block 37 of 512 (row 4, values 160..191 of the row) "
            "dequantises to NaN: its float16 scale d is NaN",
            "layer 0's query head 0 (of 4)",
        ),
    ),
    "GGUF Q4_K block scale inf": (
        lambda d: gguf_model(d / "m.gguf", "Q4_K", scale_at=(50, INF["F16"])),
        (),
        (
            "tensor 'blk.0.attn_q.weight' (Q4_K): block 50 of 64 (row 50, values 0..255 of the row)",
            "float16 scale d is inf",
            "query head 3",
        ),
    ),
    "GGUF F32 NaN": (
        lambda d: plain_gguf_nan(d / "m.gguf"),
        (),
        ("m.gguf: tensor 'blk.0.attn_q.weight' holds NaN at [5, 7]", "query head 0 (of 4)"),
    ),
    "fold-norm gain NaN": (
        lambda d: plain_model(d / "m", change=norm_nan),
        ("--fold-norm",),
        (
            "'model.layers.0.input_layernorm.weight' holds NaN at [11]",
            "layer 0's query heads 0, 1, 2, 3 (of 4)",
        ),
    ),
    "qk-norm gain inf": (
        lambda d: qwen3_model(d / "m"),
        (),
        ("'model.layers.1.self_attn.q_norm.weight' holds inf at [3]", "layer 1's query heads 0, 1, 2, 3"),
    ),
}


def _analyze(model: Path, out: Path, *extra: str) -> Result:
    return run("analyze", model, "--no-null", "--quiet", "--threads", "1", "-o", out / "heads.csv", *extra)


@pytest.mark.parametrize("case", NONFINITE)
def test_nonfinite_weights_are_one_line_exit_1_nothing_written(case: str, tmp_path: Path) -> None:
    build, extra, needles = NONFINITE[case]
    model = build(tmp_path)
    out = tmp_path / "out"
    out.mkdir()
    result = _analyze(model, out, *extra)
    assert_one_line(result, *needles, "--skip-nonfinite analyses the other heads", statuses=(1,))
    assert "skip_nonfinite" not in result.err  # the command line names its flag
    assert list(out.iterdir()) == [], "nothing is written"


def test_the_fold_norm_case_reads_without_the_option(tmp_path: Path) -> None:
    """The NaN gain enters the forms only when folded: without --fold-norm every head is read."""
    model = plain_model(tmp_path / "m", change=norm_nan)
    out = tmp_path / "out"
    out.mkdir()
    result = _analyze(model, out)
    assert result.code == 0, result
    assert (out / "heads.csv").is_file()


def test_skip_nonfinite_lists_the_heads_left_out(tmp_path: Path) -> None:
    """A NaN in head 1's query rows and an inf in key head 0 (query heads 0, 1) of layer 0, a NaN in
    layer 1's query rows of head 3: those heads are skipped, each named with its own tensor."""

    def change(tensors: dict[str, tuple]) -> None:
        set_value(Q.format(i=0) + ".weight", (n + 2, 4), NAN["F32"])(tensors)
        set_value(K.format(i=0) + ".weight", (1, 1), INF["F32"])(tensors)
        set_value(Q.format(i=1) + ".weight", (3 * n, 0), NAN["F32"])(tensors)

    model = plain_model(tmp_path / "m", change=change)
    out = tmp_path / "out"
    out.mkdir()
    result = run(
        "analyze",
        model,
        "--no-null",
        "--threads",
        "1",
        "--per-layer",
        "--skip-nonfinite",
        "-o",
        out / "heads.json",
    )
    assert result.code == 0, result
    printed = " ".join(result.out.split())  # the summary wraps at the console's width
    assert "5 heads (3 more skipped: non-finite weights) in 2 layers" in printed, printed
    assert "Skipped, layer 0 heads 0, 1:" in printed and "Skipped, layer 1 head 3:" in printed
    document = json.loads((out / "heads.json").read_text())
    kept = sorted((h["layer"], h["head"]) for h in document["heads"])
    assert kept == [(0, 2), (0, 3), (1, 0), (1, 1), (1, 2)]
    settings = document["settings"]
    assert settings["skip_nonfinite"] is True
    skipped = {(s["layer"], s["head"]): s["why"] for s in settings["skipped_heads"]}
    assert set(skipped) == {(0, 0), (0, 1), (1, 3)}
    key = "'model.layers.0.self_attn.k_proj.weight' holds inf at [1, 1]"
    query = "'model.layers.0.self_attn.q_proj.weight' holds NaN at [18, 4]"
    assert key in skipped[(0, 0)] and query not in skipped[(0, 0)]  # head 0: its key head alone
    assert key in skipped[(0, 1)] and query in skipped[(0, 1)]  # head 1: both
    assert "'model.layers.1.self_attn.q_proj.weight' holds NaN at [48, 0]" in skipped[(1, 3)]
    assert all(np.isfinite(h["symmetric_energy"]) for h in document["heads"])
    forms = {row["layer"]: row for row in document["layers"]}
    assert forms[0]["n_heads"] == 2 and forms[1]["n_heads"] == 3  # the finite heads' sum
    assert all(np.isfinite(row["symmetric_energy"]) for row in document["layers"])


def test_skip_nonfinite_with_every_head_non_finite_is_one_line(tmp_path: Path) -> None:
    model = plain_model(tmp_path / "m", change=norm_nan)
    out = tmp_path / "out"
    out.mkdir()
    result = _analyze(model, out, "--fold-norm", "--skip-nonfinite", "--layers", "0")
    assert_one_line(
        result, "input_layernorm.weight' holds NaN at [11]", "nothing is left to analyse", statuses=(1,)
    )
    assert list(out.iterdir()) == []


def test_the_python_api_names_its_parameter_and_a_head_elsewhere_reads(tmp_path: Path) -> None:
    import qkenergy as qk
    from qkenergy.weights.finite import NonFiniteWeights

    model = plain_model(tmp_path / "m", change=set_value(Q.format(i=0) + ".weight", (5, 5), NAN["F32"]))
    with pytest.raises(NonFiniteWeights, match=r"\(`skip_nonfinite` analyses the other heads\)$") as info:
        qk.analyze(str(model), null=False, threads=1)
    assert info.value.layer == 0 and info.value.heads == (0,)
    analysis = qk.analyze(str(model), null=False, threads=1, skip_nonfinite=True)
    assert len(analysis.heads) == LAYERS * H - 1
    assert "7 heads (1 more skipped: non-finite weights)" in analysis.summary(width=200)
    with qk.open(str(model)) as opened:
        assert opened.head(0, 1).symmetric_energy > 0  # the NaN is in head 0's rows only
        with pytest.raises(NonFiniteWeights, match="layer 0's query head 0 "):
            opened.head(0, 0)


def test_a_survey_unit_fails_with_the_line_in_its_ledger(tmp_path: Path) -> None:
    model = plain_model(tmp_path / "m", change=set_value(K.format(i=1) + ".weight", (9, 9), NAN["F32"]))
    manifest = tmp_path / "m.toml"
    manifest.write_text(f'[[model]]\nsource = "{model}"\nname = "bad"\n')
    out = tmp_path / "survey"
    with thread_cluster() as address:
        result = run("survey", manifest, "-o", out, "--samples", "4", "--quiet", "--scheduler", address)
    assert result.code == 1, result
    db = sqlite3.connect(f"file:{out / 'ledger.sqlite'}?mode=ro", uri=True)
    try:
        rows = dict(
            db.execute("SELECT layer, status || ' ' || attempts || ' ' || coalesce(error, '') FROM units")
        )
    finally:
        db.close()
    assert rows[0].startswith("done"), rows
    assert rows[1].startswith("failed 1 "), rows  # not retried: the same weights fail every time
    assert "'model.layers.1.self_attn.k_proj.weight' holds NaN at [9, 9]" in rows[1]
    assert "layer 1's query heads 0, 1 (of 4)" in rows[1]
    assert not list((out / "heads").rglob("layer-00001.parquet"))


def test_the_tracker_logs_the_heads_it_leaves_out(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    from qkenergy.base.errors import QKEnergyError
    from qkenergy.training.tracker import Tracker

    rng = np.random.default_rng(RNG_SEED)
    state = {}
    for i in range(LAYERS):
        state[Q.format(i=i) + ".weight"] = rng.standard_normal((H * n, N)).astype(np.float32)
        state[K.format(i=i) + ".weight"] = rng.standard_normal((HKV * n, N)).astype(np.float32)
    state[Q.format(i=1) + ".weight"][2 * n + 1, 3] = np.nan  # head 2 of layer 1
    tracker = Tracker(state, tmp_path / "track", samples=8, config=llama_config())
    with caplog.at_level(logging.WARNING, logger="qkenergy.training.tracker"):
        scalars = tracker.log(3)
    assert "step 3: 1 heads left out" in caplog.text and "Skipped, layer 1 head 2:" in caplog.text
    assert scalars["qkenergy/skipped_heads"] == 1.0
    assert len(tracker.last) == LAYERS * H - 1
    strict = Tracker(state, None, samples=8, config=llama_config(), skip_nonfinite=False)
    with pytest.raises(QKEnergyError, match=r"q_proj.weight' holds NaN at \[33, 3\]"):
        strict.log(3)


# ----------------------------------------------------------------------------- refusals in the user's terms


def _symlink_loop(d: Path) -> Path:
    os.symlink(d / "b", d / "a")
    os.symlink(d / "a", d / "b")
    return d / "a"


def _looping_weights(d: Path) -> Path:
    root = d / "m"
    root.mkdir()
    (root / "config.json").write_text(json.dumps(llama_config()))
    os.symlink(root / "model.safetensors", root / "model.safetensors")
    return root


def _dangling(d: Path) -> Path:
    os.symlink(d / "gone" / "model.safetensors", d / "link")
    return d / "link"


def _ollama_blobs(d: Path) -> Path:
    blobs = d / "blobs"
    blobs.mkdir()
    (blobs / "sha256-0f3a").write_text('{"license": "MIT"}')
    (blobs / "sha256-77aa").write_bytes(b"\x00" * 64)
    return blobs


def _empty(d: Path) -> Path:
    (d / "empty").mkdir()
    return d / "empty"


def _truncated_gguf(d: Path) -> Path:
    path = gguf_model(d / "full.gguf", "Q8_0")
    cut = d / "cut.gguf"
    cut.write_bytes(path.read_bytes()[: path.stat().st_size - 1000])
    return cut


def _block_size(value: object) -> Callable[[Path], Path]:
    def build(d: Path) -> Path:
        root = plain_model(d / "m")
        config = llama_config(quantization_config={"quant_method": "fp8", "weight_block_size": value})
        (root / "config.json").write_text(json.dumps(config))
        return root

    return build


MESSAGES: dict[str, tuple[Callable[[Path], Path], tuple[str, ...]]] = {
    "symlink loop": (_symlink_loop, ("a: a loop of symbolic links",)),
    "weights a looping link": (_looping_weights, ("'model.safetensors' is not a readable file", "GGUF")),
    "dangling link": (
        _dangling,
        ("link: a symbolic link to", "gone/model.safetensors, which does not exist"),
    ),
    "ollama blobs, none GGUF": (
        _ollama_blobs,
        (
            "no weights found",
            "a *.gguf file, or the GGUF blob of an ollama blobs folder",
            "none of its 2 sha256-* blobs is a GGUF file",
        ),
    ),
    "empty folder": (_empty, ("empty: no weights found", "*.gguf")),
    "truncated GGUF": (
        _truncated_gguf,
        (
            "cut.gguf: tensor 'blk.0.attn_k.weight'",
            "at data offset",
            "(file offset",
            "the tensor table counts from the data section, which starts at byte",
            "-byte file, which would need",
        ),
    ),
    "block size [1, 0]": (
        _block_size([1, 0]),
        ("field 'weight_block_size' is an array [1, 0]: element 1 (the columns) is 0", "two integers from 1"),
    ),
    "block size ['a', 64]": (
        _block_size(["a", 64]),
        ("is an array [\"a\", 64]: element 0 (the rows) is 'a'",),
    ),
    "block size 3 items": (_block_size([64, 64, 1]), ("is an array [64, 64, 1]; expected [rows, columns]",)),
}


@pytest.mark.parametrize("case", MESSAGES)
def test_refusals_show_the_value_at_fault(case: str, tmp_path: Path) -> None:
    build, needles = MESSAGES[case]
    model = build(tmp_path)
    out = tmp_path / "out"
    out.mkdir()
    result = _analyze(model, out)
    assert_one_line(result, *needles, statuses=(1,))
    assert list(out.iterdir()) == []


def test_a_stack_name_says_what_stacks_there_are(tmp_path: Path) -> None:
    import qkenergy as qk
    from qkenergy.base.errors import QKEnergyError

    with qk.open(str(plain_model(tmp_path / "m"))) as model, pytest.raises(QKEnergyError) as info:
        model.head(0, 0, stack="decoder")
    assert "''" not in str(info.value)
    assert str(info.value).endswith("it has one attention stack, unnamed: leave `stack` out"), info.value


def test_unknown_keywords_name_the_public_function(tmp_path: Path) -> None:
    import qkenergy as qk

    model = plain_model(tmp_path / "m")
    with pytest.raises(
        TypeError,
        match=r"^qk\.analyze\(\) got an unexpected keyword argument 'skip_nonfinit'; did you mean 'skip_nonfinite'\?",
    ):
        qk.analyze(str(model), skip_nonfinit=True)
    with qk.open(str(model)) as opened:
        with pytest.raises(
            TypeError,
            match=r"^Model\.analyze\(\) got an unexpected keyword argument 'fold'; did you mean 'fold_norm'\?",
        ):
            opened.analyze(fold=True)
        with pytest.raises(
            TypeError, match=r"^qk\.analyze\(\) got an unexpected keyword argument 'zzz'; it takes config, "
        ):
            qk.analyze(opened, zzz=1)

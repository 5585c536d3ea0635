"""Quantised safetensors checkpoints: each method against an independent dequantisation.

Every test writes a tiny llama checkpoint (2 layers, 4 query heads, 2 key heads,
head_dim 16, N = 64) whose q_proj / k_proj are stored as the method stores them,
with config.json's quantization_config, and checks that ``analyze`` gives the
symmetric energy of the dequantised weights to 1e-5 relative. The references
are independent of qkenergy's reader: the ``compressed-tensors`` library's own
compressors (which write the tensors too), transformers' FP8 dequantisation,
and, for GPTQ and AWQ (whose libraries need a GPU), packers written here from
the formats' published definitions. Scales span six orders of magnitude between
blocks, so a reader that dropped or misplaced one would fail (checked: the
energy of the unscaled values is far from the reference).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from qkenergy.analysis.analyze import analyze_model
from qkenergy.base.errors import QKEnergyError
from qkenergy.weights import quantization
from qkenergy.weights.checkpoint import open_model

torch = pytest.importorskip("torch")
save_file = pytest.importorskip("safetensors.torch").save_file

H, HKV, n, N, LAYERS = 4, 2, 16, 64, 2
SHAPES = {"q_proj": (H * n, N), "k_proj": (HKV * n, N)}
RTOL = 1e-5


def module(layer: int, proj: str) -> str:
    return f"model.layers.{layer}.self_attn.{proj}"


def write_checkpoint(root: Path, tensors: dict[str, Any], quantization_config: dict[str, Any] | None) -> Path:
    """A llama checkpoint directory holding ``tensors`` (torch tensors) and config.json."""
    root.mkdir(parents=True, exist_ok=True)
    config: dict[str, Any] = {
        "model_type": "llama",
        "hidden_size": N,
        "num_attention_heads": H,
        "num_key_value_heads": HKV,
        "head_dim": n,
        "num_hidden_layers": LAYERS,
        "max_position_embeddings": 128,
        "rope_theta": 10000.0,
    }
    if quantization_config is not None:
        config["quantization_config"] = quantization_config
    (root / "config.json").write_text(json.dumps(config))
    save_file({k: v.contiguous() for k, v in tensors.items()}, str(root / "model.safetensors"))
    return root


def reference_energy(weights: dict[str, np.ndarray]) -> np.ndarray:
    """s = ||S||^2 / ||L||^2 of every head, L = W_K^T W_Q, straight from the definition (float64)."""
    out = []
    for layer in range(LAYERS):
        wq = weights[module(layer, "q_proj")].astype(np.float64).reshape(H, n, N)
        wk = weights[module(layer, "k_proj")].astype(np.float64).reshape(HKV, n, N)
        for h in range(H):
            form = wk[h // (H // HKV)].T @ wq[h]
            sym = (form + form.T) / 2
            out.append(np.sum(sym * sym) / np.sum(form * form))
    return np.array(out)


def check(
    root: Path, dequantised: dict[str, np.ndarray], unscaled: dict[str, np.ndarray] | None, label: str
) -> None:
    """analyze's s equals the reference's; where the scales matter, unscaled values give other s.

    ``unscaled`` None: one scale per tensor, which s does not see (s is invariant to scaling L).
    """
    expected = reference_energy(dequantised)
    if unscaled is not None:
        assert np.max(np.abs(reference_energy(unscaled) / expected - 1)) > 1e-3, "the test could not fail"
    result = analyze_model(str(root), null=False, threads=1)
    np.testing.assert_allclose(result.columns["symmetric_energy"], expected, rtol=RTOL, atol=0)
    assert set(result.columns["quantization"]) == {label}
    assert any(note.startswith(f"weights stored quantised ({label})") for note in result.settings["notes"])
    columns = list(result.columns)
    assert columns[columns.index("qk_norm") + 1] == "quantization"


def spread_scales(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    """Positive scales from 1e-3 to 1e3 (log-uniform): blocks differ by orders of magnitude."""
    return 10.0 ** rng.uniform(-3, 3, size=shape)


# ----------------------------------------------------------------------------- FP8 (fp8, fbgemm_fp8)


def float8_values(rng: np.random.Generator, shape: tuple[int, int]) -> Any:
    return torch.from_numpy(rng.standard_normal(shape).astype(np.float32) * 4).to(torch.float8_e4m3fn)


@pytest.mark.parametrize("block", [[24, 40], [128, 128], None], ids=["partial-blocks", "128x128", "tensor"])
def test_fp8_block_scales_against_transformers(tmp_path: Path, block: list[int] | None) -> None:
    """DeepSeek-V3 / Qwen3-FP8 layout: float8 weight, float32 weight_scale_inv per block (edges partial)."""
    fp8 = pytest.importorskip("transformers.integrations.finegrained_fp8")
    rng = np.random.default_rng(1)
    tensors, dequantised, unscaled = {}, {}, {}
    for layer in range(LAYERS):
        for proj, (rows, cols) in SHAPES.items():
            name = module(layer, proj)
            weight = float8_values(rng, (rows, cols))
            grid = (1, 1) if block is None else (math.ceil(rows / block[0]), math.ceil(cols / block[1]))
            scale = torch.from_numpy(spread_scales(rng, grid).astype(np.float32))
            tensors[name + ".weight"] = weight
            tensors[name + ".weight_scale_inv"] = scale.reshape(()) if block is None else scale
            reference = fp8._dequantize_fp8_weight(weight, scale.double(), block, torch.float64)
            dequantised[name] = reference.numpy()
            unscaled[name] = weight.double().numpy()
    config = {"quant_method": "fp8", "activation_scheme": "dynamic", "weight_block_size": block}
    label = "fp8 e4m3 tensor" if block is None else f"fp8 e4m3 block {block[0]}x{block[1]}"
    one_scale = block is None or (block[0] >= H * n and block[1] >= N)
    check(write_checkpoint(tmp_path, tensors, config), dequantised, None if one_scale else unscaled, label)


def test_fbgemm_fp8_channel_scales(tmp_path: Path) -> None:
    """Meta's FP8 layout: float8 weight and one float32 weight_scale per output row."""
    rng = np.random.default_rng(2)
    tensors, dequantised, unscaled = {}, {}, {}
    for layer in range(LAYERS):
        for proj, (rows, cols) in SHAPES.items():
            name = module(layer, proj)
            weight = float8_values(rng, (rows, cols))
            scale = torch.from_numpy(spread_scales(rng, (rows, 1)).astype(np.float32))
            tensors[name + ".weight"], tensors[name + ".weight_scale"] = weight, scale
            dequantised[name] = (weight.double() * scale.double()).numpy()
            unscaled[name] = weight.double().numpy()
    config = {
        "quant_method": "fbgemm_fp8",
        "activation_scale_ub": 1200.0,
        "modules_to_not_convert": ["lm_head"],
    }
    check(write_checkpoint(tmp_path, tensors, config), dequantised, unscaled, "fbgemm_fp8 e4m3 channel")


# ----------------------------------------------------------------------------- compressed-tensors


CT_CASES = {
    # name: (format, weights args)
    "fp8-tensor": ("float-quantized", {"num_bits": 8, "type": "float", "strategy": "tensor"}),
    "fp8-channel": ("float-quantized", {"num_bits": 8, "type": "float", "strategy": "channel"}),
    "fp8-group": ("float-quantized", {"num_bits": 8, "type": "float", "strategy": "group", "group_size": 16}),
    "fp8-block": (
        "float-quantized",
        {"num_bits": 8, "type": "float", "strategy": "block", "block_structure": [24, 40]},
    ),
    "int8-channel": ("int-quantized", {"num_bits": 8, "type": "int", "strategy": "channel"}),
    "int8-channel-asym": (
        "int-quantized",
        {"num_bits": 8, "type": "int", "strategy": "channel", "symmetric": False},
    ),
    "int4-group": ("pack-quantized", {"num_bits": 4, "type": "int", "strategy": "group", "group_size": 16}),
    "int4-group-asym": (
        "pack-quantized",
        {"num_bits": 4, "type": "int", "strategy": "group", "group_size": 16, "symmetric": False},
    ),
    "int4-channel-asym": (
        "pack-quantized",
        {"num_bits": 4, "type": "int", "strategy": "channel", "symmetric": False},
    ),
    "int8-group-asym": (
        "pack-quantized",
        {"num_bits": 8, "type": "int", "strategy": "group", "group_size": 32, "symmetric": False},
    ),
    "int4-block": (
        "pack-quantized",
        {"num_bits": 4, "type": "int", "strategy": "block", "block_structure": [16, 32]},
    ),
}


def ct_grid(args: Any, rows: int, cols: int) -> tuple[tuple[int, int], tuple[int, int]]:
    """(the scale grid, the block each scale covers) of a compressed-tensors strategy."""
    if args.strategy == "block":
        block = tuple(args.block_structure)
    else:
        block = {"tensor": (rows, cols), "channel": (1, cols), "group": (1, args.group_size)}[args.strategy]
    return (math.ceil(rows / block[0]), math.ceil(cols / block[1])), block


@pytest.mark.parametrize("case", list(CT_CASES))
def test_compressed_tensors_against_the_library(tmp_path: Path, case: str) -> None:
    """The library compresses (it writes the stored tensors) and decompresses (the reference)."""
    ct = pytest.importorskip("compressed_tensors")
    from compressed_tensors.compressors import BaseCompressor
    from compressed_tensors.quantization import QuantizationArgs, QuantizationScheme

    fmt, weights_args = CT_CASES[case]
    args = QuantizationArgs(**weights_args)
    scheme = QuantizationScheme(targets=["Linear"], weights=args)
    compressor = BaseCompressor.get_value_from_registry(fmt)
    rng = np.random.default_rng(3)
    tensors, dequantised, unscaled = {}, {}, {}
    for layer in range(LAYERS):
        for proj, (rows, cols) in SHAPES.items():
            grid, (a, b) = ct_grid(args, rows, cols)
            scale = torch.from_numpy(spread_scales(rng, grid)).to(torch.bfloat16)
            expand = scale.double().repeat_interleave(a, 0)[:rows].repeat_interleave(b, 1)[:, :cols]
            if args.type == "float":
                values = float8_values(rng, (rows, cols)).double()
                zero = None
            else:
                low, high = -(1 << (args.num_bits - 1)), 1 << (args.num_bits - 1)
                values = torch.from_numpy(rng.integers(low, high, (rows, cols))).double()
                zero = (
                    None if args.symmetric else torch.from_numpy(rng.integers(low, high, grid)).to(torch.int8)
                )
            shifted = (
                values
                if zero is None
                else values - zero.double().repeat_interleave(a, 0)[:rows].repeat_interleave(b, 1)[:, :cols]
            )
            state = {"weight": (shifted * expand).float(), "weight_scale": scale}
            if zero is not None:
                state["weight_zero_point"] = zero
            stored = compressor.compress(state, scheme)
            for part, tensor in stored.items():
                tensors[f"{module(layer, proj)}.{part}"] = tensor
            back = dict(stored, weight_scale=stored["weight_scale"].double())
            reference = compressor.decompress(back, scheme)["weight"].double().numpy()
            np.testing.assert_array_equal(reference, shifted.numpy() * expand.numpy())  # the library agrees
            dequantised[module(layer, proj)] = reference
            unscaled[module(layer, proj)] = shifted.numpy()
    config = {
        "quant_method": "compressed-tensors",
        "format": fmt,
        "quantization_status": "compressed",
        "config_groups": {"group_0": {"targets": ["Linear"], "weights": args.model_dump()}},
        "ignore": ["lm_head"],
        "version": ct.__version__,
    }
    label = quantization.parse_quantization({"quantization_config": config}, "c").schemes[0].label()
    one_scale = args.strategy == "tensor"
    check(write_checkpoint(tmp_path, tensors, config), dequantised, None if one_scale else unscaled, label)


def test_compressed_tensors_ignored_attention_is_read_as_stored(tmp_path: Path) -> None:
    """A config that quantises the MLP only (attention in ``ignore``): plain weights, column empty."""
    rng = np.random.default_rng(4)
    tensors, plain = {}, {}
    for layer in range(LAYERS):
        for proj, shape in SHAPES.items():
            weight = rng.standard_normal(shape).astype(np.float32)
            tensors[module(layer, proj) + ".weight"] = torch.from_numpy(weight).to(torch.bfloat16)
            plain[module(layer, proj)] = tensors[module(layer, proj) + ".weight"].double().numpy()
        mlp = f"model.layers.{layer}.mlp.down_proj"
        tensors[mlp + ".weight_packed"] = torch.zeros((N, 8), dtype=torch.int32)
        tensors[mlp + ".weight_scale"] = torch.ones((N, 4), dtype=torch.bfloat16)
    config = {
        "quant_method": "compressed-tensors",
        "format": "pack-quantized",
        "config_groups": {
            "group_0": {
                "targets": ["Linear"],
                "weights": {"num_bits": 4, "strategy": "group", "group_size": 16},
            }
        },
        "ignore": ["lm_head", "re:.*self_attn.*"],
    }
    result = analyze_model(str(write_checkpoint(tmp_path, tensors, config)), null=False, threads=1)
    np.testing.assert_allclose(result.columns["symmetric_energy"], reference_energy(plain), rtol=RTOL)
    assert set(result.columns["quantization"]) == {""}
    assert result.settings["quantization"]["method"] == "compressed-tensors"


# ----------------------------------------------------------------------------- GPTQ and AWQ


def pack_words(fields: np.ndarray, bits: int, axis: int, order: tuple[int, ...] | None = None) -> np.ndarray:
    """Pack unsigned ``bits``-bit fields into int32 words along ``axis``, field k at bits [k*bits, (k+1)*bits).

    ``order``: the entry (within each group of 32/bits) that goes to field k (AWQ's interleaving).
    """
    per = 32 // bits
    moved = np.moveaxis(fields.astype(np.uint64), axis, -1)
    groups = moved.reshape(*moved.shape[:-1], -1, per)
    if order is not None:
        groups = groups[..., list(order)]
    words = np.zeros(groups.shape[:-1], dtype=np.uint64)
    for k in range(per):
        words |= groups[..., k] << np.uint64(k * bits)
    return np.moveaxis(words.astype(np.uint32).view(np.int32), -1, axis)


GPTQ_CASES = {
    # name: (checkpoint_format, bits, group_size, symmetric, act-order)
    "gptq-4bit-sym": ("gptq", 4, 16, True, False),
    "gptq-4bit-asym-act-order": ("gptq", 4, 16, False, True),
    "gptq_v2-4bit-asym-act-order": ("gptq_v2", 4, 16, False, True),
    "gptq_v2-8bit-asym": ("gptq_v2", 8, 32, False, False),
    "gptq-8bit-sym-act-order": ("gptq", 8, 16, True, True),
    "gptq-4bit-one-group": ("gptq", 4, -1, False, False),
    "gptq_v2-2bit-act-order": ("gptq_v2", 2, 16, False, True),
}


@pytest.mark.parametrize("case", list(GPTQ_CASES))
def test_gptq_against_a_packer_from_the_format(tmp_path: Path, case: str) -> None:
    """qweight packs input rows, qzeros output columns (z - 1 in the gptq format), g_idx per input column."""
    fmt, bits, group_size, symmetric, act_order = GPTQ_CASES[case]
    rng = np.random.default_rng(5)
    tensors, dequantised, unscaled = {}, {}, {}
    top = 1 << bits
    for layer in range(LAYERS):
        for proj, (rows, cols) in SHAPES.items():
            size = cols if group_size == -1 else group_size
            groups = cols // size
            g_idx = np.arange(cols) // size
            if act_order:
                g_idx = rng.permutation(g_idx)
            q = rng.integers(0, top, (cols, rows))  # (in, out), as GPTQ stores it
            if symmetric:
                z = np.full((groups, rows), top // 2)
            else:  # the gptq format stores z - 1, so it cannot hold z = 0
                z = rng.integers(1 if fmt == "gptq" else 0, top, (groups, rows))
            scales = spread_scales(rng, (groups, rows)).astype(np.float16)
            stored_z = z - 1 if fmt == "gptq" else z
            name = module(layer, proj)
            tensors[name + ".qweight"] = torch.from_numpy(pack_words(q, bits, axis=0))
            tensors[name + ".qzeros"] = torch.from_numpy(pack_words(stored_z, bits, axis=1))
            tensors[name + ".scales"] = torch.from_numpy(scales)
            tensors[name + ".g_idx"] = torch.from_numpy(g_idx.astype(np.int32))
            shifted = (q - z[g_idx]).astype(np.float64)
            dequantised[name] = (shifted * scales.astype(np.float64)[g_idx]).T
            unscaled[name] = shifted.T
    config = {
        "quant_method": "gptq",
        "bits": bits,
        "group_size": group_size,
        "desc_act": act_order,
        "sym": symmetric,
        "checkpoint_format": fmt,
        "damp_percent": 0.01,
    }
    group = "channel" if group_size == -1 else f"group {group_size}"
    label = f"{fmt} int{bits} {group}" + (" act-order" if act_order else "") + ("" if symmetric else " asym")
    check(write_checkpoint(tmp_path, tensors, config), dequantised, unscaled, label)


AWQ_ORDER = (0, 2, 4, 6, 1, 3, 5, 7)  # AutoAWQ's GEMM packing: field k holds column AWQ_ORDER[k] of each 8


@pytest.mark.parametrize("group_size", [16, -1])
def test_awq_gemm_against_a_packer_from_the_format(tmp_path: Path, group_size: int) -> None:
    """qweight and qzeros pack 8 output columns per int32 in AutoAWQ's interleaved order."""
    rng = np.random.default_rng(6)
    tensors, dequantised, unscaled = {}, {}, {}
    for layer in range(LAYERS):
        for proj, (rows, cols) in SHAPES.items():
            size = cols if group_size == -1 else group_size
            groups = cols // size
            q = rng.integers(0, 16, (cols, rows))
            z = rng.integers(0, 16, (groups, rows))
            scales = spread_scales(rng, (groups, rows)).astype(np.float16)
            name = module(layer, proj)
            tensors[name + ".qweight"] = torch.from_numpy(pack_words(q, 4, axis=1, order=AWQ_ORDER))
            tensors[name + ".qzeros"] = torch.from_numpy(pack_words(z, 4, axis=1, order=AWQ_ORDER))
            tensors[name + ".scales"] = torch.from_numpy(scales)
            g = np.arange(cols) // size
            shifted = (q - z[g]).astype(np.float64)
            dequantised[name] = (shifted * scales.astype(np.float64)[g]).T
            unscaled[name] = shifted.T
    config = {
        "quant_method": "awq",
        "bits": 4,
        "group_size": group_size,
        "zero_point": True,
        "version": "gemm",
    }
    group = "channel" if group_size == -1 else f"group {group_size}"
    check(write_checkpoint(tmp_path, tensors, config), dequantised, unscaled, f"awq gemm int4 {group} asym")


# ----------------------------------------------------------------------------- settings, fingerprints, errors


def gptq_checkpoint(root: Path, config: dict[str, Any] | None, *, drop: str | None = None) -> Path:
    rng = np.random.default_rng(7)
    tensors = {}
    for layer in range(LAYERS):
        for proj, (rows, cols) in SHAPES.items():
            name = module(layer, proj)
            tensors[name + ".qweight"] = torch.from_numpy(pack_words(rng.integers(0, 16, (cols, rows)), 4, 0))
            tensors[name + ".qzeros"] = torch.from_numpy(pack_words(np.full((4, rows), 7), 4, 1))
            tensors[name + ".scales"] = torch.from_numpy(spread_scales(rng, (4, rows)).astype(np.float16))
            if drop is not None:
                del tensors[name + "." + drop]
    return write_checkpoint(root, tensors, config)


GPTQ_CONFIG = {"quant_method": "gptq", "bits": 4, "group_size": 16, "desc_act": False, "sym": True}


def test_settings_and_fingerprints_name_the_stored_parts(tmp_path: Path) -> None:
    result = analyze_model(str(gptq_checkpoint(tmp_path, GPTQ_CONFIG)), null=False, threads=1, layers=[1])
    recorded = result.settings["quantization"]
    assert {k: recorded[k] for k in ("method", "format", "bits", "group_size", "block_size")} == {
        "method": "gptq",
        "format": "gptq",
        "bits": 4,
        "group_size": 16,
        "block_size": None,
    }
    (entry,) = result.settings["model_source"]["files"]
    assert sorted(entry["tensors"]) == [
        f"{module(1, proj)}.{part}"
        for proj in ("k_proj", "q_proj")
        for part in ("qweight", "qzeros", "scales")
    ]
    import hashlib

    from safetensors import safe_open

    # the digest covers the header and exactly the bytes of the stored parts, in file order
    path = tmp_path / "model.safetensors"
    data = path.read_bytes()
    header = 8 + int.from_bytes(data[:8], "little")
    meta = json.loads(data[8:header])
    spans = sorted(meta[t]["data_offsets"] for t in entry["tensors"])
    digest = hashlib.sha256(data[:header] + b"".join(data[header + a : header + b] for a, b in spans))
    assert entry["sha256"] == digest.hexdigest()
    with safe_open(str(path), "np") as f:
        assert set(entry["tensors"]) <= set(f.keys())


def test_plain_checkpoint_has_empty_column_and_null_setting(tmp_path: Path) -> None:
    rng = np.random.default_rng(8)
    tensors = {
        module(layer, proj) + ".weight": torch.from_numpy(rng.standard_normal(shape).astype(np.float32))
        for layer in range(LAYERS)
        for proj, shape in SHAPES.items()
    }
    result = analyze_model(str(write_checkpoint(tmp_path, tensors, None)), null=False, threads=1)
    assert set(result.columns["quantization"]) == {""} and result.settings["quantization"] is None
    assert not any("quantised" in note for note in result.settings["notes"])


@pytest.mark.parametrize(
    ("config", "needles"),
    [
        ({"quant_method": "bitsandbytes", "load_in_4bit": True}, ["'bitsandbytes'", "4-bit"]),
        ({"load_in_8bit": True}, ["'bitsandbytes'", "8-bit"]),
        ({"quant_method": "hqq", "nbits": 4}, ["'hqq'"]),
        ({"quant_method": "eetq", "weights": "int8"}, ["'eetq'"]),
        ({"quant_method": "some-new-method"}, ["'some-new-method'"]),
        ({**GPTQ_CONFIG, "bits": 3}, ["GPTQ bits is 3"]),
        ({**GPTQ_CONFIG, "checkpoint_format": "marlin"}, ["GPTQ checkpoint_format 'marlin'"]),
        ({"quant_method": "awq", "bits": 4, "version": "gemv"}, ["AWQ version 'gemv'"]),
    ],
)
def test_refused_methods_are_one_line_exit_1_nothing_written(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], config: dict[str, Any], needles: list[str]
) -> None:
    from qkenergy import cli

    root = gptq_checkpoint(tmp_path / "model", config)
    out = tmp_path / "heads.csv"
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["analyze", str(root), "-o", str(out), "--samples", "10", "--quiet"])
    err = capsys.readouterr().err
    assert exit_info.value.code == 1
    assert len(err.strip().splitlines()) == 1 and str(root / "config.json") in err, err
    assert all(needle in err for needle in needles), err
    assert not out.exists() and not list(tmp_path.glob("heads*"))


def test_quantised_parts_without_quantization_config(tmp_path: Path) -> None:
    """The issue's GPTQ case: not 'is this a llama checkpoint?' but what is stored and what is missing."""
    with pytest.raises(
        QKEnergyError, match=r"stored quantised \(qweight, qzeros, scales\).*no quantization_config"
    ):
        analyze_model(str(gptq_checkpoint(tmp_path, None)), null=False)


def test_missing_part_is_named(tmp_path: Path) -> None:
    with pytest.raises(QKEnergyError, match=r"missing tensor '.*q_proj.scales'.*qweight, qzeros"):
        analyze_model(str(gptq_checkpoint(tmp_path, GPTQ_CONFIG, drop="scales")), null=False)


def test_other_methods_parts_are_named(tmp_path: Path) -> None:
    config = {"quant_method": "fp8", "weight_block_size": [128, 128]}
    with pytest.raises(QKEnergyError, match=r"stored as qweight, qzeros, scales, not as fp8"):
        analyze_model(str(gptq_checkpoint(tmp_path, config)), null=False)


def test_wrong_scale_grid_is_named(tmp_path: Path) -> None:
    rng = np.random.default_rng(9)
    tensors = {}
    for layer in range(LAYERS):
        for proj, (rows, cols) in SHAPES.items():
            tensors[module(layer, proj) + ".weight"] = float8_values(rng, (rows, cols))
            tensors[module(layer, proj) + ".weight_scale_inv"] = torch.ones((1, 1))
    root = write_checkpoint(tmp_path, tensors, {"quant_method": "fp8", "weight_block_size": [32, 32]})
    with pytest.raises(QKEnergyError, match=r"weight_scale_inv' has shape \[1, 1\], expected \[2, 2\]"):
        analyze_model(str(root), null=False)


def test_source_reads_like_a_tensor_source(tmp_path: Path) -> None:
    with open_model(str(gptq_checkpoint(tmp_path, GPTQ_CONFIG))) as source:
        tensors = source.tensors
        name = module(0, "q_proj") + ".weight"
        assert name in tensors and name in tensors.names
        assert tensors.shape(name) == SHAPES["q_proj"] and tensors.dtype(name) == np.float32
        array = tensors.tensor(name)
        assert array.dtype == np.float32 and array.flags.c_contiguous and not array.flags.writeable
        assert tensors.stored_names(name) == [
            module(0, "q_proj") + p for p in (".qweight", ".qzeros", ".scales")
        ]
        assert source.notes["quantization"]["method"] == "gptq"


def test_unpack_fields_reads_low_bits_first() -> None:
    words = np.array([[0x76543210, -1]], dtype=np.int32)
    assert quantization.unpack_fields(words, 4, axis=1).tolist() == [list(range(8)) + [15] * 8]
    assert quantization.unpack_fields(words, 8, axis=1).tolist() == [
        [0x10, 0x32, 0x54, 0x76, 255, 255, 255, 255]
    ]
    assert quantization.unpack_fields(words.T, 2, axis=0)[:4, 0].tolist() == [0, 0, 1, 0]


def test_products_are_exact_or_rounded_once() -> None:
    """16-bit scales: exact in float32; float32 scales: the exact (float64) product rounded once."""
    rng = np.random.default_rng(10)
    values = rng.integers(-8, 8, (64, 64))
    scale32 = spread_scales(rng, (1, 64)).astype(np.float32) * np.float32(1 + 2**-20)
    got = quantization.dequantize_grid(values, scale32, columns_per_scale=1)
    assert np.array_equal(got, (values * scale32.astype(np.float64)).astype(np.float32))
    scale16 = scale32.astype(np.float16)
    got = quantization.dequantize_grid(values, scale16, columns_per_scale=1)
    assert np.array_equal(got.astype(np.float64), values * scale16.astype(np.float64))
    scale64 = spread_scales(rng, (1, 64)) * (1 + 2**-40)
    got = quantization.dequantize_grid(values, scale64, columns_per_scale=1)
    assert np.array_equal(got, (values * scale64).astype(np.float32))


def test_old_gptq_exports_keep_their_settings_beside_config_json(tmp_path: Path) -> None:
    """AutoGPTQ's quantize_config.json (no quantization_config in config.json) is read too."""
    root = gptq_checkpoint(tmp_path, None)
    side = {"bits": 4, "group_size": 16, "desc_act": False, "sym": True, "true_sequential": True}
    (root / "quantize_config.json").write_text(json.dumps(side))
    with_config = gptq_checkpoint(tmp_path / "with-config", GPTQ_CONFIG)
    expected = analyze_model(str(with_config), null=False, threads=1).columns["symmetric_energy"]
    result = analyze_model(str(root), null=False, threads=1)
    np.testing.assert_array_equal(result.columns["symmetric_energy"], expected)
    assert result.settings["quantization"]["config"].startswith(str(root / "quantize_config.json"))


def test_a_mapping_of_quantised_tensors_reads_as_the_checkpoint(tmp_path: Path) -> None:
    from safetensors.numpy import load_file

    root = gptq_checkpoint(tmp_path, GPTQ_CONFIG)
    config = json.loads((root / "config.json").read_text())
    arrays = load_file(str(root / "model.safetensors"))
    in_memory = analyze_model(arrays, config=config, null=False, threads=1)
    from_file = analyze_model(str(root), null=False, threads=1)
    np.testing.assert_array_equal(
        in_memory.columns["symmetric_energy"], from_file.columns["symmetric_energy"]
    )
    assert list(in_memory.columns["quantization"]) == list(from_file.columns["quantization"])


def test_the_labels_in_docs_are_the_ones_written() -> None:
    """docs/models.md shows these cells of the quantization column: they are what the code writes."""
    docs = (Path(__file__).resolve().parents[2] / "docs" / "models.md").read_text(encoding="utf-8")
    configs = [
        {"quant_method": "fp8", "weight_block_size": [128, 128]},
        {"quant_method": "gptq", "bits": 4, "group_size": 128, "desc_act": True, "sym": False,
         "checkpoint_format": "gptq_v2"},
        {"quant_method": "awq", "bits": 4, "group_size": 128, "zero_point": True, "version": "gemm"},
        {"quant_method": "compressed-tensors", "format": "pack-quantized", "config_groups": {"group_0": {
            "targets": ["Linear"], "weights": {"num_bits": 4, "strategy": "group", "group_size": 128}}}},
        {"quant_method": "compressed-tensors", "format": "float-quantized", "config_groups": {"group_0": {
            "targets": ["Linear"], "weights": {"num_bits": 8, "type": "float", "strategy": "channel"}}}},
    ]  # fmt: skip
    for config in configs:
        spec = quantization.parse_quantization({"quantization_config": config}, "config.json")
        assert spec is not None
        label = spec.schemes[0].label() if spec.schemes else spec.label()
        assert f"`{label}`" in docs, label


@pytest.mark.parametrize(
    ("config", "needle"),
    [
        ("fp8", "expected an object"),
        ({"bits": 4}, "'quant_method' is null"),
        ({"quant_method": "fp8", "weight_block_size": [128]}, "'weight_block_size'"),
        ({"quant_method": "fp8", "weight_block_size": [0, 128]}, "'weight_block_size'"),
        ({"quant_method": "fp8", "modules_to_not_convert": "lm_head"}, "'modules_to_not_convert'"),
        ({"quant_method": "gptq", "bits": "4"}, "field 'bits' is '4'"),
        ({"quant_method": "gptq", "bits": 4, "group_size": 0}, "'group_size' is 0"),
        ({"quant_method": "gptq", "bits": 4, "desc_act": "yes"}, "'desc_act'"),
        ({"quant_method": "awq", "bits": 8}, "AWQ bits is 8"),
        ({"quant_method": "compressed-tensors", "config_groups": []}, "'config_groups'"),
        ({"quant_method": "compressed-tensors", "config_groups": {"g": {"weights": 4}}}, "'weights'"),
        (
            {
                "quant_method": "compressed-tensors",
                "config_groups": {"g": {"targets": "Linear", "weights": {}}},
            },
            "'targets'",
        ),
        ({"quant_method": "compressed-tensors", "transform_config": {"t": {}}}, "transform_config"),
        (
            {"quant_method": "compressed-tensors", "sparsity_config": {"format": "sparse-24-bitmask"}},
            "sparsity",
        ),
    ],
)
def test_malformed_configs_are_one_line_naming_the_field(config: object, needle: str) -> None:
    with pytest.raises(QKEnergyError) as error:
        quantization.parse_quantization({"quantization_config": config}, "cfg/config.json")
    message = str(error.value)
    assert message.startswith("cfg/config.json") and "\n" not in message and needle in message, message


def test_packed_words_must_be_32_bit(tmp_path: Path) -> None:
    root = gptq_checkpoint(tmp_path, GPTQ_CONFIG)
    from safetensors.numpy import load_file
    from safetensors.numpy import save_file as save_numpy

    arrays = load_file(str(root / "model.safetensors"))
    arrays = {k: (v.astype(np.int64) if k.endswith(".qweight") else v) for k, v in arrays.items()}
    save_numpy(arrays, str(root / "model.safetensors"))
    with pytest.raises(QKEnergyError, match=r"qweight' has dtype I64; expected I32 \(packed words\)"):
        analyze_model(str(root), null=False)


# ----------------------------------------------------------------------------- mutated checkpoints

RAW_CODES = {"I32": 4, "I64": 8, "F16": 2, "BF16": 2, "F32": 4, "F8_E4M3": 1, "U8": 1, "I8": 1}


def raw_parts(
    method: str, rng: np.random.Generator
) -> tuple[dict[str, tuple[str, list[int]]], dict[str, Any]]:
    """A valid quantised layout as (dtype code, shape) per tensor, and its quantization_config."""
    parts: dict[str, tuple[str, list[int]]] = {}
    for layer in range(LAYERS):
        for proj, (rows, cols) in SHAPES.items():
            m = module(layer, proj)
            if method == "gptq":
                parts |= {m + ".qweight": ("I32", [cols // 8, rows]), m + ".qzeros": ("I32", [4, rows // 8])}
                parts |= {m + ".scales": ("F16", [4, rows]), m + ".g_idx": ("I32", [cols])}
            elif method == "awq":
                parts |= {m + ".qweight": ("I32", [cols, rows // 8]), m + ".qzeros": ("I32", [4, rows // 8])}
                parts |= {m + ".scales": ("F16", [4, rows])}
            elif method == "fp8":
                parts |= {m + ".weight": ("F8_E4M3", [rows, cols]), m + ".weight_scale_inv": ("F32", [2, 2])}
            else:
                parts |= {m + ".weight_packed": ("I32", [rows, cols // 8]), m + ".weight_shape": ("I64", [2])}
                parts |= {
                    m + ".weight_scale": ("BF16", [rows, 4]),
                    m + ".weight_zero_point": ("I32", [rows // 8, 4]),
                }
    weights = {"num_bits": 4, "strategy": "group", "group_size": 16, "symmetric": False}
    configs = {
        "gptq": {"quant_method": "gptq", "bits": 4, "group_size": 16, "desc_act": True},
        "awq": {"quant_method": "awq", "bits": 4, "group_size": 16, "version": "gemm"},
        "fp8": {"quant_method": "fp8", "weight_block_size": [32, 32]},
        "ct": {
            "quant_method": "compressed-tensors",
            "format": "pack-quantized",
            "config_groups": {"group_0": {"targets": ["Linear"], "weights": weights}},
        },
    }
    return parts, configs[method]


def write_raw(
    root: Path, parts: dict[str, tuple[str, list[int]]], config: dict[str, Any], rng: np.random.Generator
) -> None:
    """A safetensors file of random bytes in the given dtypes and shapes (weight_shape and g_idx kept sane)."""
    root.mkdir(parents=True, exist_ok=True)
    header, blobs, offset = {}, [], 0
    for name, (code, shape) in parts.items():
        size = RAW_CODES[code] * math.prod(shape)
        blob = rng.integers(0, 256, size, dtype=np.uint8).tobytes()
        if name.endswith(".weight_shape") and code == "I64" and shape == [2]:
            rows = H * n if ".q_proj" in name else HKV * n
            blob = np.array([rows, N], dtype="<i8").tobytes()
        if name.endswith(".g_idx") and code == "I32":
            blob = (np.arange(math.prod(shape)) % 4).astype("<i4").tobytes()
        header[name] = {"dtype": code, "shape": shape, "data_offsets": [offset, offset + size]}
        blobs.append(blob)
        offset += size
    raw = json.dumps(header).encode()
    (root / "model.safetensors").write_bytes(len(raw).to_bytes(8, "little") + raw + b"".join(blobs))
    llama = {"model_type": "llama", "hidden_size": N, "num_attention_heads": H, "num_key_value_heads": HKV}
    llama |= {"head_dim": n, "num_hidden_layers": LAYERS, "quantization_config": config}
    (root / "config.json").write_text(json.dumps(llama))


@settings(max_examples=60, suppress_health_check=list(HealthCheck))
@given(st.sampled_from(["gptq", "awq", "fp8", "ct"]), st.data())
def test_mutated_checkpoints_read_or_fail_in_one_line(
    tmp_path_factory: pytest.TempPathFactory, method: str, data: Any
) -> None:
    """A part dropped, retyped or reshaped, a config field replaced: a table or one QKEnergyError line."""
    rng = np.random.default_rng(11)
    parts, config = raw_parts(method, rng)
    name = data.draw(st.sampled_from(sorted(parts)))
    mutation = data.draw(st.sampled_from(["drop", "dtype", "shape", "config", "none"]))
    if mutation == "drop":
        del parts[name]
    elif mutation == "dtype":
        parts[name] = (data.draw(st.sampled_from(sorted(RAW_CODES))), parts[name][1])
    elif mutation == "shape":
        shape = data.draw(st.lists(st.integers(0, 70), min_size=0, max_size=3))
        parts[name] = (parts[name][0], shape)
    elif mutation == "config":
        key = data.draw(st.sampled_from(sorted(config)))
        config[key] = data.draw(
            st.none()
            | st.booleans()
            | st.integers(-2, 200)
            | st.text(max_size=6)
            | st.lists(st.integers(-1, 64), max_size=3)
        )
    root = tmp_path_factory.mktemp("mutated")
    write_raw(root, parts, config, rng)
    try:
        result = analyze_model(str(root), null=False, threads=1)
    except QKEnergyError as error:
        assert "\n" not in str(error)
    else:
        assert len(result.columns["symmetric_energy"]) == LAYERS * H


def test_a_survey_unit_fingerprints_the_parts_analyze_read(tmp_path: Path) -> None:
    """The survey's skip-if-unchanged check sees the same stored parts as analyze's fingerprint."""
    from qkenergy.surveys.units import files_fingerprint, layer_fingerprint

    root = gptq_checkpoint(tmp_path, GPTQ_CONFIG)
    files = analyze_model(str(root), null=False, threads=1, layers=[1]).settings["model_source"]["files"]
    assert layer_fingerprint(str(root), 1, fold_norm=False) == files_fingerprint(files)


# A small DeepSeek-V3 latent attention (4 heads), every projection FP8 in 8 x 16 blocks (also tests/hub_repos.py).
LATENT_RANKS = {"q": 16, "kv": 8}
LATENT_BLOCK = [8, 16]
LATENT_SHAPES = {
    "q_a_proj": (16, N),
    "q_b_proj": (4 * (8 + 4), 16),
    "kv_a_proj_with_mqa": (8 + 4, N),
    "kv_b_proj": (4 * (8 + 8), 8),
}
LATENT_CONFIG = {
    "model_type": "deepseek_v3",
    "hidden_size": N,
    "num_attention_heads": 4,
    "num_key_value_heads": 4,
    "num_hidden_layers": LAYERS,
    "q_lora_rank": 16,
    "kv_lora_rank": 8,
    "qk_nope_head_dim": 8,
    "qk_rope_head_dim": 4,
    "v_head_dim": 8,
    "rope_theta": 10000.0,
    "max_position_embeddings": 128,
}


def test_deepseek_v3_fp8_latent_attention_reads_as_its_dequantised_weights(tmp_path: Path) -> None:
    """DeepSeek-V3's own layout: every projection of latent attention in FP8 with 8 x 16 blocks."""
    fp8 = pytest.importorskip("transformers.integrations.finegrained_fp8")
    rng = np.random.default_rng(12)
    rank_q, rank_kv = LATENT_RANKS["q"], LATENT_RANKS["kv"]
    shapes, block = LATENT_SHAPES, LATENT_BLOCK
    stored, plain = {}, {}
    for layer in range(LAYERS):
        prefix = f"model.layers.{layer}.self_attn."
        for proj, (rows, cols) in shapes.items():
            weight = float8_values(rng, (rows, cols))
            grid = (math.ceil(rows / block[0]), math.ceil(cols / block[1]))
            scale = torch.from_numpy(spread_scales(rng, grid).astype(np.float32))
            stored[prefix + proj + ".weight"], stored[prefix + proj + ".weight_scale_inv"] = weight, scale
            dequantised = fp8._dequantize_fp8_weight(weight, scale.double(), block, torch.float64)
            plain[prefix + proj + ".weight"] = dequantised.float()  # exact: fp8 x f32 rounded once
        for norm, size in (("q_a_layernorm", rank_q), ("kv_a_layernorm", rank_kv)):
            gain = torch.from_numpy(rng.uniform(0.5, 2, size).astype(np.float32))
            stored[prefix + norm + ".weight"] = plain[prefix + norm + ".weight"] = gain
    config = LATENT_CONFIG
    quantized = tmp_path / "fp8"
    with_quantization = {**config, "quantization_config": {"quant_method": "fp8", "weight_block_size": block}}
    quantized.mkdir()
    (quantized / "config.json").write_text(json.dumps(with_quantization))
    save_file(stored, str(quantized / "model.safetensors"))
    reference = tmp_path / "dequantised"
    reference.mkdir()
    (reference / "config.json").write_text(json.dumps(config))
    save_file(plain, str(reference / "model.safetensors"))
    got = analyze_model(str(quantized), null=False, threads=1)
    expected = analyze_model(str(reference), null=False, threads=1)
    np.testing.assert_array_equal(got.columns["symmetric_energy"], expected.columns["symmetric_energy"])
    assert set(got.columns["quantization"]) == {"fp8 e4m3 block 8x16"}


@pytest.mark.parametrize("suffix", [".csv", ".parquet", ".json"])
def test_the_column_and_settings_survive_a_written_table(tmp_path: Path, suffix: str) -> None:
    from qkenergy.formats.tables import read_table, write_table

    result = analyze_model(
        str(gptq_checkpoint(tmp_path / "m", GPTQ_CONFIG)), null=False, threads=1, layers=[0]
    )
    path = write_table(result.heads, tmp_path / f"heads{suffix}", settings=result.settings)
    back = read_table(path)
    assert list(back["quantization"]) == ["gptq int4 group 16"] * H
    assert back.attrs["settings"]["quantization"]["method"] == "gptq"


def test_gptq_format_all_ones_zero_field_reads_as_two_to_the_bits() -> None:
    """checkpoint_format gptq stores z - 1: a stored 15 (4 bits) is z = 16, as ExLlama and vLLM read it."""
    q = np.arange(16).reshape(16, 1).repeat(8, axis=1)  # (in = 16, out = 8)
    qweight = pack_words(q, 4, axis=0)
    qzeros = pack_words(np.full((1, 8), 15), 4, axis=1)
    scales = np.ones((1, 8), np.float16)
    v1 = quantization.dequantize_gptq(qweight, qzeros, scales, None, bits=4, group_size=-1, zero_offset=1)
    v2 = quantization.dequantize_gptq(qweight, qzeros, scales, None, bits=4, group_size=-1, zero_offset=0)
    assert np.array_equal(v1, (q - 16).T.astype(np.float32)) and np.array_equal(
        v2, (q - 15).T.astype(np.float32)
    )

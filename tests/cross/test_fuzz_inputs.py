"""Structured fuzzing of what a checkpoint holds: headers, config.json, shard indexes (issue 6, item 8).

Hypothesis generates valid checkpoints and mutates them (a field replaced by any JSON value, a key
dropped, bytes flipped, inserted or cut); whatever comes out, opening and analysing it either works
or raises QKEnergyError with one line: never another exception. The null-law cache files have their
own mutation test in test_null_cache.py. Derandomized (conftest profile) with fixed max_examples, so
this file runs in seconds. For open-ended, coverage-guided fuzzing of the parsers see fuzz/README.md.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from qkenergy.analysis.analyze import analyze_model
from qkenergy.base.errors import QKEnergyError

Q = "model.layers.{i}.self_attn.q_proj.weight"
K = "model.layers.{i}.self_attn.k_proj.weight"
CONFIG = {
    "model_type": "llama",
    "num_hidden_layers": 2,
    "num_attention_heads": 2,
    "num_key_value_heads": 1,
    "hidden_size": 8,
    "head_dim": 2,
}
SHAPES = {Q.format(i=i): [4, 8] for i in range(2)} | {K.format(i=i): [2, 8] for i in range(2)}

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=8,
)
FUZZ = settings(
    max_examples=60, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow]
)


def header_dict() -> dict[str, object]:
    header: dict[str, object] = {}
    offset = 0
    for name, shape in SHAPES.items():
        size = 4 * shape[0] * shape[1]
        header[name] = {"dtype": "F32", "shape": list(shape), "data_offsets": [offset, offset + size]}
        offset += size
    return header


def safetensors_bytes(header: object, raw_header: bytes | None = None) -> bytes:
    raw = json.dumps(header).encode() if raw_header is None else raw_header
    data = np.random.default_rng(0).standard_normal(sum(4 * a * b for a, b in SHAPES.values()))
    return struct.pack("<Q", len(raw)) + raw + data.astype("<f4").tobytes()


def mutate_json(data: st.DataObject, value: object) -> object:
    """Replace, drop or add one entry somewhere inside ``value`` (dicts and lists)."""
    if isinstance(value, dict) and value and data.draw(st.booleans()):
        key = data.draw(st.sampled_from(sorted(value)))
        kind = data.draw(st.sampled_from(["replace", "drop", "recurse"]))
        out = dict(value)
        if kind == "replace":
            out[key] = data.draw(json_values)
        elif kind == "drop":
            del out[key]
        else:
            out[key] = mutate_json(data, value[key])
        return out
    if isinstance(value, list) and value and data.draw(st.booleans()):
        i = data.draw(st.integers(0, len(value) - 1))
        out = list(value)
        out[i] = data.draw(json_values) if data.draw(st.booleans()) else mutate_json(data, value[i])
        return out
    if isinstance(value, dict):
        return {**value, data.draw(st.text(max_size=6)): data.draw(json_values)}
    return data.draw(json_values)


def mutate_bytes(data: st.DataObject, blob: bytes) -> bytes:
    out = bytearray(blob)
    for _ in range(data.draw(st.integers(1, 3))):
        at = data.draw(st.integers(0, max(0, len(out) - 1)))
        kind = data.draw(st.sampled_from(["flip", "cut", "insert", "overwrite"]))
        if kind == "flip" and out:
            out[at] ^= 1 << data.draw(st.integers(0, 7))
        elif kind == "cut":
            del out[at : at + data.draw(st.integers(1, 64))]
        elif kind == "insert":
            out[at:at] = data.draw(st.binary(min_size=1, max_size=16))
        else:
            chunk = data.draw(st.sampled_from([b"[[[[", b"9" * 40, b"-1", b"1e999", b'"', b"{}", b"\xff"]))
            out[at : at + len(chunk)] = chunk
    return bytes(out)


def one_line_or_works(root: Path) -> None:
    try:
        analyze_model(root, null=False)
    except QKEnergyError as error:
        assert "\n" not in str(error) and len(str(error)) < 2000, str(error)


def checkpoint(tmp: Path, model: bytes, config: bytes, index: bytes | None = None) -> Path:
    root = Path(tmp)
    for old in root.iterdir():
        old.unlink()
    (root / "config.json").write_bytes(config)
    if index is None:
        (root / "model.safetensors").write_bytes(model)
    else:
        (root / "shard-0.safetensors").write_bytes(model)
        (root / "model.safetensors.index.json").write_bytes(index)
    return root


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("fuzz")


def test_the_unmutated_checkpoint_works(workdir: Path) -> None:
    index = json.dumps({"weight_map": dict.fromkeys(SHAPES, "shard-0.safetensors")}).encode()
    for idx in (None, index):
        root = checkpoint(workdir, safetensors_bytes(header_dict()), json.dumps(CONFIG).encode(), idx)
        assert len(analyze_model(root, null=False).heads) == 4


@FUZZ
@given(data=st.data())
def test_mutated_header_fields(workdir: Path, data: st.DataObject) -> None:
    header = mutate_json(data, header_dict())
    one_line_or_works(checkpoint(workdir, safetensors_bytes(header), json.dumps(CONFIG).encode()))


@FUZZ
@given(data=st.data())
def test_mutated_header_bytes(workdir: Path, data: st.DataObject) -> None:
    raw = mutate_bytes(data, json.dumps(header_dict()).encode())
    model = (
        safetensors_bytes(None, raw)
        if data.draw(st.booleans())
        else mutate_bytes(data, safetensors_bytes(header_dict()))
    )
    one_line_or_works(checkpoint(workdir, model, json.dumps(CONFIG).encode()))


@FUZZ
@given(data=st.data())
def test_mutated_configs(workdir: Path, data: st.DataObject) -> None:
    if data.draw(st.booleans()):
        config = json.dumps(mutate_json(data, CONFIG)).encode()
    else:
        config = mutate_bytes(data, json.dumps(CONFIG).encode())
    one_line_or_works(checkpoint(workdir, safetensors_bytes(header_dict()), config))


@FUZZ
@given(data=st.data())
def test_mutated_indexes(workdir: Path, data: st.DataObject) -> None:
    index = {"metadata": {"total_size": 256}, "weight_map": dict.fromkeys(SHAPES, "shard-0.safetensors")}
    if data.draw(st.booleans()):
        raw = json.dumps(mutate_json(data, index)).encode()
    else:
        raw = mutate_bytes(data, json.dumps(index).encode())
    one_line_or_works(checkpoint(workdir, safetensors_bytes(header_dict()), json.dumps(CONFIG).encode(), raw))

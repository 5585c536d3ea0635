"""Tests of the lazy, validated safetensors reader (files built in tmp_path)."""

from __future__ import annotations

import json
import os
import struct
import time
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np
import pytest
from safetensors.numpy import save_file

from qkenergy.base.errors import QKEnergyError
from qkenergy.base.small_floats import BFLOAT16, as_float, as_ml_dtypes
from qkenergy.weights import safetensors_io
from qkenergy.weights.safetensors_io import SafetensorsFile, TensorSource

NAME = "encoder.layer.0.attention.self.query.weight"


def write_raw(path: Path, header: Any, data: bytes = b"", *, length: int | None = None) -> Path:
    """Write a safetensors-like file with an arbitrary header (may be invalid)."""
    raw = header if isinstance(header, bytes) else json.dumps(header).encode()
    n = len(raw) if length is None else length
    path.write_bytes(struct.pack("<Q", n) + raw + data)
    return path


def one_line_error(path: Path, *needles: str) -> str:
    """Open ``path``, expect a one-line QKEnergyError naming the file and ``needles``."""
    with pytest.raises(QKEnergyError) as info:
        SafetensorsFile(path)
    msg = str(info.value)
    assert "\n" not in msg
    assert path.name in msg
    for needle in needles:
        assert needle in msg, msg
    return msg


# --- round trips -------------------------------------------------------------------


@pytest.mark.parametrize(
    "dtype", [np.float64, np.float32, np.float16, np.int64, np.int32, np.int16, np.int8, np.uint8, np.bool_]
)
def test_round_trip_numpy_dtypes(tmp_path: Path, dtype: type) -> None:
    rng = np.random.default_rng(0)
    arrays = {
        "a": (rng.standard_normal((3, 5)) * 50).astype(dtype),
        "b.c": (rng.standard_normal(7) * 50).astype(dtype),
        "scalar": np.array(3).astype(dtype),
        "empty": np.zeros((0, 4), dtype),
    }
    save_file(arrays, str(tmp_path / "x.safetensors"))
    with SafetensorsFile(tmp_path / "x.safetensors") as f:
        assert sorted(f.names) == sorted(arrays)
        for name, a in arrays.items():
            got = f.tensor(name)
            assert got.dtype == a.dtype and got.shape == a.shape == f.shape(name)
            np.testing.assert_array_equal(got, a)


def test_round_trip_bf16_matches_ml_dtypes(tmp_path: Path) -> None:
    x = np.random.default_rng(1).standard_normal((4, 6)).astype(np.float32)
    bf = x.astype(ml_dtypes.bfloat16)
    save_file({"w": bf}, str(tmp_path / "bf.safetensors"))
    with SafetensorsFile(tmp_path / "bf.safetensors") as f:
        got = f.tensor("w")
        # the stored bits, widened exactly where used (no ml_dtypes import in the reader)
        assert got.dtype == BFLOAT16 and f.dtype("w") == BFLOAT16
        assert f.info("w").dtype == "BF16"
        np.testing.assert_array_equal(got.view(np.uint16), bf.view(np.uint16))
        np.testing.assert_array_equal(as_float(got), bf.astype(np.float32))
        np.testing.assert_array_equal(as_ml_dtypes(got), bf)


def test_bf16_written_by_torch(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    from safetensors.torch import save_file as save_torch

    t = torch.randn(5, 3).to(torch.bfloat16)
    save_torch({"w": t}, str(tmp_path / "t.safetensors"))
    with SafetensorsFile(tmp_path / "t.safetensors") as f:
        np.testing.assert_array_equal(as_float(f.tensor("w")), t.float().numpy())


def test_float8_and_own_writer_with_padding(tmp_path: Path) -> None:
    x = np.array([0.5, -2.0, 448.0], dtype=ml_dtypes.float8_e4m3fn)
    header = {
        "__metadata__": {"format": "pt"},
        "f8": {"dtype": "F8_E4M3", "shape": [3], "data_offsets": [0, 3]},
    }
    raw = json.dumps(header).encode() + b"    "  # the format allows trailing spaces
    write_raw(tmp_path / "f8.safetensors", raw, x.tobytes())
    with SafetensorsFile(tmp_path / "f8.safetensors") as f:
        assert f.metadata == {"format": "pt"}
        np.testing.assert_array_equal(as_ml_dtypes(f.tensor("f8")), x)
        np.testing.assert_array_equal(as_float(f.tensor("f8")), [0.5, -2.0, 448.0])


# --- laziness ----------------------------------------------------------------------


def test_tensor_is_a_read_only_private_array(tmp_path: Path) -> None:
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    save_file({"a": a, "b": a + 1}, str(tmp_path / "x.safetensors"))
    f = SafetensorsFile(tmp_path / "x.safetensors")
    got = f.tensor("a")
    np.testing.assert_array_equal(got, a)
    assert got.flags.owndata and not got.flags.writeable  # a checked read, not a view of a memory map
    with pytest.raises(ValueError):
        got[0, 0] = 1.0
    f.close()
    np.testing.assert_array_equal(got, a)  # stays valid after close


def test_truncated_while_read_is_one_line_not_sigbus(tmp_path: Path) -> None:
    """The file shrinks between the header check and the read (another process truncates it)."""
    x = np.arange(4096, dtype=np.float32).reshape(64, 64)
    path = tmp_path / "w.safetensors"
    save_file({"a": x, "b": x + 1}, str(path))
    with TensorSource([path]) as source:
        np.testing.assert_array_equal(source.tensor("a"), x)  # the descriptor is open now
        os.truncate(path, os.path.getsize(path) - 1000)
        with pytest.raises(QKEnergyError) as info:
            source.tensor("b")
    msg = str(info.value)
    assert "\n" not in msg and path.name in msg and "'b'" in msg and "truncated while in use" in msg


def test_split_reads_same_arrays_and_one_line_errors(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Inside split_reads a tensor is read in parts, each by a thread: the same array; a short part, one line."""
    monkeypatch.setattr(
        safetensors_io, "_SPLIT_BYTES", 4096
    )  # parts of a page, so that a small tensor splits
    x = np.random.default_rng(0).standard_normal((64, 100)).astype(np.float32)  # 25,600 bytes: 3 parts
    path = tmp_path / "w.safetensors"
    save_file({"a": x, "b": x + 1}, str(path))
    with TensorSource([path]) as source:
        with source.split_reads(3):
            np.testing.assert_array_equal(source.tensor("a"), x)
            os.truncate(path, os.path.getsize(path) - 1000)  # the last part of "b", read by a helper thread
            with pytest.raises(QKEnergyError) as info:
                source.tensor("b")
        assert source.files[0].read_threads == 1  # one thread again after the block
    msg = str(info.value)
    assert "\n" not in msg and path.name in msg and "'b'" in msg and "truncated while in use" in msg


def test_replaced_file_is_not_mixed_in(tmp_path: Path) -> None:
    """A file swapped for another after opening is not read: reads use the descriptor opened first."""
    x = np.arange(16, dtype=np.float32)
    path = tmp_path / "w.safetensors"
    save_file({"a": x, "b": x + 1}, str(path))
    with TensorSource([path]) as source:
        source.tensor("a")
        save_file({"a": -x, "b": -x}, str(tmp_path / "other.safetensors"))
        os.replace(tmp_path / "other.safetensors", path)
        np.testing.assert_array_equal(source.tensor("b"), x + 1)


def test_huge_tensor_opens_instantly(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # 16 GiB declared tensor in a sparse file: opening reads the header only; reading the tensor
    # (a private copy) is refused at once when it exceeds the memory limit, here set to 1 GiB.
    from qkenergy.base import errors

    monkeypatch.setattr(errors, "memory_limit", lambda: 1 << 30)
    n = 1 << 16
    nbytes = n * n * 4
    path = write_raw(
        tmp_path / "huge.safetensors",
        {
            "big": {"dtype": "F32", "shape": [n, n], "data_offsets": [0, nbytes]},
            "small": {"dtype": "F32", "shape": [2], "data_offsets": [nbytes, nbytes + 8]},
        },
    )
    with open(path, "r+b") as fh:
        fh.truncate(path.stat().st_size + nbytes + 8)
    start = time.perf_counter()
    with TensorSource([path]) as source:
        assert source.shape("big") == (n, n)
        with pytest.raises(QKEnergyError, match="tensor 'big' would need 16 GiB of memory"):
            source.tensor("big")
        np.testing.assert_array_equal(source.tensor("small"), [0.0, 0.0])
    assert time.perf_counter() - start < 1.0


# --- corrupt files -----------------------------------------------------------------


def valid_header() -> dict[str, Any]:
    return {NAME: {"dtype": "F32", "shape": [4, 4], "data_offsets": [0, 64]}}


def test_file_too_short(tmp_path: Path) -> None:
    (tmp_path / "short.safetensors").write_bytes(b"\x01\x02")
    one_line_error(tmp_path / "short.safetensors", "too short")


def test_header_length_larger_than_file(tmp_path: Path) -> None:
    path = write_raw(tmp_path / "m.safetensors", valid_header(), bytes(64), length=10_000)
    msg = one_line_error(path, "header length is larger than")
    assert "10000" not in msg  # the number read from the file is never echoed


def test_header_length_absurd(tmp_path: Path) -> None:
    path = write_raw(tmp_path / "m.safetensors", b"{}", length=2**62)
    msg = one_line_error(path, "absurd header length")
    assert str(2**62) not in msg


def test_pickle_bytes_are_not_a_header(tmp_path: Path) -> None:
    path = tmp_path / "m.safetensors"
    path.write_bytes(b"PK\x03\x04" + bytes(100))  # a zip (torch.save) file
    one_line_error(path, "not a safetensors file")


def test_invalid_json(tmp_path: Path) -> None:
    path = write_raw(tmp_path / "m.safetensors", b'{"a": [1, 2', bytes(8))
    one_line_error(path, "not valid UTF-8 JSON")


def test_invalid_utf8(tmp_path: Path) -> None:
    path = write_raw(tmp_path / "m.safetensors", b'{"\xff": 1}')
    one_line_error(path, "not valid UTF-8 JSON")


@pytest.mark.parametrize("header", [[1, 2], "x", 3])
def test_header_not_a_dict(tmp_path: Path, header: Any) -> None:
    path = write_raw(tmp_path / "m.safetensors", header)
    one_line_error(path, "must be a JSON object")


def test_entry_not_a_dict(tmp_path: Path) -> None:
    path = write_raw(tmp_path / "m.safetensors", {NAME: [0, 1]})
    one_line_error(path, repr(NAME), "must be an object")


@pytest.mark.parametrize("dtype", ["F4", "Q8", None, 32, ["F32"], {"F32": 1}, True])
def test_unknown_dtype(tmp_path: Path, dtype: Any) -> None:
    header = valid_header()
    header[NAME]["dtype"] = dtype
    path = write_raw(tmp_path / "m.safetensors", header, bytes(64))
    one_line_error(path, repr(NAME), "dtype", "expected one of")


@pytest.mark.parametrize("shape", [[4, -4], [4.0, 4], "4x4", [True, 4], None, [[4], 4], [4, {"4": 4}]])
def test_bad_shape(tmp_path: Path, shape: Any) -> None:
    header = valid_header()
    header[NAME]["shape"] = shape
    path = write_raw(tmp_path / "m.safetensors", header, bytes(64))
    one_line_error(path, repr(NAME), "field 'shape'", "non-negative integer")


@pytest.mark.parametrize("offsets", [[64, 0], [0], [0, 64, 1], [-1, 63], [0, "64"], None])
def test_bad_offsets(tmp_path: Path, offsets: Any) -> None:
    header = valid_header()
    header[NAME]["data_offsets"] = offsets
    path = write_raw(tmp_path / "m.safetensors", header, bytes(64))
    one_line_error(path, repr(NAME), "data_offsets", "[begin, end]")


def test_offsets_outside_file(tmp_path: Path) -> None:
    header = valid_header()
    header[NAME]["data_offsets"] = [64, 128]
    path = write_raw(tmp_path / "m.safetensors", header, bytes(64))
    one_line_error(path, repr(NAME), "[64, 128]", "beyond the 64-byte data section")


def test_byte_range_inconsistent_with_dtype_and_shape(tmp_path: Path) -> None:
    header = {NAME: {"dtype": "F32", "shape": [384, 384], "data_offsets": [0, 100]}}
    path = write_raw(tmp_path / "model.safetensors", header, bytes(100))
    msg = one_line_error(path, repr(NAME))
    assert msg.endswith(
        f"tensor '{NAME}' has data_offsets [0, 100] (100 bytes) but F32 [384, 384] needs 589824 bytes"
    )


def test_truncated_file(tmp_path: Path) -> None:
    save_file(
        {"a": np.ones((8, 8), np.float32), "b": np.ones(4, np.float32)}, str(tmp_path / "m.safetensors")
    )
    path = tmp_path / "m.safetensors"
    path.write_bytes(path.read_bytes()[:-5])
    one_line_error(path, "beyond", "truncated")


def test_overlapping_tensors(tmp_path: Path) -> None:
    header = {
        "a": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]},
        "b": {"dtype": "F32", "shape": [4], "data_offsets": [8, 24]},
    }
    path = write_raw(tmp_path / "m.safetensors", header, bytes(24))
    one_line_error(path, "'a'", "'b'", "overlap")


def test_bad_metadata(tmp_path: Path) -> None:
    header = valid_header() | {"__metadata__": {"format": 1}}
    path = write_raw(tmp_path / "m.safetensors", header, bytes(64))
    one_line_error(path, "__metadata__")


def test_name_with_newline_stays_one_line(tmp_path: Path) -> None:
    header = {"evil\nname": {"dtype": "F32", "shape": [2], "data_offsets": [0, 4]}}
    path = write_raw(tmp_path / "m.safetensors", header, bytes(4))
    one_line_error(path, "evil\\nname")


def test_file_changed_after_open(tmp_path: Path) -> None:
    save_file({"a": np.ones(4, np.float32)}, str(tmp_path / "m.safetensors"))
    f = SafetensorsFile(tmp_path / "m.safetensors")
    with open(tmp_path / "m.safetensors", "ab") as fh:
        fh.write(b"xx")
    with pytest.raises(QKEnergyError, match="changed size"):
        f.tensor("a")


# --- names and shards ----------------------------------------------------------------


def test_missing_tensor_names_file_and_suggests(tmp_path: Path) -> None:
    save_file({NAME: np.ones((2, 2), np.float32)}, str(tmp_path / "m.safetensors"))
    with SafetensorsFile(tmp_path / "m.safetensors") as f, pytest.raises(QKEnergyError) as info:
        f.tensor(NAME.replace("query", "qeury"))
    msg = str(info.value)
    assert "m.safetensors" in msg and "qeury" in msg and f"did you mean {NAME!r}" in msg


def test_tensor_source_over_shards(tmp_path: Path) -> None:
    save_file({"a": np.ones(2, np.float32)}, str(tmp_path / "s1.safetensors"))
    save_file({"b": np.zeros((2, 3), np.float16)}, str(tmp_path / "s2.safetensors"))
    with TensorSource([tmp_path / "s1.safetensors", tmp_path / "s2.safetensors"]) as src:
        assert set(src.names) == {"a", "b"} and "a" in src and len(src) == 2
        assert src.file_of("b").path.name == "s2.safetensors"
        assert src.shape("b") == (2, 3) and src.dtype("b") == np.float16
        np.testing.assert_array_equal(src.tensor("a"), [1, 1])
        with pytest.raises(QKEnergyError, match="2 shards.*no tensor 'c'"):
            src.tensor("c")


def test_tensor_source_duplicate_across_shards(tmp_path: Path) -> None:
    save_file({"a": np.ones(2, np.float32)}, str(tmp_path / "s1.safetensors"))
    save_file({"a": np.ones(2, np.float32)}, str(tmp_path / "s2.safetensors"))
    with pytest.raises(QKEnergyError) as info:
        TensorSource([tmp_path / "s1.safetensors", tmp_path / "s2.safetensors"])
    msg = str(info.value)
    assert "'a'" in msg and "s1.safetensors" in msg and "s2.safetensors" in msg


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(QKEnergyError, match="nope.safetensors: cannot read"):
        SafetensorsFile(tmp_path / "nope.safetensors")


def test_release_keeps_arrays_valid(tmp_path: Path) -> None:
    x = np.random.default_rng(2).standard_normal((256, 1024)).astype(np.float32)  # 1 MiB
    save_file({"w": x}, str(tmp_path / "w.safetensors"))
    with TensorSource([tmp_path / "w.safetensors"]) as source:
        got = source.tensor("w")
        source.release()
        np.testing.assert_array_equal(got, x)


def test_prefetch_reads_named_tensors_without_changing_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from qkenergy.weights import safetensors_io

    monkeypatch.setattr(safetensors_io, "_PREFETCH_BYTES", 24)  # several reads per tensor
    a = np.arange(100, dtype=np.float32).reshape(10, 10)
    save_file({"a": a, "b": a[:3].copy()}, str(tmp_path / "m.safetensors"))
    with TensorSource([tmp_path / "m.safetensors"]) as source:
        source.prefetch(["a", "b"])
        np.testing.assert_array_equal(source.tensor("a"), a)
        with pytest.raises(QKEnergyError, match="no tensor 'c'"):
            source.prefetch(["c"])

"""GGUF headers bounded by what they can hold: sizes past the file or the 100 MB header bound refused
at once, arrays of keys qkenergy does not read skipped by length, the keys it reads still checked.

Each file is written by hand (struct) so that its sizes can lie; the long ones are sparse. The work
done is counted through ``fetch``, which :func:`read_header` calls before every read (a remote
file's mirror): the bytes it asks for, and how many reads.
"""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from qkenergy.base.errors import QKEnergyError
from qkenergy.weights.gguf_io import GGUFArray, read_header


def text(s: str) -> bytes:
    return struct.pack("<Q", len(s)) + s.encode()


def key(name: str, code: int, value: bytes) -> bytes:
    return text(name) + struct.pack("<I", code) + value


def array(item: int, count: int, items: bytes = b"") -> bytes:
    return struct.pack("<IQ", item, count) + items


def gguf(path: Path, keys: list[bytes], size: int = 0) -> Path:
    """A file with these keys and no tensors, extended (sparse) to ``size`` bytes."""
    with open(path, "wb") as fh:
        fh.write(b"GGUF" + struct.pack("<IQQ", 3, 0, len(keys)) + b"".join(keys))
        fh.truncate(max(size, fh.tell()))
    return path


def read(path: Path) -> tuple[dict[str, object], list[tuple[int, int]]]:
    """The fields of the header, and the byte ranges read to get them."""
    spans: list[tuple[int, int]] = []
    fields = read_header(path, lambda begin, end: spans.append((begin, end))).fields
    return fields, spans


def test_a_huge_unused_fixed_size_array_is_skipped_by_length(tmp_path: Path) -> None:
    """80 MB of float32 scores: one seek; the key after it still read."""
    count = 20_000_000
    head = key("tokenizer.ggml.scores", 9, array(6, count))
    tail = key("llama.context_length", 4, struct.pack("<I", 7))
    path = tmp_path / "scores.gguf"
    with open(path, "wb") as fh:
        fh.write(b"GGUF" + struct.pack("<IQQ", 3, 0, 2) + head)
        fh.seek(4 * count, 1)
        fh.write(tail)
    fields, spans = read(path)
    assert fields["tokenizer.ggml.scores"] == GGUFArray("float32", count)
    assert fields["llama.context_length"] == 7
    assert sum(end - begin for begin, end in spans) <= 2 * (64 << 10)


def test_unused_arrays_are_skipped_unchecked_used_ones_kept_and_checked(tmp_path: Path) -> None:
    types = key("tokenizer.ggml.token_type", 9, array(7, 3, bytes([0, 1, 2])))  # bool 2: never read
    merges = key("tokenizer.ggml.merges", 9, array(8, 2, text("a") + b"\1\0\0\0\0\0\0\0\xff"))
    pattern = key("gemma3.attention.sliding_window_pattern", 9, array(7, 3, bytes([1, 1, 0])))
    fields, _ = read(gguf(tmp_path / "short.gguf", [types, merges, pattern]))
    assert fields["tokenizer.ggml.token_type"] == GGUFArray("bool", 3)
    assert fields["tokenizer.ggml.merges"] == GGUFArray("string", 2)
    assert fields["gemma3.attention.sliding_window_pattern"] == (True, True, False)
    bad = key("gemma3.attention.names", 9, array(8, 1, b"\1\0\0\0\0\0\0\0\xff"))
    with pytest.raises(
        QKEnergyError, match=r"bad.gguf: item 0 of key 'gemma3.attention.names' is not UTF-8 text"
    ):
        read(gguf(tmp_path / "bad.gguf", [bad]))
    odd = key("general.alignment", 4, struct.pack("<I", 3))
    with pytest.raises(
        QKEnergyError, match=r"odd.gguf: key 'general.alignment' is 3; expected a power of two"
    ):
        read(gguf(tmp_path / "odd.gguf", [odd]))


def test_2_to_the_29_empty_strings_are_refused_at_once(tmp_path: Path) -> None:
    """The issue's file: 2^29 u64 lengths (4 GiB) fit the 8 GiB file but not a header."""
    tokens = key("tokenizer.ggml.tokens", 9, array(8, 1 << 29))
    path = gguf(tmp_path / "vocab.gguf", [tokens], size=8 << 30)
    with pytest.raises(QKEnergyError) as info:
        read(path)
    message = str(info.value)
    assert message.startswith(
        f"{path}: key 'tokenizer.ggml.tokens' (536870912 items, at least 4294967296 bytes)"
    )
    assert "runs past byte 100000000, the bound on a GGUF header" in message and "\n" not in message
    spans: list[tuple[int, int]] = []
    with pytest.raises(QKEnergyError):
        read_header(path, lambda begin, end: spans.append((begin, end)))
    assert spans == [(0, 64 << 10)]  # the first read only


@pytest.mark.parametrize(("item", "width"), [(6, 4), (8, 8)])
def test_an_array_longer_than_the_file_is_refused_at_once(tmp_path: Path, item: int, width: int) -> None:
    path = gguf(tmp_path / "short.gguf", [key("tokenizer.ggml.scores", 9, array(item, 1000))])
    size = path.stat().st_size
    with pytest.raises(
        QKEnergyError, match=rf"short.gguf: the file ends \({size} bytes\) inside key 'tokenizer"
    ):
        read(path)
    with pytest.raises(
        QKEnergyError, match=rf"\(1000 (\w+ )?items, (at least )?{1000 * width} bytes\); truncated"
    ):
        read(path)


def test_a_walked_string_array_is_read_in_large_pieces_and_bounded(tmp_path: Path) -> None:
    """100,000 tokens (2 MB) in a dozen reads, not one read per 64 KiB (32); strings past the bound refused."""
    words = [f"token{k:08d}" for k in range(100_000)]
    tokens = key("tokenizer.ggml.tokens", 9, array(8, len(words), b"".join(map(text, words))))
    fields, spans = read(gguf(tmp_path / "vocab.gguf", [tokens, key("llama.block_count", 4, b"\2\0\0\0")]))
    assert fields["tokenizer.ggml.tokens"] == GGUFArray("string", 100_000)
    assert fields["llama.block_count"] == 2
    assert len(spans) <= 12 and sum(end - begin for begin, end in spans) <= 2 * len(tokens) + (64 << 10)
    # ten strings of 15 MB each (sparse): skipped by length, refused where they pass the bound
    path = tmp_path / "long.gguf"
    with open(path, "wb") as fh:
        fh.write(b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + key("tokenizer.chat_templates", 9, array(8, 10)))
        for _ in range(10):
            fh.write(struct.pack("<Q", 15 << 20))
            fh.seek(15 << 20, 1)
        fh.truncate()
    spans = []
    with pytest.raises(
        QKEnergyError, match=r"long.gguf: item 6 of key 'tokenizer.chat_templates' runs past byte 100000000"
    ):
        read_header(path, lambda begin, end: spans.append((begin, end)))
    assert sum(end - begin for begin, end in spans) <= 8 * (64 << 10)

"""The null-law disk cache: anything but our own file is a miss (recomputed, replaced), never a crash or hang."""

from __future__ import annotations

import io
import os
import struct
import warnings
import zipfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from qkenergy.analysis import null_cache
from qkenergy.analysis.nullspec import NullSpec
from qkenergy.math import nulls

N_SMALL, SAMPLES, SEED = (1, 3), 300, 0


@pytest.fixture(scope="module")
def law() -> nulls.NullLaw:
    return nulls.null_law(*N_SMALL, samples=SAMPLES, seed=SEED)


def _path(root: Path) -> Path:
    return null_cache.null_cache_path(root, NullSpec(samples=SAMPLES, seed=SEED), *N_SMALL)


def _cached(root: Path) -> nulls.NullLaw:
    return null_cache.null_law(NullSpec(samples=SAMPLES, seed=SEED), *N_SMALL, cache_dir=root)


def _assert_miss_then_replaced(root: Path, law: nulls.NullLaw) -> None:
    """The planted file is ignored (the law is recomputed) and replaced by a valid cache file."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = _cached(root)
    np.testing.assert_array_equal(got.values, law.values)
    assert _path(root).is_file() and not _path(root).is_symlink()
    np.testing.assert_array_equal(null_cache.load_cached(_path(root), law.names, SAMPLES), law.values)


def _npz(members: dict[str, bytes], compression: int = zipfile.ZIP_STORED) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression) as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    return buffer.getvalue()


def _npy(array: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    np.save(buffer, array, allow_pickle=False)
    return buffer.getvalue()


def _pickled_npy() -> bytes:
    buffer = io.BytesIO()
    np.save(buffer, np.array([object()], dtype=object), allow_pickle=True)
    return buffer.getvalue()


def _members(law: nulls.NullLaw, **override: bytes) -> dict[str, bytes]:
    members = {
        "values.npy": _npy(law.values),
        "names.npy": _npy(np.array(law.names, dtype=np.str_)),
        "version.npy": _npy(np.int64(null_cache.CACHE_FORMAT_VERSION)),
    }
    members.update(override)
    return members


def test_round_trip_and_the_cache_is_what_is_read(tmp_path: Path, law: nulls.NullLaw) -> None:
    first = _cached(tmp_path)
    np.testing.assert_array_equal(first.values, law.values)
    files = sorted(os.listdir(tmp_path))
    assert files == [_path(tmp_path).name]
    planted = law.values.copy()
    planted[0, 0] = 0.123
    assert null_cache.save_cached(_path(tmp_path), planted, law.names)
    np.testing.assert_array_equal(_cached(tmp_path).values, planted)
    # other keys get other files
    null_cache.null_law(NullSpec(samples=SAMPLES, seed=SEED + 1), *N_SMALL, cache_dir=tmp_path)
    assert len(os.listdir(tmp_path)) == 2


def _header_announcing(count: int) -> bytes:
    """A .npy of float64 whose header announces ``count`` rows of the right width, with no data."""
    header = f"{{'descr': '<f8', 'fortran_order': False, 'shape': ({count}, 25), }}".encode()
    header += b" " * (63 - (10 + len(header)) % 64) + b"\n"
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header


BAD_FILES = {
    "garbage": lambda law: b"not an npz",
    "empty": lambda law: b"",
    "object array (a pickle inside)": lambda law: _npz(_members(law, **{"values.npy": _pickled_npy()})),
    "wrong shape": lambda law: _npz(_members(law, **{"values.npy": _npy(law.values[:-1])})),
    "wrong rank": lambda law: _npz(_members(law, **{"values.npy": _npy(law.values.ravel())})),
    "float32 values": lambda law: _npz(_members(law, **{"values.npy": _npy(law.values.astype(np.float32))})),
    "big-endian values": lambda law: _npz(_members(law, **{"values.npy": _npy(law.values.astype(">f8"))})),
    "Fortran order": lambda law: _npz(_members(law, **{"values.npy": _npy(np.asfortranarray(law.values))})),
    "other statistic names": lambda law: _npz(
        _members(law, **{"names.npy": _npy(np.array(law.names[::-1], dtype=np.str_))})
    ),
    "other version": lambda law: _npz(_members(law, **{"version.npy": _npy(np.int64(1))})),
    "header announcing 1e15 elements": lambda law: _npz(
        _members(law, **{"values.npy": _header_announcing(10**15 // 25)})
    ),
    "extra member": lambda law: _npz({**_members(law), "extra.npy": _npy(np.zeros(1))}),
    "missing member": lambda law: _npz({k: v for k, v in _members(law).items() if k != "version.npy"}),
    "compressed members": lambda law: _npz(_members(law), zipfile.ZIP_DEFLATED),
    "zip bomb": lambda law: _npz(
        _members(law, **{"values.npy": _npy(np.zeros((SAMPLES, 25)))[:128] + b"\0" * (64 << 20)}),
        zipfile.ZIP_DEFLATED,
    ),
    "trailing bytes": lambda law: _npz(_members(law)) + b"\0" * (1 << 17),
    "truncated": lambda law: _npz(_members(law))[:-100],
}


@pytest.mark.parametrize("case", list(BAD_FILES))
def test_foreign_cache_files_are_misses(tmp_path: Path, law: nulls.NullLaw, case: str) -> None:
    path = _path(tmp_path)
    path.write_bytes(BAD_FILES[case](law))
    assert null_cache.load_cached(path, law.names, SAMPLES) is None
    _assert_miss_then_replaced(tmp_path, law)


@pytest.mark.parametrize(
    "kind", ["fifo", "symlink to fifo", "symlink to device", "directory", "dangling symlink"]
)
def test_special_files_are_misses_and_never_block(tmp_path: Path, law: nulls.NullLaw, kind: str) -> None:
    path = _path(tmp_path)
    if kind == "fifo":
        os.mkfifo(path)  # a blocking open would hang here for ever
    elif kind == "symlink to fifo":
        os.mkfifo(tmp_path / "fifo")
        path.symlink_to(tmp_path / "fifo")
    elif kind == "symlink to device":
        path.symlink_to("/dev/zero")  # endless bytes: must not be read
    elif kind == "dangling symlink":
        path.symlink_to(tmp_path / "nowhere")
    else:
        path.mkdir()
    assert null_cache.load_cached(path, law.names, SAMPLES) is None
    if kind == "directory":  # cannot be replaced by a file: one warning, the law is still returned
        with pytest.warns(null_cache.NullCacheWarning, match="not writable"):
            np.testing.assert_array_equal(_cached(tmp_path).values, law.values)
    else:
        _assert_miss_then_replaced(tmp_path, law)


def test_unwritable_cache_directory_warns_once_and_goes_on(tmp_path: Path, law: nulls.NullLaw) -> None:
    (tmp_path / "a-file").write_text("")
    cache = tmp_path / "a-file" / "cache"  # a directory that cannot exist, even for root
    with pytest.warns(null_cache.NullCacheWarning) as record:
        got = null_cache.null_law(NullSpec(samples=SAMPLES, seed=SEED), *N_SMALL, cache_dir=cache)
    np.testing.assert_array_equal(got.values, law.values)
    assert len(record) == 1 and "a-file" in str(record[0].message)
    assert sorted(os.listdir(tmp_path)) == ["a-file"]  # no temporary file left


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only directories")
def test_read_only_cache_directory(tmp_path: Path, law: nulls.NullLaw) -> None:
    cache = tmp_path / "ro"
    cache.mkdir()
    cache.chmod(0o555)
    try:
        with pytest.warns(null_cache.NullCacheWarning):
            got = _cached(cache)
        np.testing.assert_array_equal(got.values, law.values)
        assert os.listdir(cache) == []
    finally:
        cache.chmod(0o755)


# Structured fuzzing of the cache file: any mutation of a valid file reads back either as exactly the
# values written or as a miss, never as an exception. Bounded and derandomized (conftest profile).
@settings(max_examples=60)
@given(data=st.data())
def test_mutated_cache_files_are_exact_or_misses(
    tmp_path_factory: pytest.TempPathFactory, law: nulls.NullLaw, data: st.DataObject
) -> None:
    original = _npz(_members(law))
    blob = bytearray(original)
    for _ in range(data.draw(st.integers(1, 4), label="mutations")):
        kind = data.draw(st.sampled_from(["flip", "truncate", "insert", "delete", "overwrite"]))
        at = data.draw(st.integers(0, max(0, len(blob) - 1)))
        if kind == "flip" and blob:
            blob[at] ^= 1 << data.draw(st.integers(0, 7))
        elif kind == "truncate":
            del blob[at:]
        elif kind == "insert":
            blob[at:at] = data.draw(st.binary(min_size=1, max_size=16))
        elif kind == "delete":
            del blob[at : at + data.draw(st.integers(1, 16))]
        else:
            chunk = data.draw(st.binary(min_size=1, max_size=8))
            blob[at : at + len(chunk)] = chunk
    path = tmp_path_factory.mktemp("cache") / "law.npz"
    path.write_bytes(bytes(blob))
    got = null_cache.load_cached(path, law.names, SAMPLES)
    if got is not None:
        np.testing.assert_array_equal(got, law.values)


# The names the cache gave these laws before the keys derived from a NullSpec (computed with the
# loose-parameter functions of the previous release): a cache written then is read now.
OLD_NAMES = [
    ((8, 32), NullSpec(samples=100), None, "null-v2-gaussian-n8-N32-K100-seed0-1bb4ca92ae90d9c4.npz"),
    ((8, 32), NullSpec(samples=100), "null", "null-v2-gaussian-n8-N32-K100-seed0-49d4d94a0c8d6154.npz"),
    ((64, 384), NullSpec(seed=7), "null", "null-v2-gaussian-n64-N384-K2000-seed7-8f18b22e49bc9729.npz"),
]


@pytest.mark.parametrize(("shape", "spec", "names", "expected"), OLD_NAMES)
def test_the_spec_keys_name_the_files_older_caches_hold(
    shape: tuple[int, int], spec: NullSpec, names: str | None, expected: str, tmp_path: Path
) -> None:
    drawn = nulls.NULL_STATISTICS if names else None
    assert null_cache.null_cache_path(tmp_path, spec, *shape, drawn).name == expected
    # the kind and the rotation draws do not change the Gaussian law, nor its file
    other = NullSpec(spec.samples, spec.seed, "both", rotation_samples=30)
    assert null_cache.null_cache_path(tmp_path, other, *shape, drawn).name == expected


def test_layer_laws_keep_their_names() -> None:
    spec = NullSpec(samples=100)
    assert null_cache.layer_null_cache_path("c", spec, (2, 2), 6, 48).name == (
        "null-v2-layer-n12-N48-K100-seed0-7efb9e6a98c7d6b5.npz"
    )
    assert null_cache.layer_null_cache_path("c", NullSpec(samples=300, seed=5), (1, 0, 3), 4, 32).name == (
        "null-v2-layer-n8-N32-K300-seed5-f762381875fbe859.npz"
    )


def test_a_law_cached_under_its_old_name_is_served(law: nulls.NullLaw, tmp_path: Path) -> None:
    """A file saved under the name the previous release computed is a hit, not drawn again."""
    spec = NullSpec(samples=SAMPLES, seed=SEED)
    planted = law.values + 1.0  # not what a fresh draw gives: a hit returns exactly these
    old_name = tmp_path / "null-v2-gaussian-n1-N3-K300-seed0-53e58472ba885c10.npz"
    assert null_cache.save_cached(old_name, planted, law.names)
    np.testing.assert_array_equal(null_cache.null_law(spec, *N_SMALL, cache_dir=tmp_path).values, planted)

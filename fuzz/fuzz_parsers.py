"""Coverage-guided fuzzing (atheris / libFuzzer) of every reader of outside input.

The contract checked on every input: the reader accepts the bytes or raises QKEnergyError with a
one-line message; any other exception (or a hang, or a crash) is a finding. The first input byte
picks the target, by its value modulo 16:

- even: a safetensors file (8-byte length + header + data, the length taken from the input or
  made consistent with it);
- 1, 3: a config.json read through its quantization_config and the architecture layouts;
- 5, 7, 9: a results table given to plot and report (CSV, JSON, Parquet: ``read_table``);
- 11: a survey manifest (TOML); 13: a layout file (TOML);
- 15: by the next byte modulo 3, a survey ledger (sqlite: opened, units and done files read), a
  text manifest, or the refs/main of a Hugging Face cache folder (the snapshot it resolves to must
  lie in the folder's snapshots/).

See fuzz/README.md for how to run it.
"""

from __future__ import annotations

import os
import shutil
import struct
import sys
import tempfile
from pathlib import Path

import atheris

with atheris.instrument_imports(include=["qkenergy"]):
    from qkenergy.base.errors import QKEnergyError
    from qkenergy.base.json_input import parse_object
    from qkenergy.formats.tables import read_table
    from qkenergy.surveys.ledger import Ledger, done_files
    from qkenergy.surveys.manifest import read_manifest
    from qkenergy.weights.architecture import architecture
    from qkenergy.weights.checkpoint import _cached_snapshot
    from qkenergy.weights.layout_toml import load_layout
    from qkenergy.weights.quantization import parse_quantization
    from qkenergy.weights.safetensors_io import SafetensorsFile

_DIR = Path(tempfile.mkdtemp(prefix="qk-fuzz-", dir="/dev/shm" if os.path.isdir("/dev/shm") else None))
_PATH = str(_DIR / "model.safetensors")
_REPO = _DIR / "models--org--fuzz"
_COMMIT = "c" * 40
(_REPO / "snapshots" / _COMMIT).mkdir(parents=True)
(_REPO / "refs").mkdir()


def _check(error: QKEnergyError) -> None:
    if "\n" in str(error):
        raise AssertionError(f"message of more than one line: {str(error)!r}")


def _file(name: str, body: bytes) -> Path:
    path = _DIR / name
    for stale in _DIR.glob(name + "*"):  # a ledger's -wal and -shm files too
        stale.unlink()
    path.write_bytes(body)
    return path


def _safetensors(target: int, body: bytes) -> None:
    if target % 4 == 0:  # consistent length: the fuzzer explores the JSON itself
        split = len(body) if target % 8 == 0 else len(body) * 3 // 4
        body = struct.pack("<Q", split) + body
    with open(_PATH, "wb") as fh:
        fh.write(body)
    with SafetensorsFile(_PATH) as f:
        for name in f.names[:4]:
            f.tensor(name)


def _ledger(body: bytes) -> None:
    path = _file("ledger.sqlite", body)
    done_files(path)
    with Ledger(path) as ledger:
        ledger.units()


def _cache_ref(body: bytes) -> None:
    (_REPO / "refs" / "main").write_bytes(body)
    chosen = _cached_snapshot(_REPO)
    if chosen.resolve().parent != (_REPO / "snapshots").resolve():
        raise AssertionError(f"resolved outside snapshots/: {chosen}")


def test_one_input(data: bytes) -> None:
    if not data:
        return
    target, body = data[0], data[1:]
    kind = target % 16
    try:
        if kind % 2 == 0:
            _safetensors(target, body)
        elif kind in (1, 3):
            config = parse_object(body, "config.json", "the config")
            parse_quantization(config, "config.json")  # its quantization_config, if any
            architecture(config, "config.json")
        elif kind in (5, 7, 9):
            read_table(_file({5: "t.csv", 7: "t.json", 9: "t.parquet"}[kind], body))
        elif kind == 11:
            read_manifest(_file("m.toml", body))
        elif kind == 13:
            load_layout(_file("layout.toml", body))
        elif body:
            choice, rest = body[0] % 3, body[1:]
            if choice == 0:
                _ledger(rest)
            elif choice == 1:
                read_manifest(_file("m.txt", rest))
            else:
                _cache_ref(rest)
    except QKEnergyError as error:
        _check(error)


def main() -> None:
    atheris.Setup(sys.argv, test_one_input)
    try:
        atheris.Fuzz()
    finally:
        shutil.rmtree(_DIR, ignore_errors=True)


if __name__ == "__main__":
    main()

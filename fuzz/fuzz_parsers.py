"""Coverage-guided fuzzing (atheris / libFuzzer) of the safetensors header and config.json parsers.

The contract checked on every input: the parser accepts the bytes or raises QKEnergyError with a
one-line message; any other exception (or a hang, or a crash) is a finding. The first input byte
picks the target: even = a safetensors file (8-byte length + header + data, the length taken from
the input or made consistent with it), odd = a config.json read through its quantization_config
and the architecture layouts. See fuzz/README.md for how to run it.
"""

from __future__ import annotations

import os
import struct
import sys
import tempfile

import atheris

with atheris.instrument_imports(include=["qkenergy"]):
    from qkenergy.base.errors import QKEnergyError
    from qkenergy.weights.architecture import architecture
    from qkenergy.weights.json_input import parse_object
    from qkenergy.weights.quantization import parse_quantization
    from qkenergy.weights.safetensors_io import SafetensorsFile

_DIR = tempfile.mkdtemp(prefix="qk-fuzz-", dir="/dev/shm" if os.path.isdir("/dev/shm") else None)
_PATH = os.path.join(_DIR, "model.safetensors")


def _check(error: QKEnergyError) -> None:
    if "\n" in str(error):
        raise AssertionError(f"message of more than one line: {str(error)!r}")


def test_one_input(data: bytes) -> None:
    if not data:
        return
    target, body = data[0], data[1:]
    try:
        if target % 2 == 0:
            if target % 4 == 0:  # consistent length: the fuzzer explores the JSON itself
                split = len(body) if target % 8 == 0 else len(body) * 3 // 4
                body = struct.pack("<Q", split) + body
            with open(_PATH, "wb") as fh:
                fh.write(body)
            with SafetensorsFile(_PATH) as f:
                for name in f.names[:4]:
                    f.tensor(name)
        else:
            config = parse_object(body, "config.json", "the config")
            parse_quantization(config, "config.json")  # its quantization_config, if any
            architecture(config, "config.json")
    except QKEnergyError as error:
        _check(error)


def main() -> None:
    atheris.Setup(sys.argv, test_one_input)
    atheris.Fuzz()


if __name__ == "__main__":
    main()

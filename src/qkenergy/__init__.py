"""qkenergy: symmetric and skew energy of attention heads against exact random baselines."""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"

# Heavy parts load on first use, so that `import qkenergy` stays cheap.
_LAZY = {
    "analyze_model": "qkenergy.analysis.analyze",
    "survey": "qkenergy.survey",
    "load_survey": "qkenergy.survey.dataset",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        module = importlib.import_module(_LAZY[name])
        # qkenergy.survey is a callable package: the package itself runs a survey
        return module if name == "survey" else getattr(module, name)
    raise AttributeError(f"module 'qkenergy' has no attribute {name!r}")

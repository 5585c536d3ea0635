"""qkenergy: symmetric and skew energy of attention heads against exact random baselines.

``import qkenergy as qk``::

    model = qk.open()                  # the embedded all-MiniLM-L6-v2 (or a path, hub id, model)
    head = model.head(2, 3)            # weights, Gram matrix, spectra, statistics by column name
    law = head.null()                  # the head's null law of s: mean, std, sf, cdf, ppf, pvalue
    result = qk.analyze(model)         # every head against its null laws
    print(result.summary())            # the terminal summary; result.figure("symmetric_profiles")
    result.write("minilm.parquet")     # and qk.read("minilm.parquet") gives it back
    print(qk.explain("columns"))       # the documentation by topic; qk.explain() lists the topics

Everything loads on first use, so that ``import qkenergy`` stays cheap.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from qkenergy.base.version import __version__ as __version__

# Public name -> the module that defines it, imported on first use.
_LAZY = {
    "open": "qkenergy.api.model",
    "Model": "qkenergy.api.model",
    "Head": "qkenergy.api.head",
    "analyze": "qkenergy.api.model",
    "read": "qkenergy.api.model",
    "Analysis": "qkenergy.api.results",
    "baseline": "qkenergy.api.baseline",
    "Baseline": "qkenergy.api.baseline",
    "verify": "qkenergy.api.verification",
    "Verification": "qkenergy.api.verification",
    "lobes": "qkenergy.api.lobes",
    "LobeDeparture": "qkenergy.api.lobes",
    "layouts": "qkenergy.api.layouts",
    "Layouts": "qkenergy.api.layouts",
    "coverage": "qkenergy.api.layouts",
    "explain": "qkenergy.api.explain",
    "Coverage": "qkenergy.api.layouts",
    "Law": "qkenergy.math.laws",
    "NullLaw": "qkenergy.math.nulls",
    "NullSpec": "qkenergy.analysis.nullspec",
    "QKEnergyError": "qkenergy.base.errors",
    "analyze_model": "qkenergy.analysis.analyze",
    "survey": "qkenergy.api.survey",
    "Survey": "qkenergy.api.survey",
    "open_survey": "qkenergy.api.survey",
    "write_report": "qkenergy.api.survey",  # not "report": the qkenergy.report package
    "TypeRule": "qkenergy.analysis.type_rule",
    "load_survey": "qkenergy.surveys.dataset",
    "Tracker": "qkenergy.training.tracker",
}

__all__ = sorted([*_LAZY, "__version__"])

if TYPE_CHECKING:  # pragma: no cover
    from typing import Any


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value  # later lookups skip this function
        return value
    raise AttributeError(f"module 'qkenergy' has no attribute {name!r}")


def __dir__() -> list[str]:
    return list(__all__)

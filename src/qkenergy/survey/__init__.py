"""Surveys: many models analysed in one restartable Dask run (``qkenergy survey``).

``qkenergy.survey(MANIFEST, OUT, ...)`` runs a survey (this package is callable:
it is :func:`qkenergy.survey.engine.survey`); ``qkenergy.load_survey(OUT)``
reads its results. Modules: manifest (the model list), units (what a worker
runs), dataset (the Parquet output), ledger (sqlite3 state), engine (the run).
"""

from __future__ import annotations

import sys
import types
from typing import Any

from qkenergy.survey.dataset import load_survey
from qkenergy.survey.engine import SurveyRun, survey

__all__ = ["SurveyRun", "load_survey", "survey"]


class _CallableModule(types.ModuleType):
    """``qkenergy.survey`` is both this package and the function that runs a survey."""

    def __call__(self, *args: Any, **kwargs: Any) -> SurveyRun:
        return survey(*args, **kwargs)


sys.modules[__name__].__class__ = _CallableModule

"""Surveys: many models analysed in one restartable Dask run (``qkenergy survey``).

:func:`qkenergy.surveys.engine.survey` runs a survey (``qkenergy.survey(MANIFEST, OUT, ...)``
is the same run, returning a :class:`qkenergy.api.survey.Survey`); ``load_survey(OUT)``
reads its results. Modules: manifest
(the model list), units (what a worker runs), dataset (the Parquet output), ledger
(sqlite3 state), engine (the run).
"""

from __future__ import annotations

from qkenergy.surveys.dataset import load_survey
from qkenergy.surveys.engine import SurveyRun, survey

__all__ = ["SurveyRun", "load_survey", "survey"]

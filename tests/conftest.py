"""Shared test set-up."""

import pytest
from hypothesis import settings

# Property tests draw the same examples on every run (CI included), so a
# failure is reproducible and never depends on the day's random draw.
settings.register_profile("qkenergy", derandomize=True, deadline=None)
settings.load_profile("qkenergy")


@pytest.fixture(scope="session")
def survey_frames(tmp_path_factory: pytest.TempPathFactory):
    """(heads, layers, models) of MiniLM and a toy training run, shaped like a survey's (survey_data.py)."""
    from tests.survey_data import survey_tables

    cache = tmp_path_factory.getbasetemp() / "qkenergy-null-cache"  # shared with the other modules
    return survey_tables(tmp_path_factory.mktemp("survey-checkpoints"), cache)


@pytest.fixture(autouse=True)
def tracebacks_for_bugs(monkeypatch: pytest.MonkeyPatch) -> None:
    # The CLI turns unexpected exceptions into one line; in tests a bug must show its traceback.
    monkeypatch.setenv("QKENERGY_DEBUG", "1")

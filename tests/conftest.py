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


@pytest.fixture
def loopback_hub(tmp_path_factory: pytest.TempPathFactory):
    """A started loopback Hugging Face Hub (tests/loopback_hub.py) that huggingface_hub points at.

    HF_ENDPOINT and huggingface_hub's constants name it, every Hugging Face cache is under a fresh
    temporary folder, no token is set and offline mode is off; sockets may connect to 127.0.0.1
    only. Add repositories with ``loopback_hub.add_repo("org/name", folder)``.
    """
    from tests.loopback_hub import serve_hub

    with serve_hub(tmp_path_factory.mktemp("hf-home")) as hub:
        yield hub

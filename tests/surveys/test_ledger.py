"""The survey ledger and lock leave nothing behind (qkenergy.surveys.ledger)."""

from __future__ import annotations

import fcntl
from pathlib import Path

import pytest

from qkenergy.base.errors import QKEnergyError
from qkenergy.surveys.ledger import LOCK_NAME, Ledger, survey_lock


def test_a_closed_ledger_is_one_file_and_a_reader_adds_none(tmp_path: Path) -> None:
    path = tmp_path / "ledger.sqlite"
    with Ledger(path) as ledger:
        ledger.start_run("local")
        assert (tmp_path / "ledger.sqlite-wal").exists()  # WAL while the survey runs
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ledger.sqlite"]
    with Ledger(path, read_only=True):
        pass
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ledger.sqlite"]
    with Ledger(path) as ledger:  # WAL again for the next survey, the run recorded kept
        assert ledger._db.execute("PRAGMA journal_mode").fetchone() == ("wal",)
        assert ledger._db.execute("SELECT count(*) FROM runs").fetchone() == (1,)


def test_the_lock_is_removed_at_the_end_and_still_excludes(tmp_path: Path) -> None:
    with survey_lock(tmp_path):
        assert (tmp_path / LOCK_NAME).exists()
        with pytest.raises(QKEnergyError, match="another survey"), survey_lock(tmp_path):
            pass
    assert not (tmp_path / LOCK_NAME).exists()
    # A lock file left by a killed survey (unlocked) is taken over, and removed at the end.
    (tmp_path / LOCK_NAME).write_text("pid 1\n")
    with survey_lock(tmp_path), open(tmp_path / LOCK_NAME) as held, pytest.raises(BlockingIOError):
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
    assert list(tmp_path.iterdir()) == []

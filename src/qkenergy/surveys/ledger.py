"""The survey ledger OUT/ledger.sqlite: the state of every unit, and every attempt, in sqlite3 (WAL).

Tables:

- ``runs``: one row per invocation (run id, start and end, counts).
- ``models``: one row per manifest model: source, resolved path, status
  (``ok`` or ``failed`` when the checkpoint could not be opened), error,
  architecture and sizes.
- ``units``: one row per (model, layer): status (``pending``, ``running``,
  ``done``, ``failed``), attempts (over all runs), error (the last one),
  worker, started / finished (ISO 8601 UTC, measured on the worker), the
  output files, the fingerprint (sha256) of the tensors read, the digest of
  the checkpoint files' sizes and modification times, the digest of the
  unit's settings, the number of heads, and the run that last wrote it.
- ``attempts``: one row per attempt: run, unit, outcome (``computed``,
  ``unchanged``, ``failed``), worker, times, error.

Only the client process writes the ledger, one transaction per event.
"""

from __future__ import annotations

import datetime as dt
import os
import sqlite3
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["Ledger", "UnitRow", "iso"]

SCHEMA = """
CREATE TABLE IF NOT EXISTS runs (
    run INTEGER PRIMARY KEY AUTOINCREMENT,
    started TEXT NOT NULL,
    finished TEXT,
    status TEXT NOT NULL DEFAULT 'running',
    units INTEGER, computed INTEGER, unchanged INTEGER, skipped INTEGER, failed INTEGER,
    scheduler TEXT
);
CREATE TABLE IF NOT EXISTS models (
    model TEXT PRIMARY KEY,
    source TEXT NOT NULL,
    path TEXT,
    revision TEXT,
    status TEXT NOT NULL,
    error TEXT,
    model_type TEXT,
    n_layers INTEGER, n_heads INTEGER, n_kv_heads INTEGER, head_dim INTEGER, hidden_size INTEGER,
    files_digest TEXT
);
CREATE TABLE IF NOT EXISTS units (
    model TEXT NOT NULL,
    layer INTEGER NOT NULL,
    status TEXT NOT NULL CHECK (status IN ('pending', 'running', 'done', 'failed')),
    attempts INTEGER NOT NULL DEFAULT 0,
    error TEXT,
    worker TEXT,
    started TEXT,
    finished TEXT,
    heads_file TEXT,
    layers_file TEXT,
    heads INTEGER,
    fingerprint TEXT,
    files_digest TEXT,
    params TEXT,
    run INTEGER,
    PRIMARY KEY (model, layer)
);
CREATE TABLE IF NOT EXISTS attempts (
    run INTEGER NOT NULL,
    model TEXT NOT NULL,
    layer INTEGER NOT NULL,
    outcome TEXT NOT NULL CHECK (outcome IN ('computed', 'unchanged', 'failed')),
    worker TEXT,
    started TEXT,
    finished TEXT,
    error TEXT
);
"""


def iso(seconds: float | None = None) -> str:
    """Unix seconds (default: now) as ISO 8601 UTC with milliseconds."""
    moment = dt.datetime.now(dt.UTC) if seconds is None else dt.datetime.fromtimestamp(seconds, dt.UTC)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


@dataclass(frozen=True)
class UnitRow:
    """The ledger's record of one unit."""

    model: str
    layer: int
    status: str
    attempts: int
    fingerprint: str | None
    files_digest: str | None
    params: str | None
    heads_file: str | None
    layers_file: str | None


class Ledger:
    """OUT/ledger.sqlite; use as a context manager."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        # isolation_level=None: explicit transactions, each event committed at once.
        self._db = sqlite3.connect(self.path, isolation_level=None, timeout=30)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.executescript(SCHEMA)
        self.run: int | None = None

    def close(self) -> None:
        self._db.close()

    def __enter__(self) -> Ledger:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _write(self, sql: str, args: tuple[Any, ...] | dict[str, Any] = ()) -> None:
        with self._db:  # one transaction: committed, or rolled back on error
            self._db.execute("BEGIN")
            self._db.execute(sql, args)

    # ------------------------------------------------------------------ runs

    def start_run(self, scheduler: str) -> int:
        """Begin a run; units left 'running' by a killed run go back to 'pending'."""
        with self._db:
            self._db.execute("BEGIN")
            self._db.execute("UPDATE units SET status = 'pending' WHERE status = 'running'")
            self._db.execute("UPDATE runs SET status = 'interrupted' WHERE status = 'running'")
            cursor = self._db.execute(
                "INSERT INTO runs (started, scheduler) VALUES (?, ?)", (iso(), scheduler)
            )
        self.run = int(cursor.lastrowid or 0)
        return self.run

    def finish_run(self, status: str, counts: dict[str, int]) -> None:
        self._write(
            "UPDATE runs SET finished = :finished, status = :status, units = :units, "
            "computed = :computed, unchanged = :unchanged, skipped = :skipped, failed = :failed "
            "WHERE run = :run",
            {"finished": iso(), "status": status, "run": self.run, **counts},
        )

    # ------------------------------------------------------------------ models

    def record_model(self, model: str, source: str, revision: str | None, **fields: Any) -> None:
        row = {"model": model, "source": source, "revision": revision, "status": "ok", "error": None}
        row.update(fields)
        columns = ", ".join(row)
        marks = ", ".join(f":{k}" for k in row)
        self._write(f"INSERT OR REPLACE INTO models ({columns}) VALUES ({marks})", row)

    # ------------------------------------------------------------------ units

    def units(self) -> dict[tuple[str, int], UnitRow]:
        rows = self._db.execute(
            "SELECT model, layer, status, attempts, fingerprint, files_digest, params, heads_file, "
            "layers_file FROM units"
        )
        return {(r[0], r[1]): UnitRow(*r) for r in rows}

    def mark_running(self, model: str, layer: int, params: str) -> None:
        self._write(
            "INSERT INTO units (model, layer, status, attempts, params, run) VALUES (?, ?, 'running', 1, ?, ?) "
            "ON CONFLICT (model, layer) DO UPDATE SET status = 'running', attempts = attempts + 1, "
            "params = excluded.params, run = excluded.run",
            (model, layer, params, self.run),
        )

    def mark_done(
        self,
        model: str,
        layer: int,
        *,
        outcome: str,
        worker: str,
        started: float,
        finished: float,
        fingerprint: str,
        files_digest: str,
        heads: int | None = None,
        heads_file: str | None = None,
        layers_file: str | None = None,
    ) -> None:
        """A unit computed (its files written) or found unchanged (its files kept)."""
        with self._db:
            self._db.execute("BEGIN")
            self._db.execute(
                "UPDATE units SET status = 'done', error = NULL, worker = ?, started = ?, finished = ?, "
                "fingerprint = ?, files_digest = ?, heads = COALESCE(?, heads), "
                "heads_file = COALESCE(?, heads_file), layers_file = COALESCE(?, layers_file) "
                "WHERE model = ? AND layer = ?",
                (
                    worker,
                    iso(started),
                    iso(finished),
                    fingerprint,
                    files_digest,
                    heads,
                    heads_file,
                    layers_file,
                    model,
                    layer,
                ),
            )
            self._db.execute(
                "INSERT INTO attempts VALUES (?, ?, ?, ?, ?, ?, ?, NULL)",
                (self.run, model, layer, outcome, worker, iso(started), iso(finished)),
            )

    def mark_failed(
        self, model: str, layer: int, error: str, *, final: bool, worker: str | None = None
    ) -> None:
        """An attempt failed; ``final``: no retry is left, the unit is reported as failed."""
        with self._db:
            self._db.execute("BEGIN")
            self._db.execute(
                "UPDATE units SET status = ?, error = ?, worker = ?, finished = ? WHERE model = ? AND layer = ?",
                ("failed" if final else "running", error, worker, iso(), model, layer),
            )
            self._db.execute(
                "INSERT INTO attempts VALUES (?, ?, ?, 'failed', ?, NULL, ?, ?)",
                (self.run, model, layer, worker, iso(), error),
            )

    def retry(self, model: str, layer: int) -> None:
        self._write("UPDATE units SET attempts = attempts + 1 WHERE model = ? AND layer = ?", (model, layer))

    def release_running(self) -> None:
        """Units in flight when a run stops go back to 'pending' (their work is lost)."""
        self._write("UPDATE units SET status = 'pending' WHERE status = 'running'")

    def attempts(self, run: int | None = None) -> list[dict[str, Any]]:
        """Attempt rows (of one run, or all), as dicts."""
        cursor = self._db.execute(
            "SELECT * FROM attempts" + (" WHERE run = ?" if run is not None else ""),
            (run,) if run is not None else (),
        )
        names = [d[0] for d in cursor.description]
        return [dict(zip(names, row)) for row in cursor]

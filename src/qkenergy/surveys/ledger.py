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

The ledger is input too (a file on disk that anything may have changed): it
must be a regular file that sqlite reads as a database with these tables and
columns; a lock held by another process is waited for at most
:data:`LOCK_WAIT` seconds. Any sqlite error on the way is one line naming the
file and what to do.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import functools
import os
import platform
import sqlite3
import stat
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ParamSpec, TypeVar

from qkenergy.base.display import show_path
from qkenergy.base.errors import QKEnergyError

__all__ = ["LOCK_NAME", "LOCK_WAIT", "Ledger", "UnitRow", "done_files", "iso", "survey_lock"]

LOCK_NAME = "survey.lock"
"""OUT/survey.lock: held (flock, exclusive) by the one survey that works on OUT."""

LOCK_WAIT = 5.0
"""Seconds a ledger locked by another process is waited for before the survey stops."""

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
    heads_sha256 TEXT,
    layers_sha256 TEXT,
    bytes_fetched INTEGER,
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
    """Unix seconds (default: now) as ISO 8601 UTC with milliseconds.

    Parameters
    ----------
    seconds : float or None, optional
        Unix seconds; None for now.

    Returns
    -------
    str
        E.g. ``2026-01-31T12:00:00.000Z``.
    """
    moment = dt.datetime.now(dt.UTC) if seconds is None else dt.datetime.fromtimestamp(seconds, dt.UTC)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


# Columns added after the first ledgers were written: an older ledger gains them on open.
_ADDED = {"units": {"heads_sha256": "TEXT", "layers_sha256": "TEXT", "bytes_fetched": "INTEGER"}}
_P = ParamSpec("_P")
_R = TypeVar("_R")


@functools.cache
def _schema_columns() -> dict[str, list[str]]:
    """Table -> column names of the schema above (as sqlite itself reads it)."""
    db = sqlite3.connect(":memory:")
    try:
        db.executescript(SCHEMA)
        names = [r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
        return {
            t: [r[1] for r in db.execute(f"PRAGMA table_info({t})")]
            for t in names
            if not t.startswith("sqlite_")
        }
    finally:
        db.close()


def _guarded(method: Callable[_P, _R]) -> Callable[_P, _R]:
    """A Ledger method whose sqlite errors become one line naming the ledger file."""

    @functools.wraps(method)
    def wrapper(*args: _P.args, **kwargs: _P.kwargs) -> _R:
        try:
            return method(*args, **kwargs)
        except (sqlite3.Error, UnicodeDecodeError) as error:  # sqlite3 decodes its messages as UTF-8
            ledger = args[0]
            assert isinstance(ledger, Ledger)
            raise ledger.error(error) from None

    return wrapper


def done_files(path: Path) -> dict[str, str | None] | None:
    """The unit files of the done units (path relative to OUT -> SHA-256, None when not recorded),
    read without writing anything; None when OUT has no ledger.

    Parameters
    ----------
    path : Path
        The ledger file.

    Returns
    -------
    dict or None
        Path -> SHA-256 or None.

    Raises
    ------
    QKEnergyError
        The ledger is not readable.
    """
    if not os.path.lexists(path):
        return None
    with Ledger(path, read_only=True) as ledger:
        return ledger.done_files()


@contextlib.contextmanager
def survey_lock(out: Path) -> Iterator[None]:
    """Hold OUT for one survey: a second survey on the same OUT is refused at once, saying who holds it.

    An exclusive ``flock`` on OUT/survey.lock, released by the kernel when the
    process ends however it ends (a killed survey never leaves OUT locked); the
    file says which process holds it, for the message, and is removed when the
    survey ends (a killed one leaves it, unlocked).

    Parameters
    ----------
    out : Path
        The output directory OUT.

    Yields
    ------
    None
        While OUT is held.

    Raises
    ------
    QKEnergyError
        The lock file cannot be opened, is not a regular file, or another survey holds it.
    """
    path = out / LOCK_NAME
    while True:
        fd = _locked_file(path, out)
        # The holder before us removes the file as it finishes: a lock taken on a file no longer
        # at OUT/survey.lock would not exclude the next survey, which makes a new one.
        try:
            here = os.stat(path, follow_symlinks=False)
        except FileNotFoundError:
            here = None
        mine = os.fstat(fd)
        if here is not None and (here.st_dev, here.st_ino) == (mine.st_dev, mine.st_ino):
            break
        os.close(fd)
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"pid {os.getpid()} on {platform.node()} since {iso()}\n".encode(), 0)
        yield
    finally:
        with contextlib.suppress(OSError):  # a finished survey leaves only its outputs and ledger
            os.unlink(path)
        os.close(fd)


def _locked_file(path: Path, out: Path) -> int:
    """OUT/survey.lock opened (created if need be) and flock-ed exclusively; its descriptor."""
    import fcntl

    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0), 0o644)
    except OSError as exc:
        raise QKEnergyError(
            f"{show_path(path)}: cannot open the survey's lock file ({exc.strerror})"
        ) from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise QKEnergyError(f"{show_path(path)}: not a regular file; remove it")
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = " ".join(os.pread(fd, 200, 0).decode("ascii", "replace").split())[:120]
            raise QKEnergyError(
                f"{show_path(out)}: another survey is running on this output directory "
                f"({holder or 'a process'}); wait for it to finish, or choose another -o directory"
            ) from None
    except BaseException:
        os.close(fd)
        raise
    return fd


@dataclass(frozen=True)
class UnitRow:
    """The ledger's record of one unit.

    Parameters
    ----------
    model : str
        The survey's model name.
    layer : int
        The layer.
    status : str
        "pending", "running", "done" or "failed".
    attempts : int
        How often it was run.
    fingerprint : str or None
        The fingerprint of the tensors read.
    files_digest : str or None
        The digest of the model's files when planned.
    params : str or None
        The analysis parameters, as JSON text.
    heads_file : str or None
        The unit's head file, relative to OUT.
    layers_file : str or None
        Its layer file, relative to OUT.
    heads_sha256 : str or None, optional
        SHA-256 of the head file.
    layers_sha256 : str or None, optional
        SHA-256 of the layer file.
    """

    model: str
    layer: int
    status: str
    attempts: int
    fingerprint: str | None
    files_digest: str | None
    params: str | None
    heads_file: str | None
    layers_file: str | None
    heads_sha256: str | None = None
    layers_sha256: str | None = None


class Ledger:
    """OUT/ledger.sqlite; use as a context manager.

    Parameters
    ----------
    path : str or path-like
        The ledger file.
    read_only : bool, optional
        Open it for reading only (nothing is created or changed).

    Raises
    ------
    QKEnergyError
        The file is not a regular file, or not a readable ledger.
    """

    def __init__(self, path: str | os.PathLike[str], *, read_only: bool = False) -> None:
        self.path = Path(path)
        self.run: int | None = None
        self._read_only = read_only
        self._check_file()
        try:
            # isolation_level=None: explicit transactions, each event committed at once.
            target = f"file:{self.path.resolve()}?mode=ro" if read_only else self.path
            self._db = sqlite3.connect(target, isolation_level=None, timeout=LOCK_WAIT, uri=read_only)
        except sqlite3.Error as error:
            raise self.error(error) from None
        # Text that is not UTF-8 (a damaged page) is read with replacement characters, not raised.
        self._db.text_factory = lambda raw: raw.decode("utf-8", "replace")
        try:
            self._open(read_only)
        except (sqlite3.Error, UnicodeDecodeError) as error:  # sqlite3 decodes its messages as UTF-8
            self._db.close()
            raise self.error(error) from None
        except BaseException:
            self._db.close()
            raise

    def _check_file(self) -> None:
        """A ledger that exists must be a regular file (sqlite would block on a FIFO, or read a device)."""
        try:
            info = os.stat(self.path)
        except FileNotFoundError:
            return
        except OSError as exc:
            raise QKEnergyError(
                f"{show_path(self.path)}: cannot read the survey ledger ({exc.strerror})"
            ) from None
        if not stat.S_ISREG(info.st_mode):
            raise QKEnergyError(
                f"{show_path(self.path)}: the survey ledger is not a regular file; remove it or choose "
                "another output directory"
            )

    def _open(self, read_only: bool) -> None:
        """WAL mode, the tables (created, or checked to be a ledger's), the columns added since."""
        if self._db.execute("PRAGMA quick_check").fetchone() != ("ok",):
            raise sqlite3.DatabaseError("the database fails sqlite's integrity check")
        if not read_only:
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=NORMAL")
            self._db.executescript(SCHEMA)
        for table, expected in _schema_columns().items():
            found = [row[1] for row in self._db.execute(f"PRAGMA table_info({table})")]
            for column, kind in _ADDED.get(table, {}).items():
                if column not in found and not read_only:
                    self._db.execute(f"ALTER TABLE {table} ADD COLUMN {column} {kind}")
                    found.append(column)
            if read_only:
                expected = [c for c in expected if c not in _ADDED.get(table, ())]
            if missing := [c for c in expected if c not in found]:
                raise sqlite3.DatabaseError(f"its table {table!r} has no column {missing[0]!r}")

    def error(self, error: sqlite3.Error | UnicodeDecodeError) -> QKEnergyError:
        """One line for an sqlite error on this ledger: what happened and what to do."""
        reason = " ".join(str(error).split())[:200] or type(error).__name__
        if isinstance(error, UnicodeDecodeError):
            reason = "text that is not UTF-8"
        where = show_path(self.path)
        if isinstance(error, sqlite3.OperationalError) and "locked" in reason:
            return QKEnergyError(
                f"{where}: the survey ledger is locked by another process (waited {LOCK_WAIT:g} s); "
                "wait for it to finish, or choose another output directory"
            )
        if isinstance(error, sqlite3.OperationalError) and (
            "readonly" in reason or "unable to open" in reason
        ):
            return QKEnergyError(f"{where}: cannot write the survey ledger ({reason})")
        return QKEnergyError(
            f"{where}: not a usable survey ledger ({reason}); remove it (every unit is then "
            "recomputed) or choose another output directory"
        )

    def close(self) -> None:
        """Close the ledger; a writer leaves it as one file, out of WAL mode.

        Back in rollback-journal mode the WAL is checkpointed into the ledger and the ``-wal`` and
        ``-shm`` files are removed; a reader opened later (``load_survey``) then creates none.
        The next survey on OUT turns WAL on again. Where another connection still holds the
        ledger, sqlite keeps WAL (nothing is lost either way).
        """
        if not self._read_only:
            with contextlib.suppress(sqlite3.Error):
                self._db.execute("PRAGMA journal_mode=DELETE")
        self._db.close()

    def __enter__(self) -> Ledger:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @_guarded
    def _write(self, sql: str, args: tuple[Any, ...] | dict[str, Any] = ()) -> None:
        with self._db:  # one transaction: committed, or rolled back on error
            self._db.execute("BEGIN")
            self._db.execute(sql, args)

    # ------------------------------------------------------------------ runs

    @_guarded
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

    @_guarded
    def units(self) -> dict[tuple[str, int], UnitRow]:
        rows = self._db.execute(
            "SELECT model, layer, status, attempts, fingerprint, files_digest, params, heads_file, "
            "layers_file, heads_sha256, layers_sha256 FROM units"
        )
        # Rows of other types than this module writes are no unit of this survey: never matched.
        return {
            (r[0], r[1]): UnitRow(*r)
            for r in rows
            if isinstance(r[0], str)
            and isinstance(r[1], int)
            and all(isinstance(v, str | None) for v in r[4:])
        }

    @_guarded
    def done_files(self) -> dict[str, str | None]:
        """Relative path -> SHA-256 (None when not recorded) of the files of every done unit."""
        names = [row[1] for row in self._db.execute("PRAGMA table_info(units)")]
        shas = "heads_sha256, layers_sha256" if "heads_sha256" in names else "NULL, NULL"
        out: dict[str, str | None] = {}
        for heads, layers, heads_sha, layers_sha in self._db.execute(
            f"SELECT heads_file, layers_file, {shas} FROM units WHERE status = 'done'"
        ):
            for file, sha in ((heads, heads_sha), (layers, layers_sha)):
                if isinstance(file, str):
                    out[file] = sha if isinstance(sha, str) else None
        return out

    @_guarded
    def mark_running(self, model: str, layer: int, params: str) -> None:
        self._write(
            "INSERT INTO units (model, layer, status, attempts, params, run) VALUES (?, ?, 'running', 1, ?, ?) "
            "ON CONFLICT (model, layer) DO UPDATE SET status = 'running', attempts = attempts + 1, "
            "params = excluded.params, run = excluded.run",
            (model, layer, params, self.run),
        )

    @_guarded
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
        heads_sha256: str | None = None,
        layers_sha256: str | None = None,
        bytes_fetched: int | None = None,
    ) -> None:
        """A unit computed (its files written, with their SHA-256) or found unchanged (its files kept);
        ``bytes_fetched``: what a hub model's unit fetched from the Hub."""
        with self._db:
            self._db.execute("BEGIN")
            self._db.execute(
                "UPDATE units SET status = 'done', error = NULL, worker = ?, started = ?, finished = ?, "
                "fingerprint = ?, files_digest = ?, heads = COALESCE(?, heads), "
                "heads_file = COALESCE(?, heads_file), layers_file = COALESCE(?, layers_file), "
                "heads_sha256 = COALESCE(?, heads_sha256), layers_sha256 = COALESCE(?, layers_sha256), "
                "bytes_fetched = ? WHERE model = ? AND layer = ?",
                (
                    worker,
                    iso(started),
                    iso(finished),
                    fingerprint,
                    files_digest,
                    heads,
                    heads_file,
                    layers_file,
                    heads_sha256,
                    layers_sha256,
                    bytes_fetched,
                    model,
                    layer,
                ),
            )
            self._db.execute(
                "INSERT INTO attempts VALUES (?, ?, ?, ?, ?, ?, ?, NULL)",
                (self.run, model, layer, outcome, worker, iso(started), iso(finished)),
            )

    @_guarded
    def mark_failed(self, model: str, layer: int, error: str, *, final: bool) -> None:
        """An attempt failed; ``final``: no retry is left, the unit is reported as failed."""
        with self._db:
            self._db.execute("BEGIN")
            self._db.execute(
                "UPDATE units SET status = ?, error = ?, worker = NULL, finished = ? WHERE model = ? AND layer = ?",
                ("failed" if final else "running", error, iso(), model, layer),
            )
            self._db.execute(
                "INSERT INTO attempts VALUES (?, ?, ?, 'failed', NULL, NULL, ?, ?)",
                (self.run, model, layer, iso(), error),
            )

    def retry(self, model: str, layer: int) -> None:
        self._write("UPDATE units SET attempts = attempts + 1 WHERE model = ? AND layer = ?", (model, layer))

    def release_running(self) -> None:
        """Units in flight when a run stops go back to 'pending' (their work is lost)."""
        self._write("UPDATE units SET status = 'pending' WHERE status = 'running'")

    @_guarded
    def failed_units(self) -> list[tuple[str, int, str]]:
        """(model, layer, error) of every unit reported as failed, in model and layer order."""
        cursor = self._db.execute(
            "SELECT model, layer, coalesce(error, '') FROM units WHERE status = 'failed' ORDER BY model, layer"
        )
        return [(str(model), int(layer), str(error)) for model, layer, error in cursor]

"""A local mirror of remote files, filled by byte range (:class:`RangeCache`, :class:`MirroredFile`).

A model on the Hugging Face Hub is hundreds of gigabytes, of which an analysis
reads the few percent that is W_Q and W_K. Each remote file the analysis
touches gets a *sparse* file of its full size in the mirror: the byte ranges
fetched are written in place and every other byte stays a hole, so the local
readers (:mod:`qkenergy.weights.safetensors_io`, :mod:`qkenergy.weights.gguf_io`)
read the mirror exactly as they read a file on disk, after asking it to fetch
the range they are about to read.

Which ranges are present is recorded in ``ranges.sqlite`` at the mirror's root
(sqlite3 in WAL mode, so that the Dask workers of a survey can share one mirror
on a shared file system). A range is recorded only once all its bytes are
written, in pieces of at most :data:`PIECE_BYTES`: an interrupted fetch
resumes from the last piece recorded, and a rerun fetches nothing twice. A
file is keyed by its repository, commit and path, and carries the ETag it had
when its first byte was fetched: a mirror file whose ETag no longer matches is
emptied before anything is read from it.

The record is changed in ``BEGIN IMMEDIATE`` transactions, so that processes
making one file's row at once insert it once; a lock held longer than
``lock_timeout`` is one line naming the cache. The cache repairs itself: a
sparse file deleted or cut shorter than its recorded ranges has its ranges
dropped (said once, :class:`RangeCacheNote`). It never opens a path outside its
folder (no ``..``, no symbolic link out of it), and a full disk is one line
naming the file and the cache, the ranges recorded before kept.

Nothing here speaks HTTP: the caller hands each file a ``fetch`` function that
yields the bytes of a range (:mod:`qkenergy.weights.hub` does, through
huggingface_hub's own HTTP helpers).
"""

from __future__ import annotations

import contextlib
import errno
import itertools
import os
import sqlite3
import threading
import warnings
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from qkenergy.base.display import show_name, show_path
from qkenergy.base.errors import QKEnergyError

__all__ = ["PIECE_BYTES", "MirroredFile", "RangeCache", "RangeCacheNote", "RangeFetch"]

PIECE_BYTES = 16 << 20
"""The largest range fetched and recorded as one piece: what an interrupted fetch can lose."""

# Pieces of one read fetched at once: a remote read is bound by latency, not by the two cores.
_PARALLEL = 4

# The file that marks a folder as a mirror: its holes read as zeros, so it is never a checkpoint.
MARKER = "QKENERGY_RANGE_MIRROR"

RangeFetch = Callable[[int, int], Iterator[bytes]]
"""``fetch(begin, end)`` yields the bytes [begin, end) of a remote file, in order, all of them or raises."""


class RangeCacheNote(UserWarning):
    """What the range cache repaired, said once (the command line prints it as one warning line)."""


class RangeCache:
    """The mirror: one folder, its sparse files and the sqlite record of the ranges present.

    Parameters
    ----------
    root : pathlib.Path
        The mirror's folder (created on first use).
    lock_timeout : float
        The longest wait, in seconds, for the record while another process writes it.

    Raises
    ------
    QKEnergyError
        The folder cannot be created or its record cannot be opened.
    """

    def __init__(self, root: Path, lock_timeout: float = 60.0) -> None:
        self.root = Path(root).expanduser()
        self.lock_timeout = lock_timeout
        self._lock = threading.Lock()
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            (self.root / MARKER).touch()
            # autocommit: each change is one explicit BEGIN IMMEDIATE transaction (see _write)
            self._db = sqlite3.connect(
                self.root / "ranges.sqlite",
                timeout=lock_timeout,
                check_same_thread=False,
                isolation_level=None,
            )
        except (OSError, sqlite3.Error) as exc:
            raise QKEnergyError(
                f"{show_path(self.root)}: cannot use as the hub range cache ({exc})"
            ) from None
        with self._write():
            self._db.execute(
                "CREATE TABLE IF NOT EXISTS files (id INTEGER PRIMARY KEY, key TEXT UNIQUE NOT NULL, "
                "etag TEXT NOT NULL, size INTEGER NOT NULL)"
            )
            self._db.execute(
                "CREATE TABLE IF NOT EXISTS ranges (file INTEGER NOT NULL, begin INTEGER NOT NULL, "
                "end INTEGER NOT NULL)"
            )
            self._db.execute("CREATE INDEX IF NOT EXISTS ranges_file ON ranges (file, begin)")
        with self._read():
            self._db.execute("PRAGMA journal_mode=WAL")

    @contextlib.contextmanager
    def _write(self) -> Iterator[None]:
        """One transaction that holds the write lock from its start (BEGIN IMMEDIATE): two processes
        making the same file's row at once cannot both see it missing."""
        with self._read():
            self._db.execute("BEGIN IMMEDIATE")
            try:
                yield
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")

    @contextlib.contextmanager
    def _read(self) -> Iterator[None]:
        """The record's errors as one line naming the cache: a lock held too long, a full disk."""
        where = show_path(self.root / "ranges.sqlite")
        try:
            with self._lock:
                yield
        except sqlite3.OperationalError as exc:
            text = str(exc)
            if "locked" in text or "busy" in text:
                raise QKEnergyError(
                    f"{where}: the hub range cache is locked by another process for more than "
                    f"{self.lock_timeout:g} s (QKENERGY_HUB_LOCK_TIMEOUT sets the wait); run again when it is done"
                ) from None
            if "full" in text:
                raise QKEnergyError(
                    f"{where}: no space left on the device of the hub range cache; what was fetched before is kept"
                ) from None
            raise QKEnergyError(f"{where}: the hub range cache's record cannot be used ({text})") from None
        except sqlite3.Error as exc:
            raise QKEnergyError(f"{where}: the hub range cache's record cannot be used ({exc})") from None

    def path_of(self, relative: str) -> Path:
        """``root / relative``, its folder made; refused unless it lies inside the root (no ``..``, no
        link out of it).

        Parameters
        ----------
        relative : str
            A ``/``-separated path under the root.

        Returns
        -------
        pathlib.Path

        Raises
        ------
        QKEnergyError
            A path that leads outside the cache, or a folder that cannot be made.
        """
        if not plain_path(relative):
            raise QKEnergyError(
                f"{show_path(self.root)}: {show_name(relative, 100)} is not a path inside the hub range cache"
            )
        path = self.root.joinpath(*relative.split("/"))
        try:
            root = self.root.resolve()
            # checked before a folder is made (through a link out of the cache) and again after
            inside = path.parent.resolve().is_relative_to(root)
            if inside:
                path.parent.mkdir(parents=True, exist_ok=True)
                inside = path.parent.resolve().is_relative_to(root) and not path.is_symlink()
        except (OSError, RuntimeError) as exc:
            raise QKEnergyError(
                f"{show_path(path)}: cannot make a folder of the hub range cache ({exc})"
            ) from None
        if not inside:
            raise QKEnergyError(
                f"{show_path(path)}: leads outside the hub range cache ({show_path(self.root)}); refused"
            )
        return path

    def file(self, relative: str, size: int, etag: str, fetch: RangeFetch | None) -> MirroredFile:
        """The mirror of one remote file, ``relative`` to the root (its sparse file made on first use).

        A sparse file missing or of another size than recorded lost its bytes: its ranges are
        dropped (and said so once) before anything is read from it.

        Parameters
        ----------
        relative : str
            Where it lies under the root: repository, commit and path in the repository.
        size : int
            The remote file's size in bytes.
        etag : str
            The remote file's ETag (its content hash on the Hub).
        fetch : RangeFetch or None
            Yields the bytes of a range; None when offline (a missing range is then an error).

        Returns
        -------
        MirroredFile

        Raises
        ------
        QKEnergyError
            A path outside the cache, or the sparse file cannot be made.
        """
        path = self.path_of(relative)
        with self._write():
            self._db.execute(
                "INSERT OR IGNORE INTO files (key, etag, size) VALUES (?, ?, ?)", (relative, etag, size)
            )
            file_id, known_etag, known_size = self._db.execute(
                "SELECT id, etag, size FROM files WHERE key = ?", (relative,)
            ).fetchone()
            if (known_etag, known_size) != (etag, size):
                # the same path at the same commit with other bytes: start it again
                self._db.execute("DELETE FROM ranges WHERE file = ?", (file_id,))
                self._db.execute("UPDATE files SET etag = ?, size = ? WHERE id = ?", (etag, size, file_id))
                with contextlib.suppress(FileNotFoundError):
                    path.unlink()
            try:
                # never truncates what is there
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW, 0o644)
                try:
                    found = os.fstat(fd).st_size
                    if found != size:
                        os.ftruncate(fd, size)  # a hole: no disk used until bytes are written
                finally:
                    os.close(fd)
            except OSError as exc:
                raise QKEnergyError(
                    f"{show_path(path)}: cannot make the mirror file ({exc.strerror or type(exc).__name__})"
                ) from None
            if (
                found != size
                and self._db.execute("SELECT 1 FROM ranges WHERE file = ? LIMIT 1", (file_id,)).fetchone()
            ):
                self._db.execute("DELETE FROM ranges WHERE file = ?", (file_id,))
                warnings.warn(
                    f"{show_path(path)}: the hub range cache's copy was missing or cut short ({found} of {size} "
                    "bytes); its ranges are fetched again",
                    RangeCacheNote,
                    stacklevel=2,
                )
        return MirroredFile(self, file_id, path, size, fetch)

    def present(self, file_id: int) -> list[tuple[int, int]]:
        """The ranges of a file recorded as present, sorted and merged."""
        with self._read():
            rows = self._db.execute(
                "SELECT begin, end FROM ranges WHERE file = ? ORDER BY begin", (file_id,)
            ).fetchall()
        return _merged(rows)

    def record(self, file_id: int, begin: int, end: int) -> None:
        """Note [begin, end) present (after its bytes are written)."""
        with self._write():
            self._db.execute("INSERT INTO ranges (file, begin, end) VALUES (?, ?, ?)", (file_id, begin, end))

    def bytes_present(self) -> int:
        """The bytes of every range recorded: the mirror's size on disk, holes aside."""
        with self._read():
            rows = self._db.execute("SELECT file, begin, end FROM ranges ORDER BY file, begin").fetchall()
        by_file = itertools.groupby(rows, key=lambda row: row[0])
        return sum(end - begin for _, spans in by_file for begin, end in _merged(row[1:] for row in spans))

    def close(self) -> None:
        """Close the sqlite record."""
        self._db.close()


def plain_path(path: str) -> bool:
    """A relative ``/``-separated path of plain names: no empty, ``.`` or ``..`` part, no backslash or NUL."""
    return "\\" not in path and "\0" not in path and all(p not in ("", ".", "..") for p in path.split("/"))


def _merged(spans: Iterable[tuple[int, int]]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for begin, end in sorted(spans):
        if out and begin <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], end))
        else:
            out.append((begin, end))
    return out


class MirroredFile:
    """One remote file's sparse mirror: :meth:`ensure` fetches what a read needs, once.

    Made by :meth:`RangeCache.file`. ``on_bytes`` (if set) is called with each
    chunk's size as it arrives, from whichever thread fetched it (the progress bar).

    Parameters
    ----------
    cache : RangeCache
        The mirror it belongs to.
    file_id : int
        Its row in the record.
    path : pathlib.Path
        Its sparse file.
    size : int
        The remote file's size.
    fetch : RangeFetch or None
        Yields the bytes of a range; None offline.
    """

    def __init__(
        self, cache: RangeCache, file_id: int, path: Path, size: int, fetch: RangeFetch | None
    ) -> None:
        self.cache = cache
        self.file_id = file_id
        self.path = path
        self.size = size
        self._fetch = fetch
        self.on_bytes: Callable[[int], None] | None = None
        self._lock = threading.Lock()

    def missing(self, begin: int, end: int) -> list[tuple[int, int]]:
        """The parts of [begin, end) not in the mirror yet (not covered by the sorted, merged ranges present)."""
        out = []
        at, end = max(0, begin), min(end, self.size)
        for a, b in self.cache.present(self.file_id):
            if b <= at:
                continue
            if a >= end:
                break
            if a > at:
                out.append((at, a))
            at = max(at, b)
        if at < end:
            out.append((at, end))
        return out

    def ensure(self, begin: int, end: int) -> None:
        """Fetch whatever of [begin, end) the mirror lacks; afterwards the range reads as the remote file.

        Parameters
        ----------
        begin, end : int
            The byte range (clipped to the file).

        Raises
        ------
        QKEnergyError
            Offline with a range missing, or a fetch that failed (from the ``fetch`` function).
        """
        with self._lock:  # two readers of one file: the second finds the first's ranges
            pieces = [
                (a, min(a + PIECE_BYTES, hi))
                for lo, hi in self.missing(begin, end)
                for a in range(lo, hi, PIECE_BYTES)
            ]
            if not pieces:
                return
            if self._fetch is None:
                a, b = pieces[0][0], pieces[-1][1]
                raise QKEnergyError(
                    f"{show_path(self.path)}: bytes [{a}, {b}) are not in the hub range cache and "
                    "HF_HUB_OFFLINE is set; run once online to fetch them"
                )
            if len(pieces) == 1:
                self._fetch_piece(*pieces[0])
                return
            with ThreadPoolExecutor(min(_PARALLEL, len(pieces)), thread_name_prefix="qkenergy-fetch") as pool:
                for done in [pool.submit(self._fetch_piece, a, b) for a, b in pieces]:
                    done.result()

    def _fetch_piece(self, begin: int, end: int) -> None:
        assert self._fetch is not None
        at = begin
        try:
            fd = os.open(self.path, os.O_WRONLY | os.O_NOFOLLOW)
            try:
                for chunk in self._fetch(begin, end):
                    chunk = chunk[: end - at]  # never past the range asked for
                    view = memoryview(chunk)
                    while view:
                        wrote = os.pwrite(fd, view, at)
                        at += wrote
                        view = view[wrote:]
                    if self.on_bytes is not None:
                        self.on_bytes(len(chunk))
                    if at >= end:
                        break
            finally:
                os.close(fd)
        except OSError as exc:
            full = exc.errno in (errno.ENOSPC, errno.EDQUOT)
            why = "no space left on the device" if full else (exc.strerror or type(exc).__name__)
            raise QKEnergyError(
                f"{show_path(self.path)}: cannot write bytes [{begin}, {end}) into the hub range cache "
                f"({show_path(self.cache.root)}): {why}; the ranges fetched before are kept"
            ) from None
        if at < end:  # the fetch function's contract broken: never record bytes not written
            raise QKEnergyError(f"{show_path(self.path)}: the fetch of [{begin}, {end}) ended at byte {at}")
        self.cache.record(self.file_id, begin, end)

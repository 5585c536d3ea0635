"""The one atomic writer: the files of a run land together or not at all.

An :class:`OutputTransaction` stages every file of a run (the ``-o`` table, its
``.layers`` table, the CSV sidecar, the figures, a report's folder) as a
temporary file or folder beside its target; :meth:`OutputTransaction.commit`
moves them into place with ``os.replace`` only once every one of them was
written, and any failure before that removes the temporary files (and the
directories the transaction created). Each ``os.replace`` is atomic; the commit
as a whole replaces files one after another, after all the writing (the part
that can fail for lack of space or permission) is done. :func:`atomic_path` is
the transaction of one file.

Where a file lands:

- a target that is a symbolic link is written through: the file it points to
  is replaced (atomically), the link stays; with ``replace_any=True`` (a cache
  file) the name itself is replaced, whatever is there (a link, a FIFO), only a
  directory refused;
- a target that already exists keeps its permission bits; a new file gets
  those of a plain ``open()`` (0666 less the umask), a new folder those of a
  plain ``mkdir()``;
- a staged folder replaces the whole folder of its name (an old one is swapped
  out, not merged, and put back if a later part of the commit fails).
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import stat
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from qkenergy.base.display import show_path
from qkenergy.base.errors import QKEnergyError
from qkenergy.base.interrupt import signals_deferred

__all__ = ["OutputError", "OutputTransaction", "atomic_path", "joined", "write_through_target"]


class OutputError(QKEnergyError):
    """A file or folder of the outputs cannot be written.

    Parameters
    ----------
    message : str
        The one-line message (naming the path).
    reason : str
        Why, in the system's words ("Permission denied"), for callers that say it their own way.
    """

    def __init__(self, message: str, reason: str) -> None:
        super().__init__(message)
        self.reason = reason


@dataclass(frozen=True)
class _Staged:
    temporary: Path
    target: Path  # where the bytes land (the symlink's target, if any)
    requested: Path  # what the caller asked for (reported back)
    folder: bool = False  # a staged folder: the old one is swapped out, not merged


def write_through_target(path: str | os.PathLike[str]) -> Path:
    """The file that writing ``path`` should replace: ``path`` itself, or what its symlinks point to.

    Parameters
    ----------
    path : str or path-like
        The file asked for.

    Returns
    -------
    Path
        The file to replace.
    """
    requested = Path(path)
    return Path(os.path.realpath(requested)) if requested.is_symlink() else requested


def _new_mode(full: int) -> int:
    umask = os.umask(0)
    os.umask(umask)
    return full & ~umask


def _why(exc: OSError) -> str:
    return exc.strerror or str(exc)


class OutputTransaction:
    """Stage the files of one run beside their targets; commit them all, or remove them all.

    Use as a context manager: a clean exit commits, an exception rolls back::

        with OutputTransaction() as outputs:
            df.to_csv(outputs.stage("results.csv"))
            fig.savefig(outputs.stage("plots/heatmap.png"))
    """

    def __init__(self) -> None:
        self._staged: list[_Staged] = []
        self._created: list[Path] = []  # directories made for the outputs, parents first
        self._swapped: list[tuple[Path, Path]] = []  # (old folder moved aside, its place) during commit
        self._closed = False

    def ensure_directory(self, path: str | os.PathLike[str]) -> Path:
        """Create directory ``path`` and missing parents (removed again on rollback)."""
        directory = Path(path)
        missing = [p for p in (directory, *directory.parents) if not p.exists()]
        for parent in reversed(missing):
            try:
                parent.mkdir()
            except FileExistsError:
                continue  # made meanwhile by someone else: not ours to remove
            except OSError as exc:
                raise OutputError(
                    f"{show_path(directory)}: cannot create directory ({_why(exc)})", _why(exc)
                ) from None
            self._created.append(parent)
        if not directory.is_dir():
            raise OutputError(f"{show_path(directory)}: not a directory", os.strerror(errno.ENOTDIR))
        return directory

    def stage(self, path: str | os.PathLike[str], *, replace_any: bool = False) -> Path:
        """A new empty temporary file that will become ``path`` on commit; write to it.

        ``replace_any``: replace the name ``path`` itself, whatever is there (a symbolic link,
        a FIFO: a cache file), rather than write through a link; only a directory is refused.
        """
        requested = Path(path)
        target = requested if replace_any else write_through_target(requested)
        self._check_new(target)
        if replace_any:
            if target.is_dir() and not target.is_symlink():
                raise OutputError(f"{show_path(requested)}: is a directory", os.strerror(errno.EISDIR))
        elif target.exists() and not target.is_file():
            raise OutputError(
                f"{show_path(requested)}: exists and is not a regular file", "not a regular file"
            )
        return self._temporary(requested, target, folder=False)

    def stage_directory(self, path: str | os.PathLike[str]) -> Path:
        """A new empty temporary folder that will replace folder ``path`` whole on commit; fill it."""
        requested = Path(path)
        self._check_new(requested)
        if requested.exists() and not requested.is_dir():
            raise OutputError(
                f"{show_path(requested)}: exists and is not a directory", os.strerror(errno.ENOTDIR)
            )
        return self._temporary(requested, requested, folder=True)

    def _check_new(self, target: Path) -> None:
        if self._closed:
            raise RuntimeError("this output transaction is already committed or rolled back")
        if any(s.target == target for s in self._staged):
            raise ValueError(f"{target} is staged twice in one output transaction")

    def _temporary(self, requested: Path, target: Path, *, folder: bool) -> Path:
        directory = self.ensure_directory(target.parent)
        # Ctrl-C or SIGTERM between creating the file and noting it would leave it behind unnoted
        with signals_deferred():
            try:
                if folder:
                    name = tempfile.mkdtemp(dir=directory, prefix=f".{target.name}.", suffix=".tmp")
                else:
                    fd, name = tempfile.mkstemp(dir=directory, prefix=f".{target.name}.", suffix=".tmp")
                    os.close(fd)
            except OSError as exc:
                raise OutputError(f"{show_path(requested)}: cannot write ({_why(exc)})", _why(exc)) from None
            self._staged.append(_Staged(Path(name), target, requested, folder))
        return Path(name)

    def commit(self) -> list[Path]:
        """Give each staged file its final permissions and move it into place; returns the paths."""
        self._closed = True
        try:
            file_mode, folder_mode = _new_mode(0o666), _new_mode(0o777)
            for item in self._staged:
                # mkstemp / mkdtemp make private ones: take the existing bits, or a plain open()'s.
                try:
                    mode = stat.S_IMODE(os.stat(item.target).st_mode)
                except FileNotFoundError:
                    mode = folder_mode if item.folder else file_mode
                os.chmod(item.temporary, mode)
            for item in self._staged:
                if item.folder and item.target.exists():
                    with signals_deferred():
                        aside = Path(tempfile.mkdtemp(dir=item.target.parent, prefix=f".{item.target.name}."))
                        os.replace(item.target, aside / "previous")
                        self._swapped.append((aside, item.target))
                os.replace(item.temporary, item.target)
        except BaseException:
            self._restore()
            self.rollback()
            raise
        for aside, _ in self._swapped:
            shutil.rmtree(aside, ignore_errors=True)
        return [item.requested for item in self._staged]

    def _restore(self) -> None:
        """Put back the old folders swapped out by a commit that failed."""
        for aside, place in reversed(self._swapped):
            with contextlib.suppress(OSError):
                if place.exists():
                    shutil.rmtree(place, ignore_errors=True)
                os.replace(aside / "previous", place)
                aside.rmdir()

    def rollback(self) -> None:
        """Remove every staged file not yet in place, and the directories this transaction made."""
        self._closed = True
        for item in self._staged:
            if item.folder:
                shutil.rmtree(item.temporary, ignore_errors=True)
            else:
                with contextlib.suppress(OSError):
                    item.temporary.unlink()
        for directory in reversed(self._created):
            with contextlib.suppress(OSError):
                directory.rmdir()  # only when still empty

    def __enter__(self) -> OutputTransaction:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, *exc: object) -> None:
        if exc_type is None:
            self.commit()
        else:
            self.rollback()


@contextlib.contextmanager
def joined(transaction: OutputTransaction | None) -> Iterator[OutputTransaction]:
    """The caller's transaction (committed by the caller), or a fresh one committed here.

    Parameters
    ----------
    transaction : OutputTransaction or None
        The caller's transaction, or None.

    Yields
    ------
    OutputTransaction
        The transaction to stage in.
    """
    if transaction is not None:
        yield transaction
        return
    with OutputTransaction() as own:
        yield own


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike[str], *, replace_any: bool = False) -> Iterator[Path]:
    """Yield a temporary path beside ``path``; on success it replaces ``path``, on error it is removed.

    A one-file :class:`OutputTransaction`: a symlinked ``path`` is written through (unless
    ``replace_any``, as in :meth:`OutputTransaction.stage`), an existing file keeps its permissions.

    Parameters
    ----------
    path : str or path-like
        The file to write.
    replace_any : bool
        Replace the name itself, whatever is there (only a directory refused).

    Yields
    ------
    Path
        The temporary path to write to.
    """
    with OutputTransaction() as outputs:
        yield outputs.stage(path, replace_any=replace_any)

"""The outputs of one run land together or not at all.

An :class:`OutputTransaction` stages every file of a run (the ``-o`` table, its
``.layers`` table, the CSV sidecar, the figures) as a temporary file in the
target's own directory; :meth:`OutputTransaction.commit` moves them into place
with ``os.replace`` only once every one of them was written, and any failure
before that removes the temporary files (and the directories the transaction
created). Each ``os.replace`` is atomic; the commit as a whole replaces files
one after another, after all the writing (the part that can fail for lack of
space or permission) is done.

Two details of where a file lands:

- a target that is a symbolic link is written through: the file it points to
  is replaced (atomically), the link stays;
- a target that already exists keeps its permission bits; a new file gets
  those of a plain ``open()`` (0666 less the umask).
"""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

from qkenergy.base.errors import QKEnergyError
from qkenergy.base.interrupt import signals_deferred
from qkenergy.weights.safetensors_io import show_path

__all__ = ["OutputTransaction", "joined", "write_through_target"]


@dataclass(frozen=True)
class _Staged:
    temporary: Path
    target: Path  # where the bytes land (the symlink's target, if any)
    requested: Path  # what the caller asked for (reported back)


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
    if requested.is_symlink():
        return Path(os.path.realpath(requested))
    return requested


def _new_file_mode() -> int:
    umask = os.umask(0)
    os.umask(umask)
    return 0o666 & ~umask


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
                raise QKEnergyError(
                    f"{show_path(directory)}: cannot create directory ({exc.strerror or exc})"
                ) from None
            self._created.append(parent)
        if not directory.is_dir():
            raise QKEnergyError(f"{show_path(directory)}: not a directory")
        return directory

    def stage(self, path: str | os.PathLike[str]) -> Path:
        """A new empty temporary file that will become ``path`` on commit; write to it."""
        if self._closed:
            raise RuntimeError("this output transaction is already committed or rolled back")
        requested = Path(path)
        target = write_through_target(requested)
        if any(s.target == target for s in self._staged):
            raise ValueError(f"{target} is staged twice in one output transaction")
        if target.exists() and not target.is_file():
            raise QKEnergyError(f"{show_path(requested)}: exists and is not a regular file")
        directory = self.ensure_directory(target.parent)
        # Ctrl-C or SIGTERM between creating the file and noting it would leave it behind unnoted
        with signals_deferred():
            try:
                fd, name = tempfile.mkstemp(dir=directory, prefix=f".{target.name}.", suffix=".tmp")
            except OSError as exc:
                raise QKEnergyError(f"{show_path(requested)}: cannot write ({exc.strerror or exc})") from None
            os.close(fd)
            self._staged.append(_Staged(Path(name), target, requested))
        return Path(name)

    def commit(self) -> list[Path]:
        """Give each staged file its final permissions and move it into place; returns the paths."""
        self._closed = True
        try:
            new_mode = _new_file_mode()
            for item in self._staged:
                # mkstemp makes 0600 files: take the existing file's bits, or a plain open()'s.
                try:
                    mode = stat.S_IMODE(os.stat(item.target).st_mode)
                except FileNotFoundError:
                    mode = new_mode
                os.chmod(item.temporary, mode)
            for item in self._staged:
                os.replace(item.temporary, item.target)
        except BaseException:
            self.rollback()
            raise
        return [item.requested for item in self._staged]

    def rollback(self) -> None:
        """Remove every staged file not yet in place, and the directories this transaction made."""
        self._closed = True
        for item in self._staged:
            with contextlib.suppress(OSError):
                item.temporary.unlink()
        for directory in reversed(self._created):
            with contextlib.suppress(OSError):
                directory.rmdir()  # only when still empty

    def __enter__(self) -> OutputTransaction:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
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

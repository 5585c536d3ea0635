"""The one atomic writer (base/atomic.py): staged folders, names replaced whatever is there, the reason of a refusal."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from qkenergy.base import atomic
from qkenergy.base.atomic import OutputError, OutputTransaction, atomic_path


def test_staged_folder_replaces_the_old_one_whole(tmp_path: Path) -> None:
    folder = tmp_path / "report_files"
    folder.mkdir()
    (folder / "stale.png").write_text("old")
    with OutputTransaction() as outputs:
        staged = outputs.stage_directory(folder)
        (staged / "new.csv").write_text("new")
        outputs.stage(tmp_path / "report.html").write_text("page")
    assert sorted(p.name for p in folder.iterdir()) == ["new.csv"]  # swapped, not merged
    assert (tmp_path / "report.html").read_text() == "page"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report.html", "report_files"]  # nothing aside left


def test_failed_commit_puts_the_old_folder_back(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    folder, page = tmp_path / "report_files", tmp_path / "report.html"
    folder.mkdir()
    (folder / "old.csv").write_text("old")
    real = os.replace

    def fail_on_page(src: str | os.PathLike[str], dst: str | os.PathLike[str]) -> None:
        if Path(dst) == page:
            raise OSError(errno.ENOSPC, "No space left on device")
        real(src, dst)

    monkeypatch.setattr(atomic.os, "replace", fail_on_page)
    with pytest.raises(OSError, match="No space"), OutputTransaction() as outputs:
        (outputs.stage_directory(folder) / "new.csv").write_text("new")
        outputs.stage(page).write_text("page")
    assert sorted(p.name for p in folder.iterdir()) == ["old.csv"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report_files"]  # staged and aside folders gone


def test_a_file_where_a_folder_goes_is_refused_before_writing(tmp_path: Path) -> None:
    (tmp_path / "report_files").write_text("")
    with pytest.raises(OutputError, match="report_files: exists and is not a directory"):
        OutputTransaction().stage_directory(tmp_path / "report_files")


def test_replace_any_replaces_the_link_itself(tmp_path: Path) -> None:
    aim = tmp_path / "aim"
    aim.write_text("kept")
    link = tmp_path / "cache.npz"
    link.symlink_to(aim)
    with atomic_path(link, replace_any=True) as temporary:
        temporary.write_text("new")
    assert not link.is_symlink() and link.read_text() == "new" and aim.read_text() == "kept"
    with atomic_path(aim) as temporary:  # the default writes through a link; here a plain file
        temporary.write_text("through")
    assert aim.read_text() == "through"


def test_refusals_carry_the_system_reason(tmp_path: Path) -> None:
    (tmp_path / "a-directory").mkdir()
    with pytest.raises(OutputError) as caught, atomic_path(tmp_path / "a-directory", replace_any=True):
        pass
    assert caught.value.reason == os.strerror(errno.EISDIR)
    (tmp_path / "a-file").write_text("")
    with (
        pytest.raises(OutputError, match="a-file: not a directory") as caught,
        atomic_path(tmp_path / "a-file" / "x"),
    ):
        pass
    assert caught.value.reason == os.strerror(errno.ENOTDIR)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a-directory", "a-file"]

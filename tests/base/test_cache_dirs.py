"""The default cache folders (base/cache_dirs.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from qkenergy.base.cache_dirs import default_cache_dir, default_hub_cache


def test_xdg_cache_home_is_honoured(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert default_cache_dir() == tmp_path / "qkenergy"
    assert default_hub_cache() == tmp_path / "qkenergy" / "hub"


def test_empty_xdg_cache_home_falls_back_to_home(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", "")
    monkeypatch.setenv("HOME", str(tmp_path))
    assert default_cache_dir() == tmp_path / ".cache" / "qkenergy"

"""The package root: its public names, lazily imported, and one error class."""

from __future__ import annotations

import importlib.util
import re
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

import qkenergy as qk
from qkenergy.base.errors import QKEnergyError


def test_all_and_dir_list_the_public_names() -> None:
    assert dir(qk) == sorted(qk.__all__)
    for name in (
        "open",
        "analyze",
        "read",
        "Model",
        "Head",
        "Law",
        "NullLaw",
        "NullSpec",
        "Analysis",
        "QKEnergyError",
        "baseline",
        "Baseline",
        "verify",
        "Verification",
        "lobes",
        "LobeDeparture",
        "layouts",
        "Layouts",
        "coverage",
        "Coverage",
    ):
        assert name in qk.__all__
    for name in qk.__all__:
        assert getattr(qk, name) is not None, name
    assert qk.QKEnergyError is QKEnergyError


def test_importing_the_package_imports_nothing_heavy() -> None:
    probe = "import sys, qkenergy; print(sorted(m for m in sys.modules if m.split('.')[0] in ('numpy', 'pandas', 'matplotlib', 'qkenergy')))"
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "['qkenergy', 'qkenergy.base', 'qkenergy.base.version']"


# --- the distribution --------------------------------------------------------------------------------

ROOT = Path(__file__).resolve().parents[2]


def test_the_version_is_written_once_and_has_a_changelog_entry() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    assert "version" not in project["project"] and project["project"]["dynamic"] == ["version"]
    assert project["tool"]["setuptools"]["dynamic"]["version"] == {
        "attr": "qkenergy.base.version.__version__"
    }
    assert re.search(
        rf"^## {re.escape(qk.__version__)}\b", (ROOT / "CHANGELOG.md").read_text(encoding="utf-8"), re.M
    )


@pytest.mark.slow
def test_the_wheel_holds_the_demo_model_the_documentation_and_passes_twine(tmp_path: Path) -> None:
    pytest.importorskip("build", reason="the build package (pip install build) builds the wheel")
    leftover = (ROOT / "build").exists()  # setuptools stages the wheel in ROOT/build: removed after, if ours
    try:
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "build",
                "--wheel",
                "--no-isolation",
                "--outdir",
                str(tmp_path),
                str(ROOT),
            ],
            capture_output=True,
            text=True,
            timeout=600,
        )
    finally:
        if not leftover:
            shutil.rmtree(ROOT / "build", ignore_errors=True)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    (wheel,) = tmp_path.glob("qkenergy-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    package = ROOT / "src" / "qkenergy"
    shipped = {p.relative_to(package.parent).as_posix() for p in (package / "data").rglob("*") if p.is_file()}
    docs = {p.relative_to(package.parent).as_posix() for p in package.rglob("*.md")}
    assert {
        "qkenergy/data/all-MiniLM-L6-v2/model.safetensors",
        "qkenergy/data/all-MiniLM-L6-v2/LICENSE",
    } <= shipped
    assert shipped | docs | {"qkenergy/py.typed"} <= names
    metadata = zipfile.ZipFile(wheel).read(f"qkenergy-{qk.__version__}.dist-info/METADATA").decode()
    assert "License-Expression: MIT AND Apache-2.0" in metadata
    for extra in ("pandas", "tables", "plot", "report", "survey", "hub", "dtypes", "train", "all"):
        assert f"Provides-Extra: {extra}\n" in metadata, extra
    assert "Requires-Dist: pandas>=2.1; extra" in metadata  # pandas is an extra, not core
    if importlib.util.find_spec("twine") is not None:
        check = subprocess.run(
            [sys.executable, "-m", "twine", "check", "--strict", str(wheel)], capture_output=True, text=True
        )
        assert check.returncode == 0, check.stdout + check.stderr

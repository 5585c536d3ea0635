"""The package root: its public names, lazily imported, and one error class."""

from __future__ import annotations

import subprocess
import sys

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

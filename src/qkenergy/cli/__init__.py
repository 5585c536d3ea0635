"""The qkenergy command line (click): one module per command, gathered by :mod:`qkenergy.cli.main`.

``qkenergy.cli.cli`` is the click group and ``qkenergy.cli.main`` the console entry point
(``python -m qkenergy.cli`` runs it too).
"""

from __future__ import annotations

from qkenergy.cli.main import cli, main

__all__ = ["cli", "main"]

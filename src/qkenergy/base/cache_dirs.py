"""Where qkenergy keeps its caches by default: the null laws, and in ``hub/`` the fetched byte ranges.

One folder, so that ``--cache-dir DIR`` moves both: ``$XDG_CACHE_HOME/qkenergy``
(the XDG base-directory specification), or ``~/.cache/qkenergy`` when that
variable is unset or empty.
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["default_cache_dir", "default_hub_cache"]


def default_cache_dir() -> Path:
    """``$XDG_CACHE_HOME/qkenergy``, or ``~/.cache/qkenergy``.

    Returns
    -------
    pathlib.Path
    """
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "qkenergy"


def default_hub_cache() -> Path:
    """Where fetched byte ranges of hub models are kept by default: ``hub/`` in :func:`default_cache_dir`.

    Returns
    -------
    pathlib.Path
    """
    return default_cache_dir() / "hub"

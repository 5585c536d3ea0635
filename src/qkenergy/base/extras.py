"""The optional dependencies (pyproject's extras): one line naming the extra when one is missing.

The core (numpy, scipy, click, rich, threadpoolctl, gguf) reads every supported
checkpoint, prints its summary and writes CSV and JSON tables. Everything else is an
extra (pandas too: the Python API's DataFrames), and :func:`require` is called where its module is first imported::

    require("plot", "matplotlib")  # QKEnergyError: "... pip install 'qkenergy[plot]'"

:func:`missing_extra` turns a ModuleNotFoundError raised further down (an import the
calls above did not foresee) into the same line; the command line uses it.
"""

from __future__ import annotations

import importlib.util

from qkenergy.base.errors import QKEnergyError

__all__ = ["EXTRAS", "MissingExtra", "missing_extra", "require"]

# Top-level module -> the extra that installs it (pyproject.toml [project.optional-dependencies]).
EXTRAS: dict[str, str] = {
    "pandas": "pandas",
    "matplotlib": "plot",
    "plotly": "report",
    "kaleido": "report",
    "distributed": "survey",
    "dask": "survey",
    "pyarrow": "tables",
    "huggingface_hub": "hub",
    "ml_dtypes": "dtypes",
    "torch": "train",
    "transformers": "train",
    "accelerate": "train",
}


class MissingExtra(QKEnergyError):
    """An optional dependency is not installed; the message names the extra that installs it.

    Parameters
    ----------
    *args : object
        The message (as Exception's arguments).
    parameter : str, optional
        As :class:`~qkenergy.base.errors.QKEnergyError`'s (unused here).
    """


def _message(extra: str, module: str, purpose: str | None) -> str:
    why = f" ({purpose})" if purpose else ""
    return f"{module} is not installed{why}: pip install 'qkenergy[{extra}]'"


def require(extra: str, module: str, purpose: str | None = None) -> None:
    """Raise :class:`MissingExtra` unless ``module`` can be imported; it is found, not imported.

    Parameters
    ----------
    extra : str
        The extra of pyproject.toml that installs it, e.g. ``"plot"``.
    module : str
        The module's import name (its top-level package is looked for).
    purpose : str or None, optional
        What needs it, for the message (e.g. ``"--plot draws with it"``).

    Raises
    ------
    MissingExtra
        One line: what needs the module and ``pip install 'qkenergy[EXTRA]'``.
    """
    top = module.partition(".")[0]
    try:
        found = importlib.util.find_spec(top) is not None
    except (ImportError, ValueError):  # a module blocked in sys.modules (None) or a broken one
        found = False
    if not found:
        raise MissingExtra(_message(extra, top, purpose))


def missing_extra(error: ModuleNotFoundError) -> MissingExtra | None:
    """The one-line error for a module of an extra that failed to import, None for any other module.

    Parameters
    ----------
    error : ModuleNotFoundError
        The import's error (its ``name`` is the missing module).

    Returns
    -------
    MissingExtra or None
    """
    top = (error.name or "").partition(".")[0]
    extra = EXTRAS.get(top)
    return None if extra is None else MissingExtra(_message(extra, top, None))

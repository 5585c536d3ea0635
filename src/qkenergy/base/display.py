"""How a path or a name read from a file appears in a one-line message.

Shared by every layer that names a file or a tensor in an error or a warning:
control characters are escaped and a long text is cut, so that a message stays
one short line whatever the file system or the file holds.
"""

from __future__ import annotations

import os

__all__ = ["show_name", "show_path"]


def show_path(path: os.PathLike[str] | str, limit: int = 300) -> str:
    """The path for a one-line message: control characters escaped, a path longer than ``limit``
    characters cut in its middle (its start and its file name stay).

    Parameters
    ----------
    path : str or os.PathLike
        The path.
    limit : int
        The most characters shown.

    Returns
    -------
    str
    """
    text = repr(str(path))[1:-1]
    if len(text) <= limit:
        return text
    return f"{text[: limit // 2 - 2]}...{text[-(limit // 2 - 2) :]}"


def show_name(name: str, limit: int = 120) -> str:
    """A name read from a file (tensor, key), quoted, cut to ``limit`` characters.

    Parameters
    ----------
    name : str
        The name.
    limit : int
        The most characters shown; a longer name ends in "...".

    Returns
    -------
    str
    """
    return repr(name) if len(name) <= limit else repr(name[:limit]) + "..."

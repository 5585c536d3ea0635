"""User-facing errors: one line that names the file, tensor or argument and what was expected."""


class QKEnergyError(Exception):
    """An error caused by the user's input; the CLI prints it as one line and exits non-zero."""

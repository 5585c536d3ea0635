"""The package version (one place; the package root and every output's settings read it)."""

__version__ = "0.1.0"

"""Paths and names in one-line messages (base/display.py)."""

from __future__ import annotations

from qkenergy.base.display import show_name, show_path


def test_show_path_escapes_and_cuts_in_the_middle() -> None:
    assert show_path("a\nb.csv") == "a\\nb.csv"
    long = "d/" * 200 + "model.safetensors"
    shown = show_path(long, limit=40)
    assert len(shown) == 2 * (40 // 2 - 2) + 3 and shown.endswith("model.safetensors") and "..." in shown


def test_show_name_quotes_and_cuts() -> None:
    assert show_name("q_proj") == "'q_proj'"
    assert show_name("x" * 200, limit=5) == "'xxxxx'..."

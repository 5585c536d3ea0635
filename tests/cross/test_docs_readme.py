"""The README's opening: installing with pip and analysing one's own model, its Python lines running as
shown, then the two set-up commands of a clone."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text(encoding="utf-8")
MAKE_LINES = [
    "make demo   # creates .venv, installs qkenergy, analyses the embedded MiniLM and SmolLM2 side by side",
    "make test   # creates .venv, installs the test extra (CPU torch 2.13.0, transformers), runs the suite",
]


def _sections() -> list[tuple[str, str]]:
    """(title, body) of each ``## `` section of the README, in order."""
    parts = re.split(r"^## (.+)\n", README, flags=re.M)
    return list(zip(parts[1::2], parts[2::2], strict=True))


def test_the_readme_opens_with_pip_and_ones_own_model() -> None:
    (title, body), (make_title, make_body) = _sections()[:2]
    assert title == "Install and analyse your own model"
    commands = body.split("```\n", 2)[1].splitlines()
    assert commands[0] == "pip install qkenergy"
    shown = [line.split("#", 1)[0].split() for line in commands[1:]]
    assert all(words[:2] == ["qkenergy", "analyze"] for words in shown)
    arguments = [words[2] if len(words) > 2 else "" for words in shown]
    assert "" in arguments  # the embedded model
    assert any(a.endswith(".gguf") for a in arguments) and any(a.count("/") == 1 for a in arguments)
    assert any("--revision" in words for words in shown)
    assert "```python\n" in body and "qkenergy explain" in body
    assert make_title.startswith("Set-up from a clone")
    assert make_body.split("```\n", 2)[1].splitlines() == MAKE_LINES


def test_the_readmes_python_lines_run_as_shown(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The README's in-memory example, run as written on a tiny BERT that from_pretrained returns."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    code = _sections()[0][1].split("```python\n", 1)[1].split("```", 1)[0]
    config = transformers.BertConfig(
        hidden_size=32, num_attention_heads=4, num_hidden_layers=2, intermediate_size=64, vocab_size=64
    )
    torch.manual_seed(0)
    tiny = transformers.BertModel(config)
    asked = []

    def from_pretrained(name: str, *args: object, **kwargs: object) -> object:
        asked.append(name)
        return tiny

    monkeypatch.setattr(transformers.AutoModel, "from_pretrained", from_pretrained)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.chdir(tmp_path)
    namespace: dict[str, object] = {}
    exec(compile(code, "README.md", "exec"), namespace)
    assert asked == ["ORG/NAME"]
    result = namespace["result"]
    assert len(result.heads) == 8  # 2 layers of 4 heads
    assert (tmp_path / "heads.parquet").is_file()

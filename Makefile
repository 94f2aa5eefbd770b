# One Makefile for people and CI: `make demo` and `make test` each set up everything they need.
SHELL := /bin/bash
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
# The bpy wheel (pyproject.toml) is the local farm's Blender; it loads X11 client libraries and
# renders Eevee and Workbench headless through EGL with Mesa's llvmpipe (libegl-mesa0,
# libgl1-mesa-dri). Debian's `blender` (3.4) renders nothing: it builds test fixtures and the
# scenes (scenes/build_*.py, tests/e2e) and is the old runtime bench/ compares against.
BPY_RUNTIME := libegl1 libegl-mesa0 libgl1-mesa-dri libgl1 libx11-6 libxi6 libxxf86vm1 \
  libxfixes3 libxrender1 libxext6 libxkbcommon0 libsm6 libice6
# podman (with runc: crun refuses hybrid cgroups) runs the container farm; debootstrap makes its
# base image where no registry answers (farm.control.images).
APT_PACKAGES := redis-server ffmpeg blender bubblewrap $(BPY_RUNTIME) chromium tmux \
  podman runc debootstrap golang-github-containernetworking-plugin-dnsname
DATA ?= .farm
export FARM_CONFIG ?= $(CURDIR)/$(DATA)/config.json

.PHONY: setup system-packages venv tools image demo test test-fast unit lint typecheck bench docs up down clean

setup: system-packages venv tools

# Debian/Ubuntu packages: Redis (broker, ledger), ffmpeg (encode, stitch), the bpy wheel's
# system libraries, Debian's Blender for building fixture scenes, and Chromium (headless) for the
# job page's browser tests.
system-packages:
	@missing=""; for p in $(APT_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  echo "installing:$$missing"; \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq --no-install-recommends $$missing; \
	fi

$(BIN)/farm: pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[dev]'
	touch $@

venv: $(BIN)/farm

tools:
	bash infra/install-tools.sh

# The farm's images (farm-worker, farm-redis, farm-seaweedfs) with podman, or Docker where an engine
# answers; rebuilt only when their inputs change. BASE=auto: a debootstrap base where no registry
# answers; BASE=docker.io/library/debian:bookworm-slim where one does.
BASE ?= auto
image: setup
	$(BIN)/farm image --base $(BASE)

# Render the demo scene on a local farm and say where the video is. 4K on an NVIDIA GPU host.
demo: setup
	@if command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1; then \
	  size="--resolution 3840x2160 --samples 64"; else size="--resolution 480x270 --samples 8"; fi; \
	$(BIN)/farm up --data $(DATA) --workers 2 && \
	job=$$($(BIN)/farm submit scenes/demo.blend --frames 1-120 --chunk-size 10 $$size --wait --json | \
	  $(BIN)/python -c 'import json,sys; j=json.load(sys.stdin); print(j["id"]) if j["state"]=="done" else sys.exit("demo job " + j["state"] + ": " + j["error"])') && \
	mkdir -p out && $(BIN)/farm fetch $$job out/demo.mp4 && \
	echo "the demo video is at $(CURDIR)/out/demo.mp4 (Flower: see 'farm up' above; 'make down' stops the farm)" && \
	echo "the farm is still up, its config in $(FARM_CONFIG): try $(BIN)/farm jobs (in this folder farm finds ./.farm/config.json)"

up: venv
	$(BIN)/farm up --data $(DATA)

down:
	$(BIN)/farm down --data $(DATA)

test: setup lint typecheck
	$(BIN)/pytest -q -p no:cacheprovider --durations=15

# Unit and integration tests (a real Redis on loopback, no Blender farm): well under a minute.
test-fast: venv lint typecheck
	$(BIN)/pytest -q -p no:cacheprovider tests/unit tests/integration

unit: venv
	$(BIN)/pytest -q tests/unit

# The import contracts (pyproject.toml's [tool.importlinter]) are the house's floors.
lint: venv
	$(BIN)/ruff check farm workers tests bench scenes docs
	$(BIN)/lint-imports
	$(BIN)/ruff format --check farm workers tests bench scenes docs

typecheck: venv
	$(BIN)/mypy

bench: setup
	$(BIN)/python -m bench

# The tables in docs/ made from the code and bench/results/*.json (docs/tables.py); a test fails
# while a page differs from them.
docs: venv
	$(BIN)/python docs/tables.py

clean: down
	rm -rf $(DATA) out

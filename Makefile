# Reach IK: two commands on a fresh machine — `make demo` and `make test`.
# Both create/refresh a virtualenv with pinned dependencies first. `make test BPY=5.2.3` (the 5.2 LTS) or
# `make test BPY=4.2.23` runs the same tiers on another bpy wheel, in its own virtualenv.

BPY ?= 4.5.4
# bpy wheels are built for one Python: 3.11 up to 5.0.x, 3.13 from 5.1 (PyPI has no other). PYTHON=... overrides.
PY_VERSION := $(if $(filter 5.1,$(firstword $(shell printf '%s\n' 5.1 $(BPY) | sort -V))),3.13,3.11)
# A `pythonX.Y` on PATH may be a pyenv shim that refuses to run (another version is active), so take the first
# candidate that actually starts: PATH, then pyenv's installs (newest first). Empty when there is none.
PYENV_ROOT ?= $(HOME)/.pyenv
find_python = $(shell for p in python$(1) $$(ls -d $(PYENV_ROOT)/versions/$(1).*/bin/python$(1) 2>/dev/null | sort -rV); \
	do "$$p" -c '' >/dev/null 2>&1 && { command -v "$$p"; break; }; done)
PYTHON ?= $(call find_python,$(PY_VERSION))
ifeq ($(BPY),4.5.4)
VENV ?= .venv
else
VENV ?= .venv-bpy-$(BPY)
endif
PY := $(VENV)/bin/python
STAMP := $(VENV)/.reach-bpy-$(BPY)
VERSION := $(shell sed -n 's/^version = "\(.*\)"/\1/p' blender_manifest.toml)
ZIP := dist/reach_ik-$(VERSION).zip
RESULTS := .test-results/bpy-$(BPY)
export PYTHONDONTWRITEBYTECODE := 1

.PHONY: venv test lint unit blender e2e docs docs-test build demo bench clean

venv: $(STAMP)

$(STAMP): requirements/dev.txt Makefile
	@test -n "$(PYTHON)" || { echo "bpy $(BPY) needs Python $(PY_VERSION): no working python$(PY_VERSION) on PATH" \
		"or under $(PYENV_ROOT)/versions (install one, e.g. 'pyenv install $(PY_VERSION)', or pass PYTHON=...)" >&2; exit 1; }
	@echo "== virtualenv $(VENV) (bpy $(BPY), $(PYTHON)) =="
	@# A venv left from another interpreter (e.g. a 3.11 one from before bpy 5.1 needed 3.13) cannot take the wheel.
	@want=$$($(PYTHON) -c 'import sys; print(sys.version_info[:2])') && \
	if test -x $(PY) && test "$$($(PY) -c 'import sys; print(sys.version_info[:2])')" != "$$want"; then \
		echo "$(VENV) runs another Python than $(PYTHON): recreating it"; rm -rf $(VENV); fi
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	@$(PY) -m pip install -q --disable-pip-version-check --upgrade pip
	$(PY) -m pip install -q --disable-pip-version-check "bpy==$(BPY)" -r requirements/dev.txt
	@touch $(STAMP)

test: $(STAMP)
	@echo "== Reach IK tests: bpy $(BPY) ($(VENV)), BLENDER=$${BLENDER:-unset} =="
	@rm -rf $(RESULTS) && mkdir -p $(RESULTS)
	@status=0; \
	$(MAKE) --no-print-directory lint || status=1; \
	$(MAKE) --no-print-directory unit || status=1; \
	$(MAKE) --no-print-directory blender || status=1; \
	$(MAKE) --no-print-directory e2e || status=1; \
	$(MAKE) --no-print-directory docs-test || status=1; \
	$(PY) tools/summarize_tests.py $(RESULTS) || status=1; \
	exit $$status

# Tier 1: ruff everywhere; mypy --strict on solvers/ (pure numpy) and mypy on the bpy layer against
# fake-bpy-module. mypy sees the checkout as the package `reach_ik` through a link, as Blender does.
lint: $(STAMP)
	@echo "== tier 1: ruff + mypy =="
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .
	@mkdir -p .typecheck && ln -sfn .. .typecheck/reach_ik
	MYPYPATH=.typecheck $(PY) -m mypy -p reach_ik
	@mkdir -p $(RESULTS)
	@echo "lint: 1 passed, 0 failed" > $(RESULTS)/lint.txt

# Tier 2: plain pytest, no bpy anywhere.
unit: $(STAMP)
	@echo "== tier 2: tests/unit (numpy only) =="
	@mkdir -p $(RESULTS)
	$(PY) -m pytest tests/unit -q -p no:cacheprovider --junitxml=$(RESULTS)/unit.xml

# Tier 3: in-process on the bpy wheel, the add-on loaded as an extension.
blender: $(STAMP)
	@echo "== tier 3: tests/blender (bpy $(BPY) wheel) =="
	@mkdir -p $(RESULTS)
	$(PY) -m pytest tests/blender -q -p no:cacheprovider --junitxml=$(RESULTS)/blender.xml

# Tier 4: the real Blender binary given by BLENDER (skipped, with the reason, when unset).
e2e: $(STAMP)
	@echo "== tier 4: tests/e2e (real Blender: $${BLENDER:-unset}) =="
	@mkdir -p $(RESULTS)
	$(PY) -m pytest tests/e2e -q -rs -p no:cacheprovider --junitxml=$(RESULTS)/e2e.xml

# Tier 5: the manual built in strict mode (a broken link, a missing image or an unexplained chain message
# fails), then opened in headless Chromium: every page reached through the navigation, every image loaded, a
# screenshot of the front page in .test-results/. Debian's chromium is installed when missing and we are root.
docs-test: $(STAMP)
	@echo "== tier 5: tests/docs (strict manual build, the site in headless Chromium) =="
	@mkdir -p $(RESULTS)
	@command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1 || \
	if test "$$(id -u)" = 0 && command -v apt-get >/dev/null 2>&1; then \
		echo "installing Debian's chromium for the docs tier"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; \
	else echo "no chromium, and not root with apt-get to install it: the browser test will say it is skipped"; fi
	NO_MKDOCS_2_WARNING=1 $(PY) -m pytest tests/docs -q -rs -p no:cacheprovider --junitxml=$(RESULTS)/docs.xml

# The manual, built into site/ (open site/index.html). The troubleshooting page is generated on the way.
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(PY) -m mkdocs build --strict

# The shippable zip, built and validated by Blender's own extension tool (stdlib-only, from the wheel).
build: $(STAMP)
	@mkdir -p dist
	$(PY) tools/build.py --output-dir dist

demo: $(STAMP)
	$(PY) demo/run_demo.py

bench: $(STAMP)
	$(PY) bench/solvers.py
	$(PY) bench/scalar.py
	$(PY) bench/live.py
	$(PY) bench/lean.py
	$(PY) bench/bake.py
	$(PY) bench/render.py

clean:
	rm -rf dist site .test-results .typecheck .mypy_cache .ruff_cache .pytest_cache .hypothesis

# Two commands do all the set-up: `make studio` and `make test`. Everything lives in .venv.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
PROJECT ?= presets/projects/gpt3-dgx-a100.json
export QT_API := pyside6

.PHONY: studio test test-fast bench lint package screenshots clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

# Reinstall only when the project's metadata changes.
$(VENV)/.installed: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e .
	@touch $@

$(VENV)/.installed-test: pyproject.toml $(VENV)/.installed
	$(BIN)/python -m pip install --quiet -e '.[test]'
	@touch $@

studio: $(VENV)/.installed
	@if [ -z "$$DISPLAY$$WAYLAND_DISPLAY" ] && [ "$$(uname)" = "Linux" ] && [ -z "$$QT_QPA_PLATFORM" ]; then \
	  echo "No display found (DISPLAY and WAYLAND_DISPLAY are unset), so the studio window cannot open here."; \
	  echo "To see it anyway, render it offscreen to a PNG:"; \
	  echo "  $(BIN)/tilewright studio $(PROJECT) --run --screenshot studio.png"; \
	else \
	  $(BIN)/python -m tilewright.studio.qt_probe && $(BIN)/tilewright studio $(PROJECT); \
	fi

# The whole suite (what CI runs), slow tests included: the Ray cluster, the wheel built and installed.
test: $(VENV)/.installed-test
	@QT_QPA_PLATFORM=offscreen $(BIN)/python -m tilewright.studio.qt_probe
	QT_QPA_PLATFORM=offscreen $(BIN)/python -m pytest

# For developers: the same without the tests marked slow.
test-fast: $(VENV)/.installed-test
	@QT_QPA_PLATFORM=offscreen $(BIN)/python -m tilewright.studio.qt_probe
	QT_QPA_PLATFORM=offscreen $(BIN)/python -m pytest -m "not slow"

bench: $(VENV)/.installed
	@for b in benchmarks/bench_*.py; do echo "== $$b"; $(BIN)/python $$b || exit 1; done

lint: $(VENV)/.installed-test
	$(BIN)/ruff check engine studio tests benchmarks packaging

# PyInstaller follows imports through sys.path and does not see the editable install's import hook, so the
# app is built from a wheel installed (with its dependencies) into a venv of its own, build/package-venv.
# The wheel is rebuilt from a clean build/lib, so a module moved or deleted since the last build is not in it.
PKG_VENV := build/package-venv

$(PKG_VENV)/bin/python:
	$(PYTHON) -m venv $(PKG_VENV)
	$(PKG_VENV)/bin/python -m pip install --quiet --upgrade pip "pyinstaller>=6.5"

package: $(PKG_VENV)/bin/python
	rm -rf build/lib build/bdist.* build/wheel
	$(PKG_VENV)/bin/python -m pip wheel --quiet --no-deps --wheel-dir build/wheel .
	$(PKG_VENV)/bin/python -m pip install --quiet build/wheel/tilewright-*.whl
	$(PKG_VENV)/bin/python -m pip install --quiet --force-reinstall --no-deps build/wheel/tilewright-*.whl
	$(PKG_VENV)/bin/pyinstaller --noconfirm --distpath dist --workpath build/pyinstaller packaging/tilewright.spec

screenshots: $(VENV)/.installed
	QT_QPA_PLATFORM=offscreen $(BIN)/tilewright studio $(PROJECT) --run --screenshot packaging/screenshots/studio.png --size 1600x1000

clean:
	rm -rf $(VENV) build dist .pytest_cache

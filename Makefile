# Two commands do all the set-up: `make studio` and `make test`. Everything lives in .venv.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
PROJECT ?= presets/projects/gpt3-dgx-a100.json
export QT_API := pyside6

.PHONY: studio test bench lint package screenshots clean

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

test: $(VENV)/.installed-test
	@QT_QPA_PLATFORM=offscreen $(BIN)/python -m tilewright.studio.qt_probe
	QT_QPA_PLATFORM=offscreen $(BIN)/python -m pytest

bench: $(VENV)/.installed
	@for b in benchmarks/bench_*.py; do echo "== $$b"; $(BIN)/python $$b || exit 1; done

lint: $(VENV)/.installed-test
	$(BIN)/ruff check engine studio tests benchmarks

package: $(VENV)/.installed
	$(BIN)/python -m pip install --quiet "pyinstaller>=6.5"
	$(BIN)/pyinstaller --noconfirm --distpath dist --workpath build packaging/tilewright.spec

screenshots: $(VENV)/.installed
	QT_QPA_PLATFORM=offscreen $(BIN)/tilewright studio $(PROJECT) --run --screenshot packaging/screenshots/studio.png --size 1600x1000

clean:
	rm -rf $(VENV) build dist .pytest_cache

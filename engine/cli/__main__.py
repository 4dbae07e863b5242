"""``python -m tilewright.engine.cli``: the same as the ``tilewright`` console script."""

from tilewright.engine.cli.dispatch import entry

if __name__ == "__main__":  # importing the module (the no-Qt test imports every file) must not run a command
    entry()

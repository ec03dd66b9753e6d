"""``python -m contextfold``: the command line (same as the ``contextfold`` script)."""

from .cli import main

if __name__ == "__main__":
    raise SystemExit(main())

"""``python -m tokenwatt`` runs the command line."""

from tokenwatt.cli import main

if __name__ == "__main__":
    raise SystemExit(main())

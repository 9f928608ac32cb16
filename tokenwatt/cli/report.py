"""``tokenwatt report RUN...``: combine run files into one result."""

from __future__ import annotations

import argparse
from pathlib import Path

from tokenwatt.errors import NotBuiltError

__all__ = ["register", "run"]


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the sub-command."""
    p = sub.add_parser("report", help="combine run files into a result (results/<id>.json)")
    p.add_argument("runs", nargs="+", type=Path, metavar="RUN")
    p.add_argument("--title", required=True)
    p.add_argument("--id", dest="result_id")
    p.add_argument("--out", type=Path)
    p.add_argument("--allow-mismatch", action="store_true")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    """Not built yet (issue: `tokenwatt report`)."""
    raise NotBuiltError("'tokenwatt report' is not built yet; nothing was written")

"""``tokenwatt measure`` (alias ``run``): sweep to the SLO boundary and write a run file."""

from __future__ import annotations

import argparse
from pathlib import Path

from tokenwatt.errors import NotBuiltError

__all__ = ["register", "run"]


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``measure`` and its alias ``run``."""
    p = sub.add_parser(
        "measure",
        aliases=["run"],
        help="measure one configuration: sweep to the SLO boundary, write runs/*.json",
    )
    p.add_argument(
        "--spec", required=True, help="spec file (a bare name is also looked up in specs/)"
    )
    p.add_argument("--label", required=True, help="name of this configuration")
    p.add_argument("--role", required=True, choices=["baseline", "tuned", "other"])
    p.add_argument("--out", required=True, type=Path, help="run file to write")
    p.add_argument("--quick", action="store_true", help="short windows, for validation only")
    p.add_argument("--no-accuracy", action="store_true", help="skip the accuracy check")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    """Not built yet (issue: `tokenwatt measure`)."""
    raise NotBuiltError("'tokenwatt measure' is not built yet; nothing was measured or written")

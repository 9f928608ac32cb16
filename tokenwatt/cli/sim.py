"""``tokenwatt sim``: serve the embedded engine simulator."""

from __future__ import annotations

import argparse

from tokenwatt.errors import NotBuiltError

__all__ = ["register", "run"]


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the sub-command."""
    p = sub.add_parser("sim", help="serve the embedded engine simulator (OpenAI API)")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    """Not built yet (issue: `tokenwatt sim`)."""
    raise NotBuiltError("'tokenwatt sim' is not built yet")

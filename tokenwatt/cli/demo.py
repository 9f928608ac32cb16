"""``tokenwatt demo``: simulator, the seed's protocol in quick mode, a report and the site."""

from __future__ import annotations

import argparse

from tokenwatt.errors import NotBuiltError

__all__ = ["register", "run"]


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the sub-command."""
    p = sub.add_parser(
        "demo", help="run the whole pipeline on the embedded simulator and build the site"
    )
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    """Not built yet (issue: `tokenwatt report` / demo)."""
    raise NotBuiltError(
        "'tokenwatt demo' is not built yet: it needs 'sim', 'measure' and 'report'."
        " 'tokenwatt validate specs/*.yaml results/*.json' works today."
    )

"""The ``tokenwatt`` command line: argument parsing, logging set-up and error reporting.

Only this package writes to the terminal. Each sub-command lives in its own module with a
``register(subparsers)`` function; a :class:`~tokenwatt.errors.TokenwattError` becomes one red
line on stderr and the error's exit status.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Callable, Sequence

from rich.console import Console
from rich.logging import RichHandler
from rich.markup import escape

from tokenwatt import __version__, redact
from tokenwatt.cli import (
    compare,
    demo,
    export,
    measure,
    plan,
    report,
    schema,
    sim,
    suite,
    validate,
)
from tokenwatt.errors import TokenwattError

__all__ = ["build_parser", "main"]

Handler = Callable[[argparse.Namespace], int]

_SUBCOMMANDS = (measure, report, compare, export, validate, schema, sim, suite, plan, demo)


def build_parser() -> argparse.ArgumentParser:
    """The argument parser with every sub-command registered."""
    parser = argparse.ArgumentParser(
        prog="tokenwatt",
        description="Measure LLM serving goodput per second and per watt under a latency SLO.",
    )
    parser.add_argument("--version", action="version", version=f"tokenwatt {__version__}")
    parser.add_argument("-v", "--verbose", action="count", default=0, help="more log output")
    parser.add_argument("-q", "--quiet", action="store_true", help="only warnings and errors")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for module in _SUBCOMMANDS:
        module.register(sub)
    return parser


def _setup_logging(verbose: int, quiet: bool) -> None:
    level = logging.WARNING if quiet else logging.DEBUG if verbose > 0 else logging.INFO
    root = logging.getLogger()
    root.setLevel(level)
    if sys.stderr.isatty():
        handler: logging.Handler = RichHandler(
            console=Console(stderr=True), show_path=False, rich_tracebacks=False
        )
        handler.setFormatter(logging.Formatter("%(message)s"))
    else:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    redact.guard_handlers([handler])
    root.handlers[:] = [handler]
    # Third-party chatter stays out of the way unless asked for.
    for noisy in ("httpx", "httpcore", "asyncio", "uvicorn.access", "markdown_it", "PIL"):
        logging.getLogger(noisy).setLevel(logging.WARNING if verbose < 2 else logging.DEBUG)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line and return its exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    _setup_logging(args.verbose, args.quiet)
    err = Console(stderr=True, highlight=False, soft_wrap=True)
    handler: Handler = args.handler
    try:
        return handler(args)
    except TokenwattError as exc:
        # Escaped: a message may hold brackets ("tokenwatt[parquet]") that are not markup.
        err.print(f"[red]{type(exc).__name__}[/red]: {escape(str(exc))}", markup=True)
        return exc.exit_code
    except KeyboardInterrupt:
        err.print("[red]Interrupted[/red]")
        return 130

"""Helpers shared by the sub-commands (terminal output only)."""

from __future__ import annotations

from rich.console import Console
from rich.markup import escape

__all__ = ["err_console", "escape", "out_console"]


def out_console() -> Console:
    """Console on stdout, for the data a command produces."""
    return Console(highlight=False, soft_wrap=True)


def err_console() -> Console:
    """Console on stderr, for messages about the command."""
    return Console(stderr=True, highlight=False, soft_wrap=True)

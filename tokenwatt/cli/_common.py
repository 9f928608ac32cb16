"""Helpers shared by the sub-commands (terminal output only)."""

from __future__ import annotations

import argparse
import logging
import re

from rich.console import Console
from rich.markup import escape

from tokenwatt.schema.result import RESULT_ID_MAX_CHARS, RESULT_ID_PATTERN

__all__ = [
    "err_console",
    "escape",
    "out_console",
    "progress_replaces_info_log",
    "result_id_arg",
    "text_arg",
]

_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_MAX_TEXT_CHARS = 500


def text_arg(value: str) -> str:
    """An argparse type for free text (``--label``, ``--title``): not blank, one line.

    Checked when the command line is parsed, so a bad value fails before the first probe,
    not when the run file is written at the end.
    """
    if not value.strip():
        raise argparse.ArgumentTypeError("must not be empty")
    if _CONTROL.search(value):
        raise argparse.ArgumentTypeError("must be one line of text (no control characters)")
    if len(value) > _MAX_TEXT_CHARS:
        raise argparse.ArgumentTypeError(f"must be at most {_MAX_TEXT_CHARS} characters")
    return value


def result_id_arg(value: str) -> str:
    """An argparse type for ``report --id``: a file name, never a path."""
    if not re.fullmatch(RESULT_ID_PATTERN, value) or len(value) > RESULT_ID_MAX_CHARS:
        raise argparse.ArgumentTypeError(
            f"{value!r} is not a result id: lower-case letters, digits, '.', '_' and '-',"
            f" starting with a letter or digit, at most {RESULT_ID_MAX_CHARS} characters"
            " (it names results/<id>.json; use --out for another folder)"
        )
    return value


def out_console() -> Console:
    """Console on stdout, for the data a command produces."""
    return Console(highlight=False, soft_wrap=True)


def err_console() -> Console:
    """Console on stderr, for messages about the command."""
    return Console(stderr=True, highlight=False, soft_wrap=True)


def progress_replaces_info_log(args: argparse.Namespace) -> None:
    """Keep tokenwatt's INFO log lines off stderr unless asked for with ``-v``.

    For a command whose own progress lines say what those log lines would, so that nothing is
    printed twice.
    """
    if not getattr(args, "verbose", 0):
        logging.getLogger("tokenwatt").setLevel(logging.WARNING)

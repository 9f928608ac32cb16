"""Where a run was made: tokenwatt's version and git commit, host, Python, spec hash."""

from __future__ import annotations

import logging
import platform
import socket
import subprocess
from pathlib import Path

from tokenwatt import __version__

__all__ = [
    "git_commit",
    "host_name",
    "platform_text",
    "python_version",
    "tokenwatt_version",
]

logger = logging.getLogger(__name__)


def git_commit(path: Path | None = None) -> str | None:
    """The commit of the git checkout tokenwatt runs from (``+dirty`` if modified), or None."""
    where = path or Path(__file__).resolve().parent
    try:
        head = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=where, capture_output=True, text=True, timeout=5
        )
        if head.returncode != 0:
            return None
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=where,
            capture_output=True,
            text=True,
            timeout=5,
        )
    except (OSError, subprocess.SubprocessError) as exc:
        logger.debug("no git commit: %s", exc)
        return None
    commit = head.stdout.strip()
    return f"{commit}+dirty" if dirty.stdout.strip() else commit


def host_name() -> str:
    """This machine's host name."""
    return socket.gethostname()


def platform_text() -> str:
    """Operating system and machine, e.g. ``Linux-6.1.0-x86_64-with-glibc2.36``."""
    return platform.platform()


def python_version() -> str:
    """The running Python's version."""
    return platform.python_version()


def tokenwatt_version() -> str:
    """The installed tokenwatt version."""
    return __version__

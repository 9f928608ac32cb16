"""The open-file budget of a run: every stream in flight is a socket, and a socket is a file.

A load worker holds up to ``measurement.max_concurrency`` streams (the whole cap when it runs
alone), each a TCP connection and so a file descriptor, beside :data:`RESERVE_FILES` for
everything else a process opens (pipes to the coordinator, log and run files, the engine's
``/metrics`` and the power source's connections, Python's own imports). Out of descriptors,
``connect()`` fails with ``EMFILE``: such requests are ``client_error`` and make their probe
client-bound, so nothing wrong would be published, but the GPU time would be lost.

So before the first probe (:func:`ensure_open_files`): when the soft limit (``ulimit -Sn``,
often 1,024) is below what the cap needs, it is raised, up to the hard limit (``ulimit -Hn``;
systemd's default is 524,288); worker processes started later inherit it. When even the hard
limit is below it, the run is refused with what to change. Platforms without ``resource``
(Windows) are not checked.
"""

from __future__ import annotations

import logging

from tokenwatt.errors import InputError

try:
    import resource
except ImportError:  # pragma: no cover - Windows
    resource = None  # type: ignore[assignment]

__all__ = ["RESERVE_FILES", "ensure_open_files", "files_needed"]

logger = logging.getLogger(__name__)

RESERVE_FILES = 256
"""Descriptors a load worker may need beside its streams."""


def files_needed(max_concurrency: int) -> int:
    """Descriptors one load worker may hold with ``max_concurrency`` streams in flight."""
    return max_concurrency + RESERVE_FILES


def ensure_open_files(max_concurrency: int) -> int | None:
    """Raise this process's soft open-file limit to what the cap needs; the limit in force.

    None where limits cannot be read (no ``resource`` module).

    Raises:
        InputError: the hard limit is below what ``max_concurrency`` needs (exit 2).
    """
    if resource is None:  # pragma: no cover - Windows
        return None
    needed = files_needed(max_concurrency)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    unlimited = resource.RLIM_INFINITY
    if soft == unlimited or soft >= needed:
        return soft
    if hard != unlimited and hard < needed:
        raise InputError(
            f"measurement.max_concurrency {max_concurrency:,} needs about {needed:,} open files"
            f" in a load worker (a socket per stream, {RESERVE_FILES} besides), but this"
            f" process may open at most {hard:,} (the hard limit, ulimit -Hn): raise the hard"
            " limit (limits.conf, systemd's LimitNOFILE, docker --ulimit nofile) or lower"
            f" measurement.max_concurrency to {max(1, hard - RESERVE_FILES):,} or less"
        )
    target = needed if hard == unlimited else max(needed, min(hard, 1 << 20))
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    except (ValueError, OSError) as exc:
        raise InputError(
            f"could not raise the open-file limit from {soft:,} to {target:,} for"
            f" measurement.max_concurrency {max_concurrency:,} ({exc}); raise it with ulimit -n"
            " before the run, or lower measurement.max_concurrency"
        ) from exc
    logger.info(
        "open-file limit raised from %d to %d (measurement.max_concurrency %d)",
        soft,
        target,
        max_concurrency,
    )
    return target

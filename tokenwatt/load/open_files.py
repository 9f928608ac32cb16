"""The open-file budget of a run: every stream in flight is a socket, and a socket is a file.

A load worker holds its share of ``measurement.max_concurrency`` streams (the whole cap when it
runs alone), each a TCP connection and so a file descriptor, beside :data:`RESERVE_FILES` for
everything else a process opens (pipes to the coordinator, log and run files, the engine's
``/metrics`` and the power source's connections, Python's own imports). Out of descriptors,
``connect()`` fails with ``EMFILE``: such requests are ``client_error`` and make their probe
client-bound, so nothing wrong would be published, but the GPU time would be lost.

So before the first probe (:func:`ensure_open_files`): the limit is per process, so a cap one
process may not hold is split over as many load workers as it takes (up to one per CPU: the
fewest such that each one's share fits under the hard limit, ``ulimit -Hn``), and the run uses
at least that many at every rate. When the soft limit (``ulimit -Sn``, often 1,024) is below
what a worker's share needs, it is raised, up to the hard limit (systemd's default is 524,288);
worker processes started later inherit it. When even one share per CPU does not fit, the run is
refused with what to change. Platforms without ``resource`` (Windows) are not checked.
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


def files_needed(max_concurrency: int, workers: int = 1) -> int:
    """Descriptors one of ``workers`` load workers may hold when they share ``max_concurrency``."""
    return -(-max_concurrency // workers) + RESERVE_FILES


def ensure_open_files(max_concurrency: int, *, max_workers: int = 1) -> int:
    """Raise this process's soft open-file limit to what a worker's share needs.

    Returns the fewest load workers (at most ``max_workers``) among which the cap's streams fit
    under the hard limit: 1 when one process may hold them all, or where limits cannot be read
    (no ``resource`` module).

    Raises:
        InputError: even ``max_workers`` workers' shares exceed the hard limit (exit 2).
    """
    if resource is None:  # pragma: no cover - Windows
        return 1
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    unlimited = resource.RLIM_INFINITY
    workers = 1
    if hard != unlimited:
        while workers < max_workers and files_needed(max_concurrency, workers) > hard:
            workers += 1
    needed = files_needed(max_concurrency, workers)
    if workers > 1 and needed <= hard:
        logger.info(
            "measurement.max_concurrency %d is split over at least %d load workers: one process"
            " may open %d files (the hard limit)",
            max_concurrency,
            workers,
            hard,
        )
    if soft == unlimited or soft >= needed:
        return workers
    if hard != unlimited and hard < needed:
        most = max(1, hard - RESERVE_FILES) * max_workers
        spread = (
            f" in each of {max_workers} load workers (one per CPU; a socket per stream"
            if max_workers > 1
            else " in a load worker (a socket per stream"
        )
        raise InputError(
            f"measurement.max_concurrency {max_concurrency:,} needs about {needed:,} open files"
            f"{spread}, {RESERVE_FILES} besides), but this process may open at most {hard:,} (the"
            " hard limit, ulimit -Hn): raise the hard limit (limits.conf, systemd's"
            " LimitNOFILE, docker --ulimit nofile) or lower measurement.max_concurrency to"
            f" {most:,} or less"
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
        "open-file limit raised from %d to %d (measurement.max_concurrency %d over at least"
        " %d load worker(s))",
        soft,
        target,
        max_concurrency,
        workers,
    )
    return workers

"""Redfish sessions that a killed run left open: recorded while open, ended by the next run.

A BMC has few session slots (often 4 to 8) and ends an abandoned session only when its own
timeout runs out (often 30 minutes). :class:`~tokenwatt.power.redfish.RedfishSource` deletes its
session on every way out but a SIGKILL (or a lost machine), so a few killed runs in a row could
lock the user out of the BMC. Each open session is therefore recorded in
``redfish-sessions.json`` in tokenwatt's state folder (:func:`tokenwatt.store.state_dir`), and
its entry removed when the session is deleted. The next run against the same BMC and user, once
logged in, deletes every recorded session whose process is gone and drops its entry.

An entry holds the BMC's URL, the user, the session's URL (the login's ``Location``), the host,
the process's pid and start time, and when the session was opened; never the token or the
password (the URLs and the user name are no secrets: they are logged too). A process is gone
when its pid is not running (or is a zombie), or is running but started at another time: the pid
was reused. The start time is ``/proc/<pid>/stat``'s, so where there is no ``/proc`` only the pid
is checked. An entry from another host (a home folder shared over NFS) cannot be judged by its
pid: it is left alone, and dropped, without a request, once it is a day old.

An answer of 2xx or 404 (the BMC had already ended it) to the DELETE drops the entry; any other
answer, or none, is warned about, and the entry is kept for the next run until it is a day old
(past any BMC's session timeout); each new entry drops, whatever their BMC, the day-old entries
of runs that are gone. A recorded URL that is now the URL of this run's own session or
of a live run's is dropped without a DELETE: the BMC has given the id to a new session, so the
old one is gone, and deleting it would end a live one.

The file is rewritten whole (temporary file, then ``os.replace``) under an ``fcntl`` lock on a
sibling lock file, so concurrent runs keep each other's entries. This is bookkeeping: a file that
cannot be read, parsed, locked or written is warned about (a bad one is started afresh) and
never stops a measurement.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import fcntl
import logging
import os
import socket
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from pydantic import AwareDatetime, Field, ValidationError

from tokenwatt import store
from tokenwatt.errors import WriteError
from tokenwatt.schema.base import StrictModel

__all__ = [
    "MAX_AGE",
    "STATE_FILE",
    "Cleanup",
    "SessionLedger",
    "SessionRecord",
    "SessionsFile",
    "plan_cleanup",
    "process_alive",
    "process_start_ticks",
]

logger = logging.getLogger(__name__)

STATE_FILE = "redfish-sessions.json"
"""The file's name in the state folder."""
MAX_AGE = dt.timedelta(days=1)
"""Age after which an entry is dropped even though its session could not be deleted: every
BMC's session timeout has run out by then."""
_LOCK_WAIT_S = 5.0
"""Longest wait for another run's lock (held only while the file is read and rewritten)."""


class SessionRecord(StrictModel):
    """One Redfish session that a tokenwatt process opened and has not deleted yet."""

    bmc_url: str = Field(description="The BMC's root URL, https://host[:port]")
    username: str = Field(description="The BMC user the session was opened for")
    session_url: str = Field(description="The session's URL: the login's Location header")
    host: str = Field(description="Host name of the machine the process ran on")
    pid: int = Field(gt=0, description="Process id of the run that opened the session")
    pid_start_ticks: int | None = Field(
        description="The process's start, in clock ticks after boot (/proc/<pid>/stat field 22);"
        " None where not known"
    )
    opened_at: AwareDatetime = Field(description="When the session was opened")


class SessionsFile(StrictModel):
    """The state file: every recorded session, of every BMC and user."""

    format: Literal[1] = Field(default=1, description="Version of this file's layout")
    sessions: list[SessionRecord] = Field(
        default_factory=list, description="Sessions opened and not deleted yet"
    )


@dataclass(frozen=True)
class Cleanup:
    """What to do with the recorded sessions of one BMC and user at login."""

    delete: list[SessionRecord]
    """Sessions of processes that are gone: DELETE them at the BMC, then drop them."""
    drop: list[SessionRecord]
    """Entries to drop without a request (the id was reused, or another host's old entry)."""


def _proc_stat(pid: int) -> tuple[str, int] | None:
    """The state letter and start ticks of ``pid`` from ``/proc``; None = no such file."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # Field 2, the command name, is in parentheses and may itself hold spaces and parentheses;
    # the fields after the last ')' start at field 3 (the state), so field 22 is the 20th.
    fields = text.rpartition(")")[2].split()
    try:
        return fields[0], int(fields[19])
    except (IndexError, ValueError):
        return None


def process_start_ticks(pid: int) -> int | None:
    """When process ``pid`` started, in clock ticks after boot; None where not known."""
    stat = _proc_stat(pid)
    return stat[1] if stat is not None else None


def process_alive(pid: int, start_ticks: int | None) -> bool:
    """Whether process ``pid`` still runs and is the one that started at ``start_ticks``.

    Args:
        pid: the recorded process id (> 0).
        start_ticks: its recorded start (:func:`process_start_ticks`); None = check the pid only.
    """
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # it runs, as another user
    stat = _proc_stat(pid)
    if stat is None:
        return True  # no /proc to say more: the pid runs
    state, ticks = stat
    if state == "Z":  # killed, and not yet reaped by its parent
        return False
    return start_ticks is None or ticks == start_ticks


def _record_alive(record: SessionRecord) -> bool:
    return process_alive(record.pid, record.pid_start_ticks)


def plan_cleanup(
    records: Iterable[SessionRecord],
    *,
    bmc_url: str,
    username: str,
    own_session_url: str | None,
    host: str,
    now: dt.datetime,
    alive: Callable[[SessionRecord], bool] = _record_alive,
) -> Cleanup:
    """Which recorded sessions of ``bmc_url`` and ``username`` to end, and which to forget.

    Args:
        records: every entry of the state file.
        bmc_url: the BMC just logged in to.
        username: the user logged in as.
        own_session_url: the URL of the session just opened; None = none (basic auth).
        host: this machine's host name; only its entries are judged by their pid.
        now: the time now (an entry older than :data:`MAX_AGE` from another host is dropped).
        alive: whether a record's process still runs (default :func:`process_alive`).
    """
    ours = [r for r in records if r.bmc_url == bmc_url and r.username == username]
    live = [r for r in ours if r.host != host or alive(r)]
    in_use = {r.session_url for r in live} | ({own_session_url} if own_session_url else set())
    delete: list[SessionRecord] = []
    drop: list[SessionRecord] = []
    for record in ours:
        if record.host != host:
            if now - record.opened_at > MAX_AGE:
                drop.append(record)
        elif record in live:
            continue
        elif record.session_url in in_use:
            drop.append(record)
        else:
            delete.append(record)
    return Cleanup(delete=delete, drop=drop)


class _Unavailable(Exception):
    """The state file cannot be used this time (the reason is in the message)."""


class SessionLedger:
    """The state file of open Redfish sessions (see the module docstring).

    No method raises over the file: each failure is a warning, and the call does nothing.
    """

    def __init__(self, path: Path | None = None) -> None:
        """Use ``path``; None = ``redfish-sessions.json`` in :func:`tokenwatt.store.state_dir`."""
        self.path = path if path is not None else store.state_dir() / STATE_FILE
        self._warned: set[str] = set()

    def _warn(self, message: str) -> None:
        # Once per problem: a run adds, reads and removes, and each would say the same.
        if message not in self._warned:
            self._warned.add(message)
            logger.warning("%s", message)

    def add(self, *, bmc_url: str, username: str, session_url: str) -> SessionRecord:
        """Record a session this process has just opened; returns the entry, for :meth:`remove`.

        Entries of any BMC older than :data:`MAX_AGE` whose run is gone are dropped on the way,
        so that a BMC never used again does not keep its entries for ever.
        """
        pid = os.getpid()
        record = SessionRecord(
            bmc_url=bmc_url,
            username=username,
            session_url=session_url,
            host=socket.gethostname(),
            pid=pid,
            pid_start_ticks=process_start_ticks(pid),
            opened_at=dt.datetime.now(dt.UTC),
        )
        here, now = record.host, record.opened_at

        def expired(r: SessionRecord) -> bool:
            # Past every BMC's timeout and not a live run's: whatever the BMC, nothing to end.
            return now - r.opened_at > MAX_AGE and (r.host != here or not _record_alive(r))

        self._update(lambda records: [*(r for r in records if not expired(r)), record])
        return record

    def remove(self, done: Iterable[SessionRecord]) -> None:
        """Drop the entries of sessions that are over."""
        gone = list(done)
        if gone:
            self._update(lambda records: [r for r in records if r not in gone])

    def entries(self) -> list[SessionRecord]:
        """Every recorded session (none where the file cannot be read)."""
        try:
            with self._locked():
                return self._load()
        except _Unavailable as exc:
            self._warn(f"Redfish session records not read: {exc}")
            return []

    def cleanup(self, *, bmc_url: str, username: str, own_session_url: str | None) -> Cleanup:
        """The :func:`plan_cleanup` of the recorded sessions, now, on this host."""
        return plan_cleanup(
            self.entries(),
            bmc_url=bmc_url,
            username=username,
            own_session_url=own_session_url,
            host=socket.gethostname(),
            now=dt.datetime.now(dt.UTC),
        )

    def settle(self, *, done: Iterable[SessionRecord], failed: Iterable[SessionRecord]) -> None:
        """Drop the entries of ``done``, and those of ``failed`` older than :data:`MAX_AGE`."""
        now = dt.datetime.now(dt.UTC)
        self.remove([*done, *(r for r in failed if now - r.opened_at > MAX_AGE)])

    # -- the file ---------------------------------------------------------------------------------

    def _update(self, change: Callable[[list[SessionRecord]], list[SessionRecord]]) -> None:
        try:
            with self._locked():
                text = SessionsFile(sessions=change(self._load())).model_dump_json(indent=2)
                store.atomic_write_text(self.path, text + "\n")
        except (_Unavailable, WriteError) as exc:
            self._warn(f"Redfish session records not updated: {exc}")

    def _load(self) -> list[SessionRecord]:
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return []
        except OSError as exc:
            raise _Unavailable(f"{self.path}: cannot read: {exc.strerror or exc}") from None
        try:
            return SessionsFile.model_validate_json(data).sessions
        except ValidationError as exc:
            first = exc.errors(include_url=False)[0]
            where = ".".join(str(part) for part in first["loc"]) or "the file"
            self._warn(
                f"{self.path} is not a Redfish sessions file this tokenwatt reads ({where}:"
                f" {first['msg']}): starting it afresh; the sessions it listed are left to the"
                " BMC's session timeout"
            )
            return []

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        """Hold the lock file beside the state file (made, with its folder, if missing)."""
        lock_path = self.path.with_name(f"{self.path.name}.lock")
        try:
            # Private: the entries name BMCs and their users.
            self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o600)
        except OSError as exc:
            raise _Unavailable(f"{lock_path}: cannot open: {exc.strerror or exc}") from None
        try:
            deadline = time.monotonic() + _LOCK_WAIT_S
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() > deadline:
                        raise _Unavailable(
                            f"{lock_path}: still locked by another run after {_LOCK_WAIT_S:g} s"
                        ) from None
                    time.sleep(0.05)
                except OSError as exc:
                    raise _Unavailable(f"{lock_path}: cannot lock: {exc.strerror or exc}") from None
            yield
        finally:
            os.close(fd)  # and with it the lock

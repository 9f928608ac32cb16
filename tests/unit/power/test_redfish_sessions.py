"""The record of open Redfish sessions: which processes are gone, which entries to end or drop,
and a state file that is corrupt, unreadable or written by several runs at once."""

from __future__ import annotations

import datetime as dt
import json
import logging
import os
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from tests.peers import wait_for
from tokenwatt.power.redfish_sessions import (
    MAX_AGE,
    STATE_FILE,
    SessionLedger,
    SessionRecord,
    SessionsFile,
    plan_cleanup,
    process_alive,
    process_start_ticks,
)

BMC = "https://bmc.example"
NOW = dt.datetime(2026, 12, 1, 12, 0, tzinfo=dt.UTC)


def record(pid: int, url: str, *, host="here", bmc=BMC, user="admin", age=dt.timedelta(0)):
    return SessionRecord(
        bmc_url=bmc,
        username=user,
        session_url=url,
        host=host,
        pid=pid,
        pid_start_ticks=100 + pid,
        opened_at=NOW - age,
    )


# -- is the process that opened the session gone? ----------------------------------------------------


def test_a_running_pid_with_another_start_time_is_a_reused_pid():
    me = os.getpid()
    ticks = process_start_ticks(me)
    assert ticks is not None
    assert ticks > 0
    assert process_alive(me, ticks)
    assert process_alive(me, None)  # no start time recorded: the pid alone
    assert not process_alive(me, ticks + 1)


def test_a_killed_process_is_gone_before_and_after_it_is_reaped():
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    ticks = process_start_ticks(child.pid)
    stat = Path(f"/proc/{child.pid}/stat")
    wait_for(lambda: stat.read_text().rpartition(")")[2].split()[0] == "Z")
    assert not process_alive(child.pid, ticks)  # a zombie: exited, not reaped yet
    child.wait()
    assert not process_alive(child.pid, ticks)


def test_a_command_name_with_spaces_and_parentheses_does_not_shift_the_fields(tmp_path):
    odd = tmp_path / "a b) (c"
    odd.symlink_to(sys.executable)
    child = subprocess.Popen([str(odd), "-c", "import time; time.sleep(30)"])
    try:
        wait_for(lambda: ") (c" in Path(f"/proc/{child.pid}/stat").read_text())
        ticks = process_start_ticks(child.pid)
        mine = process_start_ticks(os.getpid())
        uptime_s = float(Path("/proc/uptime").read_text().split()[0])
        assert ticks is not None
        assert mine is not None
        # started after this process, and before now (a shifted field reads something else)
        assert mine <= ticks <= uptime_s * os.sysconf("SC_CLK_TCK") + 1
        assert process_alive(child.pid, ticks)
    finally:
        child.kill()
        child.wait()


# -- which entries to end, which to drop -----------------------------------------------------------


def test_plan_ends_the_sessions_of_gone_processes_and_never_a_live_one():
    live = {1, 2}
    gone = record(10, "/s/10")
    running = record(1, "/s/1")
    reused_by_me = record(11, "/s/mine")  # the BMC gave its id to the session just opened
    reused_by_live = record(12, "/s/1")  # ... or to a live run's
    elsewhere = record(13, "/s/13", host="other")  # another host's pid means nothing here
    elsewhere_old = record(14, "/s/14", host="other", age=MAX_AGE + dt.timedelta(minutes=1))
    other_bmc = record(15, "/s/15", bmc="https://bmc2.example")
    other_user = record(16, "/s/16", user="root")
    plan = plan_cleanup(
        [
            gone,
            running,
            reused_by_me,
            reused_by_live,
            elsewhere,
            elsewhere_old,
            other_bmc,
            other_user,
        ],
        bmc_url=BMC,
        username="admin",
        own_session_url="/s/mine",
        host="here",
        now=NOW,
        alive=lambda r: r.pid in live,
    )
    assert plan.delete == [gone]
    assert plan.drop == [reused_by_me, reused_by_live, elsewhere_old]


def test_plan_without_an_own_session_ends_every_gone_one():
    gone = [record(10, "/s/1"), record(11, "/s/2")]
    plan = plan_cleanup(
        gone,
        bmc_url=BMC,
        username="admin",
        own_session_url=None,  # basic auth
        host="here",
        now=NOW,
        alive=lambda r: False,
    )
    assert plan.delete == gone
    assert plan.drop == []


# -- the state file --------------------------------------------------------------------------------


def test_the_ledger_lives_in_the_state_folder(tmp_path, monkeypatch):
    monkeypatch.setenv("TOKENWATT_STATE_DIR", str(tmp_path / "mine"))
    assert SessionLedger().path == tmp_path / "mine" / STATE_FILE


def test_an_entry_is_added_and_removed_and_failed_ones_expire(tmp_path):
    path = tmp_path / "state" / STATE_FILE
    ledger = SessionLedger(path)
    entry = ledger.add(bmc_url=BMC, username="admin", session_url="/s/1")
    assert entry.pid == os.getpid()
    assert entry.pid_start_ticks == process_start_ticks(os.getpid())
    assert ledger.entries() == [entry]
    assert (tmp_path / "state").stat().st_mode & 0o777 == 0o700
    ledger.settle(done=[], failed=[entry])  # not deleted, and young: kept for the next run
    assert ledger.entries() == [entry]
    old = entry.model_copy(update={"opened_at": entry.opened_at - MAX_AGE * 2})
    ledger.remove([entry])
    assert ledger.entries() == []
    path.write_text(SessionsFile(sessions=[old]).model_dump_json())
    assert ledger.entries() == [old]
    ledger.settle(done=[], failed=[old])  # a day old: dropped whatever the BMC said
    assert ledger.entries() == []


@pytest.mark.parametrize(
    "content",
    [b"{not json", b"\xff\xfe", json.dumps({"format": 2, "sessions": []}).encode()],
    ids=["not-json", "not-utf8", "newer-format"],
)
def test_a_corrupt_state_file_is_warned_about_and_started_afresh(tmp_path, caplog, content):
    path = tmp_path / STATE_FILE
    path.write_bytes(content)
    ledger = SessionLedger(path)
    with caplog.at_level(logging.WARNING, logger="tokenwatt.power.redfish_sessions"):
        assert ledger.entries() == []
        entry = ledger.add(bmc_url=BMC, username="admin", session_url="/s/1")
    assert "is not a Redfish sessions file this tokenwatt reads" in caplog.text
    assert caplog.text.count("not a Redfish sessions file") == 1  # once, not per call
    assert ledger.entries() == [entry]
    assert json.loads(path.read_text())["sessions"][0]["session_url"] == "/s/1"


def test_an_unreadable_state_file_is_warned_about_and_nothing_fails(tmp_path, caplog):
    path = tmp_path / STATE_FILE
    path.mkdir()  # a folder where the file should be: unreadable even to root
    ledger = SessionLedger(path)
    with caplog.at_level(logging.WARNING, logger="tokenwatt.power.redfish_sessions"):
        entry = ledger.add(bmc_url=BMC, username="admin", session_url="/s/1")
        assert ledger.entries() == []
        ledger.remove([entry])
    assert f"{path}: cannot read" in caplog.text
    assert path.is_dir()


def test_a_state_folder_that_cannot_be_made_is_warned_about(tmp_path, caplog):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    ledger = SessionLedger(blocker / "state" / STATE_FILE)
    with caplog.at_level(logging.WARNING, logger="tokenwatt.power.redfish_sessions"):
        ledger.add(bmc_url=BMC, username="admin", session_url="/s/1")
        assert ledger.entries() == []
    assert "cannot open" in caplog.text


def test_concurrent_runs_keep_each_others_entries(tmp_path):
    """Threads stand in for runs: each ledger opens the lock file itself, and flock locks belong
    to the open file, so they exclude one another as processes would (without the import time
    of four Pythons)."""
    path = tmp_path / STATE_FILE
    runs, adds = 4, 15

    def run(n: int) -> None:
        ledger = SessionLedger(path)
        for i in range(adds):
            ledger.add(bmc_url=BMC, username="admin", session_url=f"/s/{n}-{i}")

    threads = [threading.Thread(target=run, args=(n,)) for n in range(runs)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    urls = {e.session_url for e in SessionLedger(path).entries()}
    assert urls == {f"/s/{n}-{i}" for n in range(runs) for i in range(adds)}
    assert sorted(p.name for p in tmp_path.iterdir()) == [STATE_FILE, f"{STATE_FILE}.lock"]


def test_adding_drops_the_day_old_entries_of_gone_runs_of_any_bmc(tmp_path):
    path = tmp_path / STATE_FILE
    here, me, gone = socket.gethostname(), os.getpid(), 2**22 + 1  # above Linux's pid_max
    now = dt.datetime.now(dt.UTC)
    day_old = now - MAX_AGE - dt.timedelta(hours=1)

    def entry(pid: int, url: str, opened_at: dt.datetime, *, host: str = here) -> SessionRecord:
        return SessionRecord(
            bmc_url="https://bmc2.example",
            username="admin",
            session_url=url,
            host=host,
            pid=pid,
            pid_start_ticks=process_start_ticks(pid),
            opened_at=opened_at,
        )

    entries = [
        entry(gone, "/s/1", day_old),  # dropped: a day old and its run gone
        entry(gone, "/s/2", now),  # young: its session may still be open
        entry(me, "/s/3", day_old),  # a live run's
        entry(gone, "/s/4", now, host="other"),  # another host's, young
        entry(gone, "/s/5", day_old, host="other"),  # dropped: another host's, a day old
    ]
    path.write_text(SessionsFile(sessions=entries).model_dump_json())
    ledger = SessionLedger(path)
    added = ledger.add(bmc_url=BMC, username="admin", session_url="/s/6")
    assert ledger.entries() == [entries[1], entries[2], entries[3], added]

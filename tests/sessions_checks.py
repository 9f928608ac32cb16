"""Checks of a sessions probe's record, the same against the simulator and against real vLLM."""

from __future__ import annotations

from collections import defaultdict

from tokenwatt.load.session import Conversation
from tokenwatt.load.workload import Workload
from tokenwatt.schema.run import ProbeRecord, RequestTable


def by_session(table: RequestTable) -> dict[int, dict[int, int]]:
    """Session -> turn -> row of the table (each turn once)."""
    assert table.session is not None
    assert table.turn is not None
    rows: dict[int, dict[int, int]] = defaultdict(dict)
    for row, (session, turn) in enumerate(zip(table.session, table.turn, strict=True)):
        assert turn not in rows[session]
        rows[session][turn] = row
    return rows


def think_time_gaps(table: RequestTable, work: Workload) -> int:
    """Assert each later turn was sent its think time after the previous reply ended, never
    early and under 50 ms late; how many such pairs the window holds."""
    gaps = 0
    for session, turns in by_session(table).items():
        for k, row in turns.items():
            before = turns.get(k - 1)
            if before is None:
                continue
            think_s = Conversation(work, session, stream=0).think_time_s(k)
            reply_end_s = (
                table.t_sched_s[before]
                + table.send_lag_ms[before] / 1e3
                + (table.e2e_ms[before] or 0) / 1e3
            )
            send_s = table.t_sched_s[row] + table.send_lag_ms[row] / 1e3
            assert send_s - reply_end_s >= think_s - 1e-6  # never early
            assert send_s - reply_end_s < think_s + 0.05  # and on time
            gaps += 1
    return gaps


def assert_refused_third_turns_cut_their_sessions(record: ProbeRecord) -> None:
    """Sessions of four turns whose third turn the server refused (HTTP 400): each is cut there,
    counted as cut by that cause with its fourth turn unsent, and the failed window turns count."""
    table = record.requests
    assert table is not None
    assert table.turn is not None
    assert 3 not in table.turn  # never sent
    third = [table.status[r] for t in by_session(table).values() if (r := t.get(2)) is not None]
    assert third
    assert set(third) == {"http_error"}, record.failure_examples
    sessions = record.sessions
    assert sessions is not None
    assert sessions.cut >= len(third)
    assert sessions.completed == 0
    assert sessions.cut_causes == {"http_error": sessions.cut}
    assert sessions.unsent_turns == sessions.cut  # each lost its fourth turn
    assert record.failed == len(third)  # window turns that failed: +inf in the percentiles

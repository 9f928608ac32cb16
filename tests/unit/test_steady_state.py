"""The steady-state audit of a probe's warm-up (tokenwatt.audits), against hand-worked values."""

import pytest

from tests import factories
from tokenwatt import audits
from tokenwatt.report import steady_state_note
from tokenwatt.schema.run import ProbeAudits


def test_shortfall_by_hand():
    # times in system 10, 20 and 30 s (mean 20): at 15 s, (0 + 5 + 15) / 3 / 20 = 1/3
    assert audits.shortfall([10, 20, 30], 15) == pytest.approx(1 / 3)
    assert audits.shortfall([10, 20, 30], 0) == pytest.approx(1.0)
    assert audits.shortfall([10, 20, 30], 30) == 0.0
    assert audits.shortfall([], 5) == 0.0


def test_steady_warmup_by_hand():
    # 10 %: only the 30 s request is left, (30 - t) / 3 = 2 at t = 24
    assert audits.steady_warmup_s([10, 20, 30], 10) == pytest.approx(24.0, abs=1e-5)
    # 1 %: (30 - t) / 3 = 0.2 at t = 29.4
    assert audits.steady_warmup_s([10, 20, 30], 1) == pytest.approx(29.4, abs=1e-5)
    assert audits.steady_warmup_s([10, 20, 30], 100) == 0.0


def test_steady_state_audit_by_hand():
    a = audits.steady_state(warmup_s=15, window_s=10, durations_s=[10, 20, 30])
    assert a.requests == 3
    assert a.mean_time_in_system_s == 20.0
    assert a.longest_time_in_system_s == 30.0
    assert a.shortfall_pct == pytest.approx(100 / 3)
    # over [15, 25]: 0, the integral of (20 - t) from 15 to 20 = 12.5, of (30 - t) from 15 to
    # 25 = 100; (112.5 / 3) / 20 / 10 = 18.75 %
    assert a.window_shortfall_pct == pytest.approx(18.75)
    assert a.steady_warmup_s == pytest.approx(29.4, abs=1e-5)
    assert not a.holds
    settled = audits.steady_state(warmup_s=40, window_s=10, durations_s=[10, 20, 30])
    assert settled.shortfall_pct == 0.0
    assert settled.holds


def test_unknown_times_are_left_out():
    a = audits.steady_state(warmup_s=0, window_s=1, durations_s=[float("inf"), 2.0, -1.0])
    assert a.requests == 1
    assert a.mean_time_in_system_s == 2.0


def _run_with(durations_s, warmup_s, *, client_bound=False):
    audit = audits.steady_state(warmup_s=warmup_s, window_s=10.0, durations_s=durations_s)
    probe = factories.probe(
        0,
        audits=ProbeAudits(steady_state=audit),
        client_bound=client_bound,
        client_bound_reasons=["x"] if client_bound else [],
    )
    return factories.run(probes=[probe])


def test_the_page_says_when_the_windows_opened_short_of_steady_state():
    note = steady_state_note(_run_with([10.0, 20.0, 300.0], warmup_s=45.0))
    assert note is not None
    # (0 + 0 + 255) / 3 / 110 = 77 % short; 1 %: (300 - t) / 3 = 1.1 at t = 296.7
    assert "warm-up 45 s; 77 % of the requests" in note
    assert "some stay 300 s" in note
    assert "about 297 s would reach 1 %" in note
    assert steady_state_note(_run_with([10.0, 20.0, 30.0], warmup_s=45.0)) is None
    # a client-bound probe says nothing about the server's steady state
    assert steady_state_note(_run_with([10.0, 300.0], warmup_s=5.0, client_bound=True)) is None


def test_a_ramped_probe_is_short_only_of_what_was_not_carried_over():
    # times 10, 20, 30 s (mean 20) at 2 req/s: a steady load of 40 requests. 30 carried over
    # make 3/4 of it, so a quarter of the shortfall from idle is left: 1/3 x 1/4 at 15 s.
    a = audits.steady_state(
        warmup_s=15, window_s=10, durations_s=[10, 20, 30], rate_rps=2.0, carried_requests=30
    )
    assert a.carried_load_pct == pytest.approx(75.0)
    assert a.shortfall_pct == pytest.approx(100 / 12)
    assert a.window_shortfall_pct == pytest.approx(18.75 / 4)
    # the shortfall from idle may be 4 %: (30 - t) / 3 = 0.8 at t = 27.6
    assert a.steady_warmup_s == pytest.approx(27.6, abs=1e-5)
    assert not a.holds
    # 60 carried: half again as many as the steady state holds, settling as they finish
    over = audits.steady_state(
        warmup_s=29, window_s=1, durations_s=[10, 20, 30], rate_rps=2.0, carried_requests=60
    )
    assert over.carried_load_pct == pytest.approx(150.0)
    assert over.shortfall_pct == pytest.approx(-0.5 * (1 / 3) / 20 * 100)  # -0.83 %
    assert over.holds  # within 1 % either way
    # a probe from idle has no carried share
    assert audits.steady_state(warmup_s=15, window_s=10, durations_s=[10]).carried_load_pct is None


def test_steady_warmup_scaled_by_hand():
    # with half the load carried over, the shortfall from idle may reach 20 %: t = 19, where
    # ((20 - t) + (30 - t)) / 3 = 4
    assert audits.steady_warmup_s([10, 20, 30], 10, scale=0.5) == pytest.approx(19.0, abs=1e-5)
    assert audits.steady_warmup_s([10, 20, 30], 10, scale=-0.5) == pytest.approx(19.0, abs=1e-5)
    assert audits.steady_warmup_s([10, 20, 30], 10, scale=0.0) == 0.0


def test_the_page_says_when_a_carried_over_load_was_above_the_steady_state():
    audit = audits.steady_state(
        warmup_s=5.0,
        window_s=10.0,
        durations_s=[10.0, 20.0, 30.0],
        rate_rps=2.0,
        carried_requests=80,
    )
    probe = factories.probe(0, audits=ProbeAudits(steady_state=audit))
    note = steady_state_note(factories.run(probes=[probe]))
    assert note is not None
    # scale 1 - 80/40 = -1: (5 + 15 + 25) / 3 / 20 = 75 % over
    assert "75 % more requests than a steady state holds" in note
    assert "latencies read high and the confirmed rate may be too low" in note

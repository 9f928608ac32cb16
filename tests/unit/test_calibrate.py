"""The self-calibration's rungs, its refusal and the publishing rule, against hand-worked values."""

from __future__ import annotations

import pytest

from tests import factories
from tokenwatt import policy
from tokenwatt.errors import CalibrationError
from tokenwatt.load.calibrate import (
    calibration_text,
    check_planned_rates,
    rung_rates,
    rung_warmup_s,
    server_lateness_ms,
    server_processes,
)
from tokenwatt.schema.run import CalibrationRung, ClientCalibration
from tokenwatt.schema.spec import SweepSpec


def test_rungs_rise_by_four_to_the_sweeps_highest_rate():
    assert rung_rates(SweepSpec(start_rps=8, max_rps=200)) == [8, 32, 128, 200]
    # at most five: the highest rate is always the last
    assert rung_rates(SweepSpec(start_rps=1, max_rps=20_000)) == [1, 4, 16, 64, 20_000]
    assert rung_rates(SweepSpec(rates=[2, 5, 3])) == [2, 5]
    assert rung_rates(SweepSpec(rates=[7])) == [7]
    assert rung_rates(SweepSpec(start_rps=8, max_rps=200), max_rungs=1) == [8]


def rung(rate: float, bound: bool, server_late_ms: float = 0.3) -> CalibrationRung:
    return CalibrationRung(
        rate_rps=rate,
        events_per_s=rate * 100,
        workers=1,
        window_requests=round(rate * 1.5),
        client_bound=bound,
        client_bound_reasons=["p99 send lag 14.00 ms exceeds 10 ms"] if bound else [],
        send_lag_p50_ms=0.1,
        send_lag_p99_ms=14.0 if bound else 0.5,
        ttft_error_p50_ms=0.4,
        ttft_error_p99_ms=2.9,
        tpot_error_p50_ms=0.0,
        tpot_error_p99_ms=0.01,
        matched_requests=round(rate * 1.5),
        server_late_p99_ms=server_late_ms,
        server_bound=server_late_ms > 10,
    )


def calibration(
    *rungs: CalibrationRung, found: bool, server_bound_rps: float | None = None
) -> ClientCalibration:
    passed = [r.rate_rps for r in rungs if not (r.client_bound or r.server_bound)]
    return ClientCalibration(
        server="test",
        ttft_ms=50,
        itl_ms=10,
        output_tokens=100,
        rungs=list(rungs),
        ceiling_rps=passed[-1] if passed else None,
        ceiling_found=found,
        seconds=9.0,
        server_processes=2,
        server_bound_rps=server_bound_rps,
    )


def test_a_start_above_a_found_ceiling_is_refused_with_what_to_do():
    cal = calibration(rung(20, False), rung(80, False), rung(320, True), found=True)
    check_planned_rates(cal, SweepSpec(start_rps=20, max_rps=2000))  # the sweep may start
    with pytest.raises(CalibrationError) as refused:
        check_planned_rates(cal, SweepSpec(start_rps=100, max_rps=2000))
    text = str(refused.value)
    assert text.startswith("sweep.start_rps: 100 is above what this load generator can pace")
    assert "client-bound at 320 req/s (p99 send lag 14.00 ms exceeds 10 ms)" in text
    assert "ceiling 80" in text
    assert "load.calibrate: false" in text
    with pytest.raises(CalibrationError, match=r"^sweep\.rates: 90 "):
        check_planned_rates(cal, SweepSpec(rates=[10, 90]))
    # every rung passed: the ceiling is only a lower bound, nothing is refused
    check_planned_rates(calibration(rung(20, False), found=False), SweepSpec(start_rps=100))
    # not even the first rung: every rate is refused
    with pytest.raises(CalibrationError, match="ceiling none"):
        check_planned_rates(calibration(rung(20, True), found=True), SweepSpec(start_rps=1))


def test_the_line_names_the_ceiling_and_the_errors_at_it():
    found = calibration(rung(20, False), rung(80, False), rung(320, True), found=True)
    assert calibration_text(found) == (
        "ceiling 80 req/s, 8,000 events/s; there p99 send lag 0.50 ms, TTFT error p50 0.40 ms /"
        " p99 2.90 ms, TPOT error p99 0.01 ms against the server's stamps (9 s)"
    )
    at_least = calibration(rung(20, False), found=False)
    assert calibration_text(at_least).startswith("not client-bound up to 20 req/s (the highest")
    none = calibration(rung(20, True), found=True)
    assert calibration_text(none) == (
        "client-bound already at the first rung (p99 send lag 14.00 ms exceeds 10 ms)"
    )


def test_probes_above_a_found_ceiling_make_a_run_unpublishable():
    probes = [factories.probe(0, rate=50.0), factories.probe(1, rate=120.0)]
    cal = calibration(rung(20, False), rung(80, False), rung(320, True), found=True)
    rules = {v.rule: v for v in policy.check_run(factories.run(probes=probes, calibration=cal))}
    assert "client_ceiling" in rules
    assert "1 probe rate(s) from 120 req/s ran above" in rules["client_ceiling"].message
    assert "ceiling of 80 req/s" in rules["client_ceiling"].message
    below = [factories.probe(0, rate=50.0), factories.probe(1, rate=80.0)]
    ok = policy.check_run(factories.run(probes=below, calibration=cal))
    assert "client_ceiling" not in {v.rule for v in ok}
    lower_bound = calibration(rung(20, False), found=False)  # the ceiling is at least 20
    unbounded = policy.check_run(factories.run(probes=probes, calibration=lower_bound))
    assert "client_ceiling" not in {v.rule for v in unbounded}


def test_the_result_carries_the_ceiling_and_its_check_sees_it():
    from tokenwatt.report import LoadedRun, build_result

    probes = [factories.probe(0, rate=50.0), factories.probe(1, rate=120.0)]
    found = calibration(rung(20, False), rung(80, False), rung(320, True), found=True)

    def result_of(cal):
        run = factories.run(probes=probes, calibration=cal)
        return build_result([LoadedRun("u.json", run)], title="t", report_command="r")

    above = result_of(found)
    assert above.configs[0].client_ceiling_rps == 80
    rules = {v.rule: v for v in policy.check_result(above)}
    assert rules["client_ceiling"].message.startswith("1 probe rate(s) from 120 req/s ran above")
    # a ceiling not found (every rung passed) bounds nothing, on the result as on the run
    unbounded = result_of(calibration(rung(20, False), found=False))
    assert unbounded.configs[0].client_ceiling_rps is None
    assert "client_ceiling" not in {v.rule for v in policy.check_result(unbounded)}


def test_the_servers_lateness_is_each_write_against_its_own_schedule():
    # read at 0; first write due at ttft 5 ms, then every 1 ms: 5, 6, 7 ms
    stamps = {"a": [0, 5_000_000, 6_500_000, 9_000_000], "b": [10_000_000, 15_000_000]}
    assert server_lateness_ms(stamps, ttft_ms=5, itl_ms=1) == [0.0, 0.5, 2.0, 0.0]
    assert server_lateness_ms({}, ttft_ms=5, itl_ms=1) == []


def test_one_server_process_per_four_cpus():
    assert [server_processes(n) for n in (1, 2, 4, 7, 8, 16, 64)] == [1, 1, 1, 1, 2, 4, 8]


def test_a_server_that_fell_behind_ends_the_calibration_without_a_ceiling_found():
    behind = calibration(
        rung(20, False), rung(80, False, server_late_ms=17.5), found=False, server_bound_rps=80
    )
    assert behind.ceiling_rps == 20
    assert calibration_text(behind) == (
        "not client-bound up to 20 req/s, 2,000 events/s; there p99 send lag 0.50 ms, TTFT error"
        " p50 0.40 ms / p99 2.90 ms, TPOT error p99 0.01 ms against the server's stamps; at 80"
        " req/s the calibration server (2 processes) fell behind its own schedule (p99 17.50 ms"
        " late), so the client was not measured above (9 s)"
    )
    check_planned_rates(behind, SweepSpec(start_rps=100))  # nothing found to refuse by
    first = calibration(rung(20, False, server_late_ms=12.0), found=False, server_bound_rps=20)
    assert calibration_text(first).startswith("not measured; at 20 req/s the calibration server")
    # client-bound where the server was behind too: the client's rule decides, the line says both
    both = calibration(rung(20, False), rung(80, True, server_late_ms=40.0), found=True)
    assert calibration_text(both).endswith(
        "; the calibration server (2 processes) was behind its own schedule there too"
        " (p99 40.00 ms late) (9 s)"
    )
    with pytest.raises(CalibrationError, match="client-bound at 80 req/s"):
        check_planned_rates(both, SweepSpec(start_rps=50))


def test_a_rung_warms_up_for_at_least_one_streams_length():
    # 256 tokens 10 ms apart after 50 ms: the last at 50 + 255 x 10 ms = 2.6 s
    assert rung_warmup_s(50, 10, 256) == pytest.approx(2.6)
    assert rung_warmup_s(50, 4, 100) == 0.5  # a stream of 0.446 s: the shortest warm-up
    assert rung_warmup_s(50, 10, 1) == 0.5

"""The plain progress log of ``tokenwatt run``: what one probe's line says."""

from __future__ import annotations

import io

from rich.console import Console

from tests import factories
from tokenwatt.cli.measure import LogProgress
from tokenwatt.schema.run import EarlyStop
from tokenwatt.schema.spec import SloSpec


def line_for(record) -> str:
    out = io.StringIO()
    progress = LogProgress(SloSpec(ttft_p99_ms=2000, tpot_p99_ms=50), Console(file=out, width=400))
    progress.probe_finished(record)
    return out.getvalue().strip()


def test_a_passing_probe_names_its_failures_by_cause():
    record = factories.probe(
        3,
        rate=10.0,
        window_requests=10,
        ok=8,
        failed=2,
        output_tokens=256,
        goodput_tok_s=25.6,
        failures_by_cause={"timeout": 1, "http_error": 1},
    )
    text = line_for(record)
    assert "probe 3: PASS" in text
    assert "2 failed (1 http_error, 1 timeout)" in text
    assert "p99 TTFT 100.0/2000 ms" in text


def test_a_stopped_probe_separates_real_failures_from_requests_its_stop_cut():
    record = factories.probe(
        4,
        rate=40.5,
        passed=False,
        window_requests=200,
        ok=30,
        failed=170,
        output_tokens=30 * 32,
        goodput_tok_s=96.0,
        failures_by_cause={"cancelled": 163, "timeout": 7},
        early_stop=EarlyStop(
            stopped_ns=1,
            planned_window_requests=206,
            exceeding_needed=3,
            ttft_exceeding=7,
            tpot_exceeding=0,
            cut_window_requests=163,
            unsent_window_requests=6,
        ),
    )
    text = line_for(record)
    assert "FAIL (stopped early: provably over the SLO)" in text
    assert text.endswith("7 failed (7 timeout), 163 cut at the stop")


def test_a_clean_probe_says_zero_failed():
    assert line_for(factories.probe(0)).endswith("0 failed")


def test_a_probe_stopped_on_a_certain_pass_says_within_not_over():
    record = factories.probe(
        5,
        rate=20.0,
        window_requests=150,
        ok=148,
        failed=2,
        output_tokens=148 * 32,
        goodput_tok_s=320.0,
        failures_by_cause={"cancelled": 2},
        early_stop=EarlyStop(
            outcome="pass",
            stopped_ns=1,
            planned_window_requests=150,
            exceeding_needed=3,
            ttft_exceeding=0,
            tpot_exceeding=0,
            cut_window_requests=2,
            unsent_window_requests=0,
        ),
    )
    text = line_for(record)
    assert "PASS (stopped early: provably within the SLO)" in text
    assert "over the SLO" not in text
    assert text.endswith("0 failed, 2 cut at the stop")

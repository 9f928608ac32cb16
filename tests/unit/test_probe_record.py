"""build_probe_record: the probe's verdicts from hand-made request records (pure)."""

import datetime as dt
import math
from array import array

import pytest

from tokenwatt.client.openai import RequestResult
from tokenwatt.load._shard import ShardResult
from tokenwatt.load.probe import build_probe_record, plan_workers
from tokenwatt.schema.spec import SloSpec

MS = 1_000_000
T0 = 10_000 * MS  # probe start; warm-up 1 s, window 10 s -> window [11 s, 21 s)
WS = T0 + 1000 * MS


def req(i, *, sched_ms, lag_ms=0.1, ttft_ms=50.0, status="ok", n_out=11, gap_ms=10.0, slot_ms=0):
    t_sched = WS + int(sched_ms * MS)
    t_send = t_sched + int(lag_ms * MS)
    first = t_send + int(ttft_ms * MS)
    chunks = [first + int(k * gap_ms * MS) for k in range(n_out)]
    return RequestResult(
        index=i,
        t_send_ns=t_send,
        t_end_ns=chunks[-1] + MS,
        status=status,
        error=None if status == "ok" else f"{status} happened",
        t_first_ns=first,
        t_last_ns=chunks[-1],
        chunk_ns=array("q", chunks),
        output_tokens=n_out,
        usage_output_tokens=n_out,
        input_tokens=5,
        max_tokens=n_out,
        ignore_eos=True,
        t_sched_ns=t_sched,
        slot_wait_ns=int(slot_ms * MS),
    )


def record(window, *, shards=1, slot_waits=0, slot_wait_ns=0, samples=None, intervals=None):
    parts = [ShardResult(window=window[s::shards]) for s in range(shards)]
    parts[0].slot_waits = slot_waits
    parts[0].slot_wait_ns = slot_wait_ns
    parts[0].decode_intervals = intervals or []
    return build_probe_record(
        index=3,
        phase="confirm",
        rate_rps=10.0,
        attempt=1,
        repeat=0,
        warmup_s=1.0,
        window_s=10.0,
        started_utc=dt.datetime(2026, 1, 1, tzinfo=dt.UTC),
        t0_ns=T0,
        shards=parts,
        slo=SloSpec(ttft_p99_ms=100, tpot_p99_ms=20),
        max_concurrency=64,
        running_samples=samples,
    )


def test_a_clean_probe():
    window = [req(i, sched_ms=i * 100) for i in range(100)]
    r = record(window, shards=2)
    assert (r.window_requests, r.ok, r.failed, r.workers) == (100, 100, 0, 2)
    assert (r.window_start_ns, r.window_end_ns) == (WS, WS + 10_000 * MS)
    # the last window request, sent at 9.9 s, ends 0.1 + 50 + 100 + 1 ms later
    assert r.end_ns == WS + 9_900 * MS + int(0.1 * MS) + 151 * MS
    assert r.offered_rate_rps == 10.0
    assert r.achieved_rate_rps == 10.0
    assert r.send_lag_p99_ms == pytest.approx(0.1)
    assert r.ttft_ms.p99 == pytest.approx(50.0)
    assert r.tpot_ms.p50 == pytest.approx(10.0)
    assert r.itl_ms.count == 1000
    assert r.itl_ms.p99 == pytest.approx(10.0)
    assert r.output_tokens == 1100
    assert r.goodput_tok_s == 110.0
    assert not r.client_bound
    assert r.slo_pass
    assert r.requests.t_sched_s[:3] == pytest.approx([0.0, 0.1, 0.2])  # merged back in order


def test_late_sends_are_client_bound_and_never_pass():
    # the generator falls behind: sends drift late by up to 0.5 s at the window's end
    window = [req(i, sched_ms=i * 100, lag_ms=5 * i) for i in range(100)]
    r = record(window)
    assert r.achieved_rate_rps == pytest.approx(100 / 10.395, rel=1e-3)
    assert r.send_lag_p99_ms == pytest.approx(490.0)
    assert r.client_bound
    # 10.395 s to send 10 s of arrivals: 96.2 %
    assert r.client_bound_reasons == [
        "achieved arrival rate 9.620 req/s is under 97% of the offered 10.000 req/s",
        "p99 send lag 490.00 ms exceeds 10 ms",
    ]
    assert not r.slo_pass


def test_slot_waits_are_client_bound():
    window = [req(i, sched_ms=i * 100) for i in range(10)]
    r = record(window, slot_waits=2, slot_wait_ns=300 * MS)
    assert r.slot_wait_s == pytest.approx(0.3)
    assert r.client_bound
    assert "concurrency slot (max_concurrency 64)" in r.client_bound_reasons[0]


def test_failures_stay_in_the_denominator():
    window = [req(i, sched_ms=i * 100) for i in range(98)]
    window += [req(98, sched_ms=9800, status="timeout"), req(99, sched_ms=9900, status="timeout")]
    window += [req(100, sched_ms=9950, status="client_error")]
    r = record(window)
    assert (r.window_requests, r.ok, r.failed) == (101, 98, 3)
    assert r.failures_by_cause == {"client_error": 1, "timeout": 2}
    assert r.failure_examples == {
        "timeout": "timeout happened",
        "client_error": "client_error happened",
    }
    assert math.isinf(r.ttft_ms.p99)
    assert r.goodput_tok_s == 98 * 11 / 10
    assert r.client_bound  # the client ran out of something
    assert not r.slo_pass
    assert r.itl_ms.count == 98 * 10 + 3


def test_ttft_over_the_slo_fails_without_being_client_bound():
    window = [req(i, sched_ms=i * 100, ttft_ms=150.0) for i in range(10)]
    r = record(window)
    assert not r.client_bound
    assert not r.slo_pass


def test_running_batch_sources():
    window = [req(i, sched_ms=i * 100) for i in range(10)]
    assert record(window, samples=[3.0, 5.0]).running_batch_mean == 4.0
    assert record(window, samples=[3.0]).batch_source == "metrics"
    # one request decoding through the whole window, one through half of it
    r = record(window, intervals=[(WS - MS, WS + 20_000 * MS), (WS, WS + 5_000 * MS)])
    assert r.batch_source == "littles_law"
    assert r.running_batch_mean == pytest.approx(1.5)


def test_empty_window():
    r = record([])
    assert r.window_requests == 0
    assert r.ttft_ms.count == 0
    assert not r.slo_pass


def test_plan_workers():
    # 1000 req/s or 30,000 events/s per worker (events = output tokens + usage + [DONE])
    assert plan_workers(rate_rps=10, mean_output_tokens=256, max_workers=8) == 1
    assert plan_workers(rate_rps=2500, mean_output_tokens=1, max_workers=8) == 3
    assert plan_workers(rate_rps=1000, mean_output_tokens=148, max_workers=8) == 5
    assert plan_workers(rate_rps=1000, mean_output_tokens=148, max_workers=2) == 2


def test_reasoning_requests_give_ttfat_stats_and_the_token_split():
    window = []
    for i in range(10):
        r = req(i, sched_ms=100 * i, ttft_ms=50.0, n_out=11)
        # the first 4 chunks are reasoning, the answer starts at chunk 4 (30 ms later)
        r.t_first_answer_ns = r.chunk_ns[4]
        r.reasoning_events = 4
        r.reasoning_tokens = 4
        r.reasoning_tokens_approx = i < 3  # three servers' answers without the usage detail
        window.append(r)
    rec = record(window)
    assert rec.requests.ttfat_ms == [pytest.approx(50.0 + 40.0)] * 10
    assert rec.requests.reasoning_tokens == [4] * 10
    assert rec.ttfat_ms.p99 == pytest.approx(90.0)
    assert rec.ttft_ms.p99 == pytest.approx(50.0)
    assert (rec.output_tokens, rec.reasoning_tokens) == (110, 40)
    assert rec.approximate_reasoning_tokens == 3


def test_no_reasoning_no_ttfat_columns():
    rec = record([req(i, sched_ms=100 * i) for i in range(5)])
    assert rec.ttfat_ms is None
    assert rec.reasoning_tokens is None
    assert rec.requests.ttfat_ms is None
    assert "ttfat" not in rec.requests.model_dump(exclude_none=True)

"""Engine telemetry of a window, and the probe audits, against hand-worked values."""

from __future__ import annotations

import pytest

from tokenwatt import audits
from tokenwatt.client.openai import RequestResult
from tokenwatt.load.engine_metrics import EngineMetrics, EngineReading, parse_engine_metrics
from tokenwatt.telemetry import (
    GROWING_QUEUE_REQUESTS,
    counter_delta,
    engine_telemetry,
    queue_growing,
    slope_per_s,
)

S = 1_000_000_000


def metrics(**values: float | str | None) -> EngineMetrics:
    base: dict[str, object] = {
        "running": None,
        "waiting": None,
        "kv_cache_usage": None,
        "kv_cache_memory_bytes": None,
        "prompt_tokens_total": None,
        "generation_tokens_total": None,
    }
    base.update(values)
    return EngineMetrics(**base)  # type: ignore[arg-type]


def test_slope_and_counter_delta_by_hand():
    assert slope_per_s([0, 1, 2], [1, 3, 5]) == pytest.approx(2.0)
    assert slope_per_s([0], [1]) is None
    assert counter_delta(3, 10) == 7
    assert counter_delta(10, 3) is None  # reset: no figure rather than a negative one
    assert counter_delta(None, 3) is None


def test_window_telemetry_by_hand():
    # Four scrapes 1 s apart from the window start (t = 0, 1, 2, 3 s) of a 4 s window.
    rows = [
        (4, 0, 0.10, 100, 1000, 0, 50),
        (6, 1, 0.20, 101, 1400, 100, 70),
        (6, 2, 0.30, 101, 1800, 200, 90),
        (8, 3, 0.40, 103, 2000, 300, 100),
    ]
    readings = [
        EngineReading(
            t_ns=10 * S + i * S,
            metrics=metrics(
                running=run,
                waiting=wait,
                kv_cache_usage=kv,
                dialect="vllm",
                preemptions_total=pre,
                prefix_cache_queries_total=queries,
                prefix_cache_hits_total=hits,
                spec_draft_tokens_total=draft,
                spec_accepted_tokens_total=draft / 2,
            ),
        )
        for i, (run, wait, kv, pre, queries, hits, draft) in enumerate(rows)
    ]
    t = engine_telemetry(readings, window_start_ns=10 * S, window_s=4.0)
    assert t.samples == 4
    assert t.dialect == "vllm"
    assert t.running_mean == 6.0
    assert t.running_max == 8
    assert t.waiting_mean == 1.5
    assert t.waiting_max == 3
    # waiting 0, 1, 2, 3 at t = 0..3: slope 1 request/s, x 4 s = 4 requests gained.
    assert t.waiting_growth == pytest.approx(4.0)
    assert queue_growing(t)
    assert t.kv_cache_usage_mean_pct == pytest.approx(25.0)
    assert t.kv_cache_usage_max_pct == pytest.approx(40.0)
    assert t.preemptions == 3
    # hits 300 of queries 1000 over the window (first to last scrape).
    assert t.prefix_cache_hit_rate_pct == pytest.approx(30.0)
    assert t.spec_decode_acceptance_pct == pytest.approx(50.0)
    assert t.series is not None
    assert t.series.t_s == [0.0, 1.0, 2.0, 3.0]


def test_what_the_engine_does_not_expose_is_not_measured():
    readings = [EngineReading(t_ns=i * S, metrics=metrics(running=2.0)) for i in range(3)]
    t = engine_telemetry(readings, window_start_ns=0, window_s=3.0)
    assert t.running_mean == 2.0
    for name in (
        "waiting_mean",
        "waiting_growth",
        "kv_cache_usage_mean_pct",
        "preemptions",
        "prefix_cache_hit_rate_pct",
        "spec_decode_acceptance_pct",
    ):
        assert getattr(t, name) is None, name
    assert not queue_growing(t)


def test_a_steady_queue_is_not_growing():
    readings = [
        EngineReading(t_ns=i * S, metrics=metrics(running=5.0, waiting=float(i % 2)))
        for i in range(20)
    ]
    t = engine_telemetry(readings, window_start_ns=0, window_s=20.0)
    assert t.waiting_growth is not None
    assert abs(t.waiting_growth) < GROWING_QUEUE_REQUESTS


def test_names_of_the_three_dialects():
    vllm = parse_engine_metrics(
        'vllm:num_requests_running{engine="0"} 3\n'
        'vllm:num_preemptions_total{engine="0"} 4\n'
        'vllm:prefix_cache_hits_total{engine="0"} 10\n'
        'vllm:prefix_cache_queries_total{engine="0"} 40\n'
        'vllm:spec_decode_num_draft_tokens_total{engine="0"} 9\n'
        'vllm:spec_decode_num_accepted_tokens_total{engine="0"} 6\n'
    )
    assert vllm.dialect == "vllm"
    assert (vllm.preemptions_total, vllm.prefix_cache_hits_total) == (4, 10)
    assert (vllm.prefix_cache_queries_total, vllm.spec_draft_tokens_total) == (40, 9)
    assert vllm.spec_accepted_tokens_total == 6
    sglang = parse_engine_metrics(
        'sglang:num_running_reqs{dp="0"} 2\nsglang:num_queue_reqs{dp="0"} 5\n'
        'sglang:token_usage{dp="0"} 0.5\nsglang:cache_hit_rate{dp="0"} 0.25\n'
        'sglang:cache_hit_rate{dp="1"} 0.75\n'
        'sglang:num_retracted_requests_total{dp="0"} 7\n'
    )
    assert sglang.dialect == "sglang"
    assert (sglang.running, sglang.waiting, sglang.kv_cache_usage) == (2, 5, 0.5)
    assert sglang.prefix_cache_hit_rate == 0.5
    assert sglang.preemptions_total == 7
    llama = parse_engine_metrics(
        "llamacpp:requests_processing 3\nllamacpp:requests_deferred 1\n"
        "llamacpp:spec_decode_num_draft_tokens_total 0\n"
    )
    assert (llama.dialect, llama.running, llama.waiting) == ("llamacpp", 3, 1)
    assert llama.preemptions_total is None
    assert llama.spec_draft_tokens_total == 0


def test_sglang_hit_rate_is_its_gauge_averaged_over_the_window():
    # SGLang has no hit and query counters, only a gauge of the recent hit rate: its mean over
    # the window's scrapes (0.2, 0.4, 0.6) is the window's figure.
    text = 'sglang:num_running_reqs{{dp="0"}} 2\nsglang:cache_hit_rate{{dp="0"}} {rate}\n'
    readings = [
        EngineReading(t_ns=i * S, metrics=parse_engine_metrics(text.format(rate=rate)))
        for i, rate in enumerate((0.2, 0.4, 0.6))
    ]
    t = engine_telemetry(readings, window_start_ns=0, window_s=3.0)
    assert t.dialect == "sglang"
    assert t.prefix_cache_hit_rate_pct == pytest.approx(40.0)
    # vLLM's counters, where an engine has both, come first
    both = [
        EngineReading(
            t_ns=i * S,
            metrics=metrics(
                prefix_cache_hit_rate=0.9,
                prefix_cache_queries_total=100.0 * i,
                prefix_cache_hits_total=10.0 * i,
            ),
        )
        for i in range(3)
    ]
    t = engine_telemetry(both, window_start_ns=0, window_s=3.0)
    assert t.prefix_cache_hit_rate_pct == pytest.approx(10.0)


def test_littles_law_by_hand():
    # 4 req/s x 2.5 s = 10 in the system; 12 is 20 % above (agrees), 14 is 40 % (does not).
    ok = audits.littles_law(arrival_rate_rps=4, mean_time_in_system_s=2.5, engine_in_system=12)
    assert ok.expected_in_system == 10
    assert ok.disagreement_pct == pytest.approx(20.0)
    assert ok.agrees
    bad = audits.littles_law(arrival_rate_rps=4, mean_time_in_system_s=2.5, engine_in_system=14)
    assert bad.disagreement_pct == pytest.approx(40.0)
    assert not bad.agrees
    # Lightly loaded: 0.2 in the system, 1.1 in the engine is within the 1-request slack.
    light = audits.littles_law(arrival_rate_rps=1, mean_time_in_system_s=0.2, engine_in_system=1.1)
    assert light.agrees


def test_conservation():
    c = audits.conservation(
        scheduled=10, statuses=["ok"] * 6 + ["timeout", "cancelled"], never_sent=2
    )
    assert (c.ok, c.failed, c.cancelled, c.never_sent, c.holds) == (6, 1, 1, 2, True)
    lost = audits.conservation(scheduled=10, statuses=["ok"] * 8, never_sent=0)
    assert not lost.holds


def _request(index: int, **fields: object) -> RequestResult:
    values: dict[str, object] = {"t_send_ns": 0, "t_end_ns": 1, "status": "ok"}
    values.update(fields)
    r = RequestResult(index=index, **values)  # type: ignore[arg-type]
    return r


def test_token_accounting_counts_and_quotes():
    from array import array

    honest = _request(
        0,
        output_tokens=3,
        usage_output_tokens=3,
        max_tokens=3,
        ignore_eos=True,
        chunk_ns=array("q", [1, 2, 3]),
    )
    liar = _request(
        1,
        output_tokens=5,
        usage_output_tokens=5,
        max_tokens=5,
        ignore_eos=True,
        chunk_ns=array("q", [1, 2, 3]),
    )
    over = _request(
        2, output_tokens=9, usage_output_tokens=9, max_tokens=5, chunk_ns=array("q", range(9))
    )
    short = _request(
        3,
        output_tokens=2,
        usage_output_tokens=2,
        max_tokens=5,
        ignore_eos=True,
        chunk_ns=array("q", [1, 2]),
        status="short_output",
    )
    under = _request(
        4, output_tokens=2, usage_output_tokens=2, max_tokens=5, chunk_ns=array("q", [1, 2, 3])
    )
    a = audits.token_accounting([short, over, liar, honest, under])
    # usage above the chunks (liar: 5 tokens in 3 chunks) may be honest: recorded, not quoted;
    # usage below them (under: 2 tokens, 3 chunks with text) cannot be.
    assert (a.requests, a.usage_mismatches, a.usage_below_chunks) == (5, 2, 1)
    assert (a.over_max_tokens, a.short_ignore_eos) == (1, 1)
    assert a.examples[0] == "request 2: 9 output tokens, max_tokens 5"
    assert a.examples[2] == "request 4: usage says 2 output tokens, 3 content chunks arrived"

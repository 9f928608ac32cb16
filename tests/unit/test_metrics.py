import math

import numpy as np
import pytest

from tests import factories
from tokenwatt import metrics
from tokenwatt.schema.run import LatencyStats, RequestTable
from tokenwatt.schema.spec import SloSpec

INF = math.inf


def table(**columns):
    n = len(columns["status"])
    base = {
        "t_sched_s": [float(i) for i in range(n)],
        "send_lag_ms": [0.1] * n,
        "ttft_ms": [10.0] * n,
        "tpot_ms": [1.0] * n,
        "e2e_ms": [100.0] * n,
        "input_tokens": [64] * n,
        "output_tokens": [32] * n,
    }
    base.update(columns)
    return RequestTable(**base)


def test_nearest_rank_hand_worked():
    values = np.array([1.0, 2.0, 3.0, 4.0])
    # rank = ceil(p/100 * n): p50 -> 2 -> value 2 (linear interpolation would give 2.5)
    assert metrics.nearest_rank(values, 50) == 2.0
    assert metrics.nearest_rank(values, 50.1) == 3.0
    assert metrics.nearest_rank(values, 75) == 3.0
    assert metrics.nearest_rank(values, 99) == 4.0
    assert metrics.nearest_rank(values, 100) == 4.0
    assert metrics.nearest_rank(values, 0.001) == 1.0


def test_nearest_rank_exact_ranks_survive_float_error():
    values = np.arange(1.0, 101.0)
    # 0.29 * 100 = 28.999999999999996 in floating point: the rank must still be 29
    assert metrics.nearest_rank(values, 29) == 29.0
    assert metrics.nearest_rank(values, 99) == 99.0


def test_nearest_rank_rejects_bad_input():
    with pytest.raises(ValueError, match="no values"):
        metrics.nearest_rank(np.array([]), 50)
    with pytest.raises(ValueError, match="outside"):
        metrics.nearest_rank(np.array([1.0]), 0)


def test_latency_stats_hand_worked():
    stats = metrics.latency_stats([10.0, 20.0, 30.0, 40.0, 50.0])
    assert stats == LatencyStats(count=5, mean=30.0, p50=30.0, p90=50.0, p95=50.0, p99=50.0)


def test_failure_counts_as_infinity():
    # 1 failure in 100: p99 is the 99th smallest, still finite; mean is inf
    values = [float(i) for i in range(1, 100)] + [None]
    stats = metrics.latency_stats(values)
    assert stats.count == 100
    assert stats.p99 == 99.0
    assert stats.p50 == 50.0
    assert stats.mean == INF
    # 2 failures in 100: p99 is inf, failures can never make a probe look better
    stats = metrics.latency_stats([float(i) for i in range(1, 99)] + [None, None])
    assert stats.p99 == INF
    assert metrics.latency_stats([1.0, 2.0, None]).p99 == INF


def test_latency_stats_empty_and_invalid():
    assert metrics.latency_stats([]) == LatencyStats(count=0)
    with pytest.raises(ValueError, match="NaN"):
        metrics.latency_stats([1.0, math.nan])
    with pytest.raises(ValueError, match="negative"):
        metrics.latency_stats([-1.0])


def test_latency_stats_accepts_arrays():
    stats = metrics.latency_stats(np.array([3.0, 1.0, 2.0]))
    assert (stats.p50, stats.p99, stats.mean) == (2.0, 3.0, 2.0)


def test_table_stats_failed_is_inf_and_undefined_ok_is_left_out():
    t = table(
        status=["ok", "ok", "timeout", "ok"],
        tpot_ms=[1.0, None, 5.0, 3.0],  # ok with 1 output token: TPOT undefined, left out
        ttft_ms=[10.0, 20.0, 15.0, 30.0],  # the failed request's value must be ignored
    )
    tpot = metrics.table_latency_stats(t, "tpot_ms")
    assert tpot.count == 3
    assert tpot.p50 == 3.0
    assert tpot.p99 == INF
    ttft = metrics.table_latency_stats(t, "ttft_ms")
    assert ttft.count == 4
    assert ttft.p50 == 20.0
    assert ttft.mean == INF


def test_failures_goodput_throughput():
    t = table(
        status=["ok", "timeout", "http_error", "timeout", "ok"],
        output_tokens=[32, 0, 0, 5, 16],
    )
    assert metrics.failures_by_cause(t.status) == {"http_error": 1, "timeout": 2}
    assert metrics.goodput_tok_s(t, 4.0) == 12.0  # (32 + 16) / 4
    assert metrics.request_throughput_rps(t, 4.0) == 0.5
    with pytest.raises(ValueError, match="positive"):
        metrics.goodput_tok_s(t, 0)


def test_client_bound_reasons():
    assert (
        metrics.client_bound_reasons(
            offered_rate_rps=100.0, achieved_rate_rps=97.0, send_lag_p99_ms=10.0
        )
        == []
    )
    reasons = metrics.client_bound_reasons(
        offered_rate_rps=100.0, achieved_rate_rps=96.9, send_lag_p99_ms=10.01
    )
    assert len(reasons) == 2
    assert "96.900 req/s is under 97%" in reasons[0]
    assert "10.01 ms exceeds 10 ms" in reasons[1]
    reasons = metrics.client_bound_reasons(
        offered_rate_rps=10.0,
        achieved_rate_rps=10.0,
        send_lag_p99_ms=0.1,
        slot_waits=3,
        slot_wait_s=1.5,
        max_concurrency=4,
        client_errors=1,
    )
    assert reasons == [
        "3 window requests waited 1.500 s in total for a concurrency slot (max_concurrency 4)",
        "1 window requests failed for a client-side reason (file descriptors or local ports"
        " exhausted)",
    ]
    assert metrics.client_bound_reasons(
        offered_rate_rps=1.0, achieved_rate_rps=1.0, send_lag_p99_ms=math.inf
    )
    assert metrics.client_bound_reasons(
        offered_rate_rps=1.0, achieved_rate_rps=1.0, send_lag_p99_ms=0.1, harness_errors=2
    ) == [
        "2 sessions were cut by an error in tokenwatt itself (logged with its traceback): the"
        " load was not the planned one"
    ]


def test_slo_pass():
    slo = SloSpec(ttft_p99_ms=100.0, tpot_p99_ms=10.0)
    ok = factories.stats(100.0)
    tpot = factories.stats(10.0)
    assert metrics.slo_pass(first_token_ms=ok, tpot_ms=tpot, slo=slo, client_bound=False)
    assert not metrics.slo_pass(first_token_ms=ok, tpot_ms=tpot, slo=slo, client_bound=True)
    assert not metrics.slo_pass(
        first_token_ms=factories.stats(100.1), tpot_ms=tpot, slo=slo, client_bound=False
    )
    assert not metrics.slo_pass(
        first_token_ms=ok, tpot_ms=LatencyStats(count=0), slo=slo, client_bound=False
    )
    inf = LatencyStats(count=2, mean=INF, p50=1.0, p90=INF, p95=INF, p99=INF)
    assert not metrics.slo_pass(first_token_ms=inf, tpot_ms=tpot, slo=slo, client_bound=False)


def test_slo_pass_against_a_ttfat_bound():
    # slo.ttfat_p99_ms bounds the first answer token instead: the first-token stats given are
    # the TTFAT's, judged against 300 ms (the TTFT's default of 2,000 ms is not judged)
    slo = SloSpec(ttfat_p99_ms=300.0, tpot_p99_ms=10.0)
    assert slo.first_token == "ttfat"
    assert slo.first_token_p99_ms == 300.0
    assert slo.first_token_column == "ttfat_ms"
    tpot = factories.stats(10.0)
    assert metrics.slo_pass(
        first_token_ms=factories.stats(300.0), tpot_ms=tpot, slo=slo, client_bound=False
    )
    assert not metrics.slo_pass(
        first_token_ms=factories.stats(300.5), tpot_ms=tpot, slo=slo, client_bound=False
    )


def test_littles_law_hand_worked():
    # window [100, 200): A covers 50 ns of it, B 100 ns, C none, D 20 ns -> 170 / 100
    intervals = [(50, 150), (0, 1000), (300, 400), (180, 200)]
    assert metrics.littles_law_batch(intervals, 100, 200) == pytest.approx(1.7)
    assert metrics.littles_law_batch([], 100, 200) == 0.0
    with pytest.raises(ValueError, match="after it starts"):
        metrics.littles_law_batch([], 100, 100)
    # Decode phases of 0.9 s and 1.8 s inside a 2 s window: B = 2.7 / 2.
    ms = 1_000_000
    assert metrics.littles_law_batch(
        [(100 * ms, 1000 * ms), (200 * ms, 2000 * ms)], 0, 2000 * ms
    ) == (pytest.approx(1.35))


def test_ttfat_column_hand_worked():
    # Four requests: answered at 900/1,500/1,200 ms after reasoning, one failed, one that spent
    # its tokens thinking (a TTFT, no answer: +inf). Nearest rank over 5 values: p50 is the 3rd
    # smallest, p99 the 5th; two +inf (the failure, the unanswered) make p90 and p99 inf too.
    t = table(
        status=["ok", "ok", "http_error", "ok", "ok"],
        ttft_ms=[100.0, 200.0, None, 150.0, 120.0],
        ttfat_ms=[900.0, 1500.0, None, 1200.0, None],
        reasoning_tokens=[30, 50, 0, 40, 32],
    )
    stats = metrics.table_latency_stats(t, "ttfat_ms")
    assert (stats.count, stats.p50, stats.p90, stats.p99) == (5, 1500.0, INF, INF)
    assert metrics.table_latency_stats(t, "ttft_ms").p50 == 150.0


def test_ttfat_without_reasoning_is_ttft():
    t = table(status=["ok", "ok", "ok"], ttft_ms=[10.0, 30.0, 20.0])
    assert t.ttfat_ms is None
    assert metrics.table_latency_stats(t, "ttfat_ms") == metrics.table_latency_stats(t, "ttft_ms")


def test_request_table_optional_columns_must_match_lengths():
    with pytest.raises(ValueError, match="different lengths"):
        table(status=["ok", "ok"], ttfat_ms=[1.0])

"""The figures of a configuration's confirmation (tokenwatt.figures), hand-worked."""

import pytest

from tests import factories
from tokenwatt.figures import outcome_figures
from tokenwatt.metrics import table_latency_stats


def reasoning_probe(index, ttfat_ms, reasoning_tokens, *, approx=0):
    table = factories.request_table([10.0] * len(ttfat_ms), ttft_ms=100.0, output_tokens=50)
    table = table.model_copy(update={"ttfat_ms": ttfat_ms, "reasoning_tokens": reasoning_tokens})
    return factories.probe_with_requests(
        index,
        4.0,
        table,
        phase="confirm",
        ttfat_ms=table_latency_stats(table, "ttfat_ms"),
        reasoning_tokens=sum(reasoning_tokens),
        approximate_reasoning_tokens=approx,
    )


def test_ttfat_p99_pools_the_repeats_and_reasoning_is_a_share_of_output():
    # 2 repeats x 50 requests: TTFAT 1..50 ms and 51..100 ms; pooled nearest-rank p99 of 100
    # values is the 99th smallest, 99 ms (the worst repeat alone would say 100 ms).
    a = reasoning_probe(0, [float(v) for v in range(1, 51)], [20] * 50, approx=2)
    b = reasoning_probe(1, [float(v) for v in range(51, 101)], [30] * 50)
    figures = outcome_figures([a, b], [0, 1], 4.0)
    assert figures.ttfat_p99_ms == 99.0
    # (50 x 20 + 50 x 30) reasoning of 100 x 50 output tokens = 50 %
    assert figures.reasoning_tokens_pct == pytest.approx(50.0)
    assert figures.approximate_reasoning_requests == 2
    assert figures.ttft_p99_ms == 100.0


def test_no_reasoning_no_ttfat_figure():
    table = factories.request_table([10.0] * 5)
    probe = factories.probe_with_requests(0, 4.0, table, phase="confirm")
    figures = outcome_figures([probe], [0], 4.0)
    assert (figures.ttfat_p99_ms, figures.reasoning_tokens_pct) == (None, None)

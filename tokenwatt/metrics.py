"""Latency statistics over a probe's window requests.

Percentiles are nearest-rank: the p-th percentile of n values is the value at rank
``ceil(p/100 x n)`` of the sorted values. It is always one of the observed values, and a failed
request (counted as +inf latency) can only push it up, never make a probe look better.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from tokenwatt.schema.run import LatencyStats

__all__ = ["latency_stats", "percentile"]


def percentile(sorted_values: Sequence[float], p: float) -> float:
    """Nearest-rank percentile of already sorted values (``p`` in (0, 100]).

    Raises:
        ValueError: for no values or ``p`` out of range.
    """
    if not sorted_values:
        raise ValueError("percentile of no values")
    if not 0 < p <= 100:
        raise ValueError(f"percentile {p} is not in (0, 100]")
    rank = max(1, math.ceil(p / 100.0 * len(sorted_values)))
    return float(sorted_values[rank - 1])


def latency_stats(values_ms: Sequence[float | None]) -> LatencyStats:
    """Mean and p50/p90/p95/p99 of latencies in ms; ``None`` (a failed request) counts as +inf."""
    values = sorted(math.inf if v is None else float(v) for v in values_ms)
    if not values:
        return LatencyStats(count=0)
    mean = math.inf if math.isinf(values[-1]) else sum(values) / len(values)
    return LatencyStats(
        count=len(values),
        mean=mean,
        p50=percentile(values, 50),
        p90=percentile(values, 90),
        p95=percentile(values, 95),
        p99=percentile(values, 99),
    )

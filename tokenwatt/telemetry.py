"""A probe's engine telemetry: what the engine's own ``/metrics`` said during the window (pure).

The engine's page is scraped every 0.25 s inside the measurement window
(:mod:`tokenwatt.load.engine_metrics` reads vLLM's, SGLang's and llama.cpp's names). From the
scrapes of one window:

- **running / waiting**: mean and largest of the running-request and queued-request gauges;
- **KV-cache usage**: mean and largest, % of the engine's KV cache;
- **queue growth**: the least-squares slope of the waiting gauge against time, times the window
  length: how many requests the queue gained over the window. A queue that gains at least
  :data:`GROWING_QUEUE_REQUESTS` is *growing*: the engine is not keeping up, and a rate confirmed
  that way is not a steady state;
- **preemptions**: the preemption counter (vLLM's ``num_preemptions``, SGLang's retractions)
  at the last scrape minus the first; a counter that went down (an engine restart) gives none;
- **prefix-cache hit rate**: prompt tokens found in the prefix cache over those looked up, both
  counter differences over the window (vLLM), else the mean of the engine's own hit-rate gauge
  (SGLang);
- **speculative-decoding acceptance**: accepted over proposed draft tokens, counter
  differences, where the engine exposes them.

A figure the engine does not expose is "not measured" (null), never zero.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

from tokenwatt.schema.run import EngineSeries, EngineTelemetry

if TYPE_CHECKING:  # tokenwatt.load imports this module: the reader's types only
    from tokenwatt.load.engine_metrics import EngineMetrics, EngineReading

__all__ = [
    "GROWING_QUEUE_REQUESTS",
    "counter_delta",
    "engine_telemetry",
    "queue_growing",
    "slope_per_s",
]

GROWING_QUEUE_REQUESTS = 2.0
"""A waiting queue that gains this many requests over a window (fitted) is growing."""

_NS = 1e9


def slope_per_s(times_s: Sequence[float], values: Sequence[float]) -> float | None:
    """Least-squares slope of ``values`` against ``times_s``, per second (None: < 2 times).

    Example: (0, 1), (1, 3), (2, 5) has slope 2.
    """
    n = len(times_s)
    if n < 2:
        return None
    mean_t = math.fsum(times_s) / n
    mean_v = math.fsum(values) / n
    var = math.fsum((t - mean_t) ** 2 for t in times_s)
    if var == 0:
        return None
    return (
        math.fsum((t - mean_t) * (v - mean_v) for t, v in zip(times_s, values, strict=True)) / var
    )


def counter_delta(first: float | None, last: float | None) -> float | None:
    """Last minus first reading of a counter; None if either is missing or it went down."""
    if first is None or last is None or last < first:
        return None
    return last - first


def _mean_max(values: Sequence[float | None]) -> tuple[float | None, float | None]:
    known = [v for v in values if v is not None]
    if not known:
        return None, None
    return math.fsum(known) / len(known), max(known)


def _first_last(readings: Sequence[EngineReading], name: str) -> tuple[float | None, float | None]:
    known = [getattr(r.metrics, name) for r in readings if getattr(r.metrics, name) is not None]
    return (known[0], known[-1]) if known else (None, None)


def _ratio_pct(readings: Sequence[EngineReading], numerator: str, denominator: str) -> float | None:
    num = counter_delta(*_first_last(readings, numerator))
    den = counter_delta(*_first_last(readings, denominator))
    if num is None or den is None or den <= 0:
        return None
    return min(100.0, num / den * 100.0)


def _pct(value: float | None) -> float | None:
    return None if value is None else min(100.0, max(0.0, value * 100.0))


def engine_telemetry(
    readings: Sequence[EngineReading],
    *,
    window_start_ns: int,
    window_s: float,
    scrape_errors: int = 0,
    keep_series: bool = True,
) -> EngineTelemetry:
    """The window's telemetry from its scrapes (see the module docstring)."""
    metrics: list[EngineMetrics] = [r.metrics for r in readings]
    t_s = [(r.t_ns - window_start_ns) / _NS for r in readings]
    running = [m.running for m in metrics]
    waiting = [m.waiting for m in metrics]
    kv_pct = [_pct(m.kv_cache_usage) for m in metrics]
    running_mean, running_max = _mean_max(running)
    waiting_mean, waiting_max = _mean_max(waiting)
    kv_mean, kv_max = _mean_max(kv_pct)
    known_wait = [(t, w) for t, w in zip(t_s, waiting, strict=True) if w is not None]
    slope = slope_per_s([t for t, _ in known_wait], [w for _, w in known_wait])
    preempted = counter_delta(*_first_last(readings, "preemptions_total"))
    hit_rate = _ratio_pct(readings, "prefix_cache_hits_total", "prefix_cache_queries_total")
    if hit_rate is None:
        gauge_mean, _ = _mean_max([m.prefix_cache_hit_rate for m in metrics])
        hit_rate = _pct(gauge_mean)
    dialects = [m.dialect for m in metrics if m.dialect is not None]
    return EngineTelemetry(
        dialect=dialects[0] if dialects else None,
        samples=len(readings),
        scrape_errors=scrape_errors,
        running_mean=running_mean,
        running_max=running_max,
        waiting_mean=waiting_mean,
        waiting_max=waiting_max,
        waiting_growth=slope * window_s if slope is not None else None,
        kv_cache_usage_mean_pct=kv_mean,
        kv_cache_usage_max_pct=kv_max,
        preemptions=round(preempted) if preempted is not None else None,
        prefix_cache_hit_rate_pct=hit_rate,
        spec_decode_acceptance_pct=_ratio_pct(
            readings, "spec_accepted_tokens_total", "spec_draft_tokens_total"
        ),
        series=(
            EngineSeries(
                t_s=[round(t, 3) for t in t_s],
                running=running,
                waiting=waiting,
                kv_cache_usage_pct=[None if v is None else round(v, 3) for v in kv_pct],
            )
            if keep_series
            else None
        ),
    )


def queue_growing(telemetry: EngineTelemetry) -> bool:
    """The waiting queue gained at least :data:`GROWING_QUEUE_REQUESTS` over the window."""
    growth = telemetry.waiting_growth
    return growth is not None and growth >= GROWING_QUEUE_REQUESTS

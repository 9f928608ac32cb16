"""What tokenwatt reads from an engine's Prometheus ``/metrics`` (vLLM's names).

vLLM, and the embedded simulator that copies its names, serve one series per engine (label
``engine``); a figure is summed over them. The page is read by :func:`tokenwatt.promtext.parse`.

The running batch of a probe (:attr:`~tokenwatt.schema.run.ProbeRecord.running_batch_mean`,
which the MBU estimate uses) is the mean of :data:`RUNNING_GAUGE` sampled every
:data:`METRICS_PERIOD_S` inside the measurement window by :func:`sample_running_batch`.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

import httpx

from tokenwatt.promtext import parse, series_sum

__all__ = [
    "METRICS_PERIOD_S",
    "RUNNING_GAUGE",
    "EngineMetrics",
    "parse_engine_metrics",
    "sample_running_batch",
]

RUNNING_GAUGE = "vllm:num_requests_running"
"""The engine's running-batch gauge (requests in model execution batches)."""

_NS = 1e9

METRICS_PERIOD_S = 0.25
"""Seconds between two scrapes of the running-batch gauge."""

_KV_USAGE_GAUGES = ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc")


@dataclass(frozen=True)
class EngineMetrics:
    """The engine's figures on one page, summed over engines (None: not on the page)."""

    running: float | None
    waiting: float | None
    kv_cache_usage: float | None
    """Fraction of the KV cache in use (0..1), averaged over engines."""
    kv_cache_memory_bytes: float | None
    """Bytes of KV cache the engines allocated (``vllm:cache_config_info``)."""
    prompt_tokens_total: float | None
    generation_tokens_total: float | None


def parse_engine_metrics(text: str) -> EngineMetrics:
    """Read the running/waiting gauges, KV usage and token counters from a vLLM-named page.

    Raises:
        ValueError: the page is not in the Prometheus text format (naming the line).
    """
    samples = parse(text)
    kv_usage = [s.value for s in samples if s.name in _KV_USAGE_GAUGES]
    kv_mem: float | None = None
    for s in samples:
        raw = s.labels.get("kv_cache_memory_bytes") if s.name == "vllm:cache_config_info" else None
        if raw is not None and raw.replace(".", "", 1).isdigit():
            kv_mem = (kv_mem or 0.0) + float(raw)
    return EngineMetrics(
        running=series_sum(samples, RUNNING_GAUGE),
        waiting=series_sum(samples, "vllm:num_requests_waiting"),
        kv_cache_usage=sum(kv_usage) / len(kv_usage) if kv_usage else None,
        kv_cache_memory_bytes=kv_mem,
        prompt_tokens_total=series_sum(samples, "vllm:prompt_tokens_total"),
        generation_tokens_total=series_sum(samples, "vllm:generation_tokens_total"),
    )


async def sample_running_batch(
    url: str,
    start_ns: int,
    end_ns: int,
    samples: list[float],
    errors: list[str],
    *,
    period_s: float = METRICS_PERIOD_S,
) -> None:
    """Sample the engine's running-request gauge inside ``[start_ns, end_ns)``.

    Times are ``time.monotonic_ns()``. Each reading taken inside the window is appended to
    ``samples``, each failed scrape (HTTP error, a page out of format, no gauge) to ``errors``
    as it happens, so a caller that cancels the task keeps what was read.

    Args:
        url: the engine's ``/metrics`` URL.
        start_ns: window start; the first scrape waits for it.
        end_ns: window end; a reading that arrives after it is dropped.
        samples: where readings go.
        errors: where failures go, in words.
        period_s: time between scrape starts.
    """
    async with httpx.AsyncClient(timeout=5.0, trust_env=False) as http:
        delay = (start_ns - time.monotonic_ns()) / _NS
        if delay > 0:
            await asyncio.sleep(delay)
        while time.monotonic_ns() < end_ns:
            t_ns = time.monotonic_ns()
            try:
                response = await http.get(url)
                response.raise_for_status()
            except httpx.HTTPError as exc:
                errors.append(f"{type(exc).__name__}: {exc}")
            else:
                try:
                    value = parse_engine_metrics(response.text).running
                except ValueError as exc:
                    errors.append(f"{url} is not in the Prometheus text format: {exc}")
                else:
                    if value is None:
                        errors.append(f"{RUNNING_GAUGE} not found in {url}")
                    elif time.monotonic_ns() < end_ns:
                        samples.append(value)
            next_ns = t_ns + int(period_s * _NS)
            await asyncio.sleep(max(0.0, (min(next_ns, end_ns) - time.monotonic_ns()) / _NS))

"""What tokenwatt reads from an engine's Prometheus ``/metrics`` (vLLM, SGLang or llama.cpp names).

vLLM, and the embedded simulator that copies its names, serve one series per engine (label
``engine``); SGLang one per data-parallel rank (label ``dp``); a figure is summed over them.
llama.cpp's ``llama-server`` (with ``--metrics``) serves one unlabelled series. A page speaks
one of the three dialects: each figure is read under the first of its names that the page has.
The page is read by :func:`tokenwatt.promtext.parse`.

The running batch of a probe (:attr:`~tokenwatt.schema.run.ProbeRecord.running_batch_mean`,
which the MBU estimate uses) is the mean of the running-request gauge
(:data:`RUNNING_GAUGES`) sampled every :data:`METRICS_PERIOD_S` inside the measurement window by
:func:`sample_running_batch`. :func:`sample_engine` keeps every figure of each scrape (the
probe's engine telemetry, :mod:`tokenwatt.telemetry`).

Names read, first match wins (vLLM 0.32, SGLang, llama.cpp's ``llama-server``):

- running: ``vllm:num_requests_running``, ``sglang:num_running_reqs``,
  ``llamacpp:requests_processing``;
- waiting: ``vllm:num_requests_waiting``, ``sglang:num_queue_reqs``,
  ``llamacpp:requests_deferred``;
- KV-cache usage (a fraction): ``vllm:kv_cache_usage_perc`` (older vLLM
  ``vllm:gpu_cache_usage_perc``), ``sglang:token_usage``, ``llamacpp:kv_cache_usage_ratio``;
- preemptions (a counter): ``vllm:num_preemptions_total``, SGLang's retractions
  ``sglang:num_retracted_requests_total``;
- prefix cache: vLLM's counters ``vllm:prefix_cache_hits_total`` and
  ``vllm:prefix_cache_queries_total`` (tokens), else SGLang's gauge ``sglang:cache_hit_rate``;
- speculative decoding: ``vllm:spec_decode_num_accepted_tokens_total`` over
  ``vllm:spec_decode_num_draft_tokens_total`` (llama.cpp: the same names under ``llamacpp:``).
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

import httpx

from tokenwatt.promtext import Sample, parse, series_sum

__all__ = [
    "METRICS_PERIOD_S",
    "RUNNING_GAUGES",
    "Dialect",
    "EngineMetrics",
    "EngineReading",
    "find_running_gauge",
    "parse_engine_metrics",
    "sample_engine",
    "sample_running_batch",
]

RUNNING_GAUGES: tuple[str, ...] = (
    "vllm:num_requests_running",
    "sglang:num_running_reqs",
    "llamacpp:requests_processing",
)
"""The running-batch gauge (requests in the engine's batches) under vLLM's, SGLang's and
llama.cpp's names."""

_WAITING_GAUGES = (
    "vllm:num_requests_waiting",
    "sglang:num_queue_reqs",
    "llamacpp:requests_deferred",
)
_PROMPT_COUNTERS = (
    "vllm:prompt_tokens_total",
    "sglang:prompt_tokens_total",
    "llamacpp:prompt_tokens_total",
)
_GENERATION_COUNTERS = (
    "vllm:generation_tokens_total",
    "sglang:generation_tokens_total",
    "llamacpp:tokens_predicted_total",
)

_NS = 1e9

METRICS_PERIOD_S = 0.25
"""Seconds between two scrapes of the running-batch gauge."""

_KV_USAGE_GAUGES = (
    "vllm:kv_cache_usage_perc",
    "vllm:gpu_cache_usage_perc",
    "sglang:token_usage",
    "llamacpp:kv_cache_usage_ratio",
)
_PREEMPTION_COUNTERS = ("vllm:num_preemptions_total", "sglang:num_retracted_requests_total")
_PREFIX_HITS = ("vllm:prefix_cache_hits_total",)
_PREFIX_QUERIES = ("vllm:prefix_cache_queries_total",)
_PREFIX_HIT_RATE_GAUGES = ("sglang:cache_hit_rate",)
_SPEC_ACCEPTED = (
    "vllm:spec_decode_num_accepted_tokens_total",
    "llamacpp:spec_decode_num_accepted_tokens_total",
)
_SPEC_DRAFT = (
    "vllm:spec_decode_num_draft_tokens_total",
    "llamacpp:spec_decode_num_draft_tokens_total",
)

Dialect = Literal["vllm", "sglang", "llamacpp"]
"""Whose names the page speaks (that of its running-request gauge)."""


def _first_sum(samples: Sequence[Sample], names: Sequence[str]) -> float | None:
    """The sum over label sets of the first of ``names`` the page has (None: none of them)."""
    for name in names:
        value = series_sum(samples, name)
        if value is not None:
            return value
    return None


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
    dialect: Dialect | None = None
    preemptions_total: float | None = None
    prefix_cache_hits_total: float | None = None
    """Prompt tokens found in the prefix cache (vLLM's counter)."""
    prefix_cache_queries_total: float | None = None
    """Prompt tokens looked up in the prefix cache (vLLM's counter)."""
    prefix_cache_hit_rate: float | None = None
    """The engine's own hit-rate gauge (0..1, SGLang), where it has no counters."""
    spec_accepted_tokens_total: float | None = None
    spec_draft_tokens_total: float | None = None


@dataclass(frozen=True)
class EngineReading:
    """One scrape: when it was read (monotonic clock, ns) and what the page said."""

    t_ns: int
    metrics: EngineMetrics


def _dialect(samples: Sequence[Sample]) -> Dialect | None:
    names = {s.name for s in samples}
    for gauge, dialect in zip(RUNNING_GAUGES, ("vllm", "sglang", "llamacpp"), strict=True):
        if gauge in names:
            return dialect  # type: ignore[return-value]
    return None


def parse_engine_metrics(text: str) -> EngineMetrics:
    """Read the running/waiting gauges, KV usage and token counters (any of the three dialects).

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
        running=_first_sum(samples, RUNNING_GAUGES),
        waiting=_first_sum(samples, _WAITING_GAUGES),
        kv_cache_usage=sum(kv_usage) / len(kv_usage) if kv_usage else None,
        kv_cache_memory_bytes=kv_mem,
        prompt_tokens_total=_first_sum(samples, _PROMPT_COUNTERS),
        generation_tokens_total=_first_sum(samples, _GENERATION_COUNTERS),
        dialect=_dialect(samples),
        preemptions_total=_first_sum(samples, _PREEMPTION_COUNTERS),
        prefix_cache_hits_total=_first_sum(samples, _PREFIX_HITS),
        prefix_cache_queries_total=_first_sum(samples, _PREFIX_QUERIES),
        prefix_cache_hit_rate=_mean(samples, _PREFIX_HIT_RATE_GAUGES),
        spec_accepted_tokens_total=_first_sum(samples, _SPEC_ACCEPTED),
        spec_draft_tokens_total=_first_sum(samples, _SPEC_DRAFT),
    )


def _mean(samples: Sequence[Sample], names: Sequence[str]) -> float | None:
    """The mean over label sets of the first of ``names`` the page has (a ratio per engine)."""
    for name in names:
        values = [s.value for s in samples if s.name == name and math.isfinite(s.value)]
        if values:
            return math.fsum(values) / len(values)
    return None


async def find_running_gauge(url: str, *, timeout_s: float = 5.0) -> str | None:
    """Whether the engine's ``/metrics`` at ``url`` has a running-request gauge.

    The running batch comes from the engine's ``/metrics`` when it has one, else from
    Little's law. Asked once before the load starts, so that an engine without the page (or
    with another exporter's page) is not scraped four times a second for nothing.

    Returns:
        None when the gauge is there (sample it), else why not, in words.
    """
    try:
        async with httpx.AsyncClient(timeout=timeout_s, trust_env=False) as http:
            response = await http.get(url)
    except httpx.HTTPError as exc:
        return f"GET {url}: {type(exc).__name__}: {exc}"
    if response.status_code != 200:
        return f"GET {url}: HTTP {response.status_code}"
    reading = _reading_on_page(response.text, url)
    return reading if isinstance(reading, str) else None


def _reading_on_page(text: str, url: str) -> EngineMetrics | str:
    """The engine's figures on the page read from ``url``, or why it has no running gauge."""
    try:
        metrics = parse_engine_metrics(text)
    except ValueError as exc:
        return f"{url} is not in the Prometheus text format: {exc}"
    if metrics.running is None:
        return f"none of {', '.join(RUNNING_GAUGES)} in {url}"
    return metrics


async def sample_running_batch(
    url: str,
    start_ns: int,
    end_ns: int,
    samples: list[float],
    errors: list[str],
    *,
    period_s: float = METRICS_PERIOD_S,
) -> None:
    """Sample the running-request gauge (:data:`RUNNING_GAUGES`) inside ``[start_ns, end_ns)``.

    Times are ``time.monotonic_ns()``. Each reading taken inside the window is appended to
    ``samples``, each failed scrape (HTTP error, a page out of format, no gauge) to ``errors``
    as it happens, so a caller that cancels the task keeps what was read.

    Args:
        url: the engine's ``/metrics`` URL.
        start_ns: window start; the first scrape waits for it.
        end_ns: window end; a reading that arrives after it is dropped and counted as a
            failed scrape, as is one still unanswered when the task is cancelled.
        samples: where readings go.
        errors: where failures go, in words.
        period_s: time between scrape starts.
    """

    def keep(reading: EngineReading) -> None:
        if reading.metrics.running is not None:
            samples.append(reading.metrics.running)

    await _scrape(url, start_ns, end_ns, keep, errors, period_s=period_s)


async def sample_engine(
    url: str,
    start_ns: int,
    end_ns: int,
    readings: list[EngineReading],
    errors: list[str],
    *,
    period_s: float = METRICS_PERIOD_S,
) -> None:
    """Like :func:`sample_running_batch`, keeping every figure of each scrape in ``readings``.

    A reading's time is when its response arrived.
    """
    await _scrape(url, start_ns, end_ns, readings.append, errors, period_s=period_s)


async def _scrape(
    url: str,
    start_ns: int,
    end_ns: int,
    keep: Callable[[EngineReading], None],
    errors: list[str],
    *,
    period_s: float,
) -> None:
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
            except asyncio.CancelledError:
                # The probe ended with this scrape unanswered: a failed scrape, not silence.
                errors.append(f"no answer in {(time.monotonic_ns() - t_ns) / _NS:.1f} s")
                raise
            else:
                reading = _reading_on_page(response.text, url)
                now_ns = time.monotonic_ns()
                if isinstance(reading, str):
                    errors.append(reading)
                elif now_ns < end_ns:
                    keep(EngineReading(t_ns=now_ns, metrics=reading))
                else:
                    errors.append(
                        f"answered {(now_ns - t_ns) / _NS:.1f} s after the request, "
                        f"{(now_ns - end_ns) / _NS:.1f} s after the window ended"
                    )
            next_ns = t_ns + int(period_s * _NS)
            await asyncio.sleep(max(0.0, (min(next_ns, end_ns) - time.monotonic_ns()) / _NS))

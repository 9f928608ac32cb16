"""Latency statistics, throughput, goodput, the client-bound rule and SLO pass (pure functions).

**Request timings** (monotonic clock, nanoseconds). *t_send* is taken just before a request is
written. **TTFT** (time to first token): the arrival of the first chunk that carries output
text, minus t_send (a role-only chunk does not count). **TPOT** (time per output token):
(t_last_token - t_first_token) / (output_tokens - 1), for answers of at least two tokens.
**TTFAT** (time to first answer token, for reasoning models): the arrival of the first chunk
that carries answer text (a chat delta's ``content``, a completion's ``text``), after any
``reasoning_content``/``reasoning`` deltas, minus t_send; without reasoning it is the TTFT. A
successful request that streamed reasoning but no answer (``max_tokens`` spent thinking) counts
as +inf TTFAT: its user never saw an answer. Reasoning tokens are counted apart from the answer:
``usage.completion_tokens_details.reasoning_tokens`` where the server gives it, else the chunks
that carried reasoning, marked approximate; they are part of the output tokens (goodput, TPOT).
**ITL** (inter-token latency): the gaps between successive content chunks. **E2E**: the last
byte, minus t_send. Output tokens come from the server's ``usage`` (asked for with
``stream_options.include_usage``); a server that sends none has them counted from chunks, and
the figure is marked approximate.

**Failed request**: an HTTP error, a connection error, a malformed stream, fewer output tokens
than asked for with ``ignore_eos``, or no completion within ``request_timeout_s``. A failed
request counts as +inf latency in every percentile, so errors can never make a probe look
better.

**SLO pass**: a probe passes when the p99 TTFT and the p99 TPOT of its window requests are
within ``slo.ttft_p99_ms`` and ``slo.tpot_p99_ms``, and it is not client-bound (the load
generator, not the server, was the limit: see "Probe").
For a reasoning model the TTFT bound applies to the first token of any kind, reasoning included.
An SLO that names ``slo.ttfat_p99_ms`` instead bounds the time to the first *answer* token: the
p99 TTFAT takes the p99 TTFT's place in the pass, in the early stop (a window request counts
against the bound when its first answer token came later, when it failed, or when it is still
without one once the bound has passed), in the capacity fit and in the verdict (binding
``ttfat``). It is one or the other: a first-token bound on any token, or on the answer.

**SLO goodput** of a probe: output tokens of its successful window requests ÷ its window.

Percentiles use one method everywhere: **nearest rank**. The p-th percentile of n values is the
value of rank ``ceil(p / 100 * n)`` in ascending order (1-based), i.e. the smallest value with at
least p % of the values at or below it. It always returns one of the measured values, never an
interpolation, so it is well defined when some values are +inf: a failed request counts as +inf
latency, and numpy's default linear interpolation would turn ``[1, 2, 3, inf]`` into
NaN at p99. Example: p50 of ``[1, 2, 3, 4]`` is 2 (linear interpolation would say 2.5); p99 of 100
values is the 99th smallest, so one failure in 100 requests leaves p99 finite and two make it inf.

The mean is +inf as soon as one value is +inf.

Running batch (the ``B`` of the MBU estimate): the mean number of requests the engine is running
over the window. When the engine serves Prometheus ``/metrics``, the mean of its running-request
gauge (``vllm:num_requests_running``, SGLang's ``sglang:num_running_reqs``, llama.cpp's
``llamacpp:requests_processing``) sampled every 0.25 s inside the window. Otherwise Little's law:
the time-average number of requests in their decode phase (first to last content chunk) inside the
window, i.e. the decode time of every request of the probe (not only window requests) that falls
inside the window, divided by the window length.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Literal

import numpy as np
import numpy.typing as npt

from tokenwatt.schema.run import LatencyStats, RequestTable
from tokenwatt.schema.spec import SloSpec

__all__ = [
    "MAX_SEND_LAG_P99_MS",
    "MIN_ACHIEVED_RATE_FRACTION",
    "PERCENTILES",
    "TableColumn",
    "client_bound_reasons",
    "exceeding_to_fail",
    "failures_by_cause",
    "goodput_tok_s",
    "latency_stats",
    "littles_law_batch",
    "nearest_rank",
    "pooled_latency_stats",
    "request_throughput_rps",
    "slo_pass",
    "table_column",
    "table_latency_stats",
]

PERCENTILES: tuple[float, ...] = (50.0, 90.0, 95.0, 99.0)
"""The percentiles every latency summary reports."""

MIN_ACHIEVED_RATE_FRACTION = 0.97
"""An achieved arrival rate under 97 % of the offered rate makes a probe client-bound."""

MAX_SEND_LAG_P99_MS = 10.0
"""A probe whose p99 send lag exceeds 10 ms is client-bound."""

TableColumn = Literal["ttft_ms", "ttfat_ms", "tpot_ms", "e2e_ms"]


def nearest_rank(sorted_values: npt.NDArray[np.float64], p: float) -> float:
    """The p-th percentile of already sorted values by the nearest-rank method.

    Args:
        sorted_values: values in ascending order (+inf allowed, NaN not), at least one.
        p: percentile in (0, 100].

    Returns:
        The value of rank ``ceil(p / 100 * n)`` (1-based).

    Raises:
        ValueError: on an empty array or p outside (0, 100].
    """
    n = len(sorted_values)
    if n == 0:
        raise ValueError("nearest_rank of no values")
    if not 0.0 < p <= 100.0:
        raise ValueError(f"percentile {p} is outside (0, 100]")
    # p / 100 * n can land a hair above an integer in floating point (e.g. 0.29 * 100):
    # round to 9 decimals before ceil so exact ranks stay exact.
    rank = max(1, math.ceil(round(p / 100.0 * n, 9)))
    return float(sorted_values[min(rank, n) - 1])


def exceeding_to_fail(n: int, p: float = 99.0) -> int:
    """How many of n values must exceed a bound for their p-th percentile to exceed it.

    The nearest-rank percentile is the value of rank k = ceil(p/100 n) in ascending order, so it
    exceeds a bound exactly when more than n - k values do: n - k + 1 are enough, whatever the
    others are. A probe's early stop (``sweep.early_stop``) uses this with the window-request
    count, known from the schedule before the probe starts. Fewer values than n (TPOT leaves out
    one-token answers) never need more: n - ceil(p/100 n) does not decrease with n.

    Raises:
        ValueError: n < 1, or p outside (0, 100].
    """
    if n < 1:
        raise ValueError(f"need at least one value, got n = {n}")
    if not 0.0 < p <= 100.0:
        raise ValueError(f"percentile {p} is outside (0, 100]")
    rank = max(1, math.ceil(round(p / 100.0 * n, 9)))  # as nearest_rank computes it
    return n - min(rank, n) + 1


def _as_array(values: Sequence[float | None] | npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    if isinstance(values, np.ndarray):
        array = values.astype(np.float64, copy=False)
    else:
        array = np.fromiter(
            (math.inf if v is None else v for v in values), dtype=np.float64, count=len(values)
        )
    if np.isnan(array).any():
        raise ValueError("latency values contain NaN")
    if (array < 0).any():
        raise ValueError("latency values contain a negative number")
    return array


def latency_stats(values_ms: Sequence[float | None] | npt.NDArray[np.float64]) -> LatencyStats:
    """Mean and p50/p90/p95/p99 of latencies in ms, a failed request (None) counting as +inf.

    Args:
        values_ms: one latency per request (or per gap, for ITL); None marks a failed request.

    Returns:
        The summary; with no values every statistic is None and ``count`` is 0.

    Raises:
        ValueError: if a value is NaN or negative.
    """
    array = _as_array(values_ms)
    if array.size == 0:
        return LatencyStats(count=0)
    array = np.sort(array)
    # math.fsum would be exact but slow on millions of ITL gaps; numpy's pairwise sum is
    # accurate to ~1e-13 relative, far below what a latency in ms can resolve.
    mean = math.inf if math.isinf(array[-1]) else float(array.sum() / array.size)
    p50, p90, p95, p99 = (nearest_rank(array, p) for p in PERCENTILES)
    return LatencyStats(count=int(array.size), mean=mean, p50=p50, p90=p90, p95=p95, p99=p99)


def table_latency_stats(table: RequestTable, column: TableColumn) -> LatencyStats:
    """Latency summary of one column of a probe's window requests.

    A failed request (status other than ``"ok"``) counts as +inf whatever its column holds. A
    successful request with no value is left out: TPOT is undefined with fewer than two output
    tokens, TTFT when a request legitimately produced no text.

    Args:
        table: the window requests.
        column: ``ttft_ms``, ``tpot_ms`` or ``e2e_ms``.
    """
    return pooled_latency_stats([table], column)


def pooled_latency_stats(tables: Sequence[RequestTable], column: TableColumn) -> LatencyStats:
    """Latency summary of one column over the window requests of several probes pooled.

    The p99 TTFT and TPOT of a configuration pool its confirmation repeats this way; the rules
    are those of :func:`table_latency_stats`.
    """
    values: list[float | None] = []
    for table in tables:
        for status, value in zip(table.status, table_column(table, column), strict=True):
            if status != "ok":
                values.append(None)
            elif value is not None:
                values.append(value)
    return latency_stats(values)


def table_column(table: RequestTable, column: TableColumn) -> list[float | None]:
    """One timing column; ``ttfat_ms`` as the statistics read it.

    A table without the TTFAT column had no reasoning: TTFAT is TTFT. With it, a successful
    request that had output (a TTFT) but no answer token counts as +inf.
    """
    if column != "ttfat_ms":
        values: list[float | None] = getattr(table, column)
        return values
    if table.ttfat_ms is None:
        return table.ttft_ms
    return [
        math.inf if answer is None and first is not None else answer
        for answer, first in zip(table.ttfat_ms, table.ttft_ms, strict=True)
    ]


def failures_by_cause(statuses: Iterable[str]) -> dict[str, int]:
    """Count failed requests by cause (every status other than ``"ok"``), sorted by cause."""
    counts = Counter(s for s in statuses if s != "ok")
    return dict(sorted(counts.items()))


def goodput_tok_s(table: RequestTable, window_s: float) -> float:
    """Output tokens of the successful window requests divided by the window length, tok/s."""
    if window_s <= 0:
        raise ValueError(f"window_s must be positive, got {window_s}")
    tokens = sum(n for n, s in zip(table.output_tokens, table.status, strict=True) if s == "ok")
    return tokens / window_s


def request_throughput_rps(table: RequestTable, window_s: float) -> float:
    """Successful window requests divided by the window length, req/s."""
    if window_s <= 0:
        raise ValueError(f"window_s must be positive, got {window_s}")
    return sum(1 for s in table.status if s == "ok") / window_s


def client_bound_reasons(
    *,
    offered_rate_rps: float,
    achieved_rate_rps: float,
    send_lag_p99_ms: float,
    slot_waits: int = 0,
    slot_wait_s: float = 0.0,
    max_concurrency: int | None = None,
    client_errors: int = 0,
    harness_errors: int = 0,
) -> list[str]:
    """Why the load generator, not the server, limited a probe (empty list: it did not).

    Client-bound when the achieved arrival rate is under 97 % of the offered rate or the
    p99 send lag exceeds 10 ms. *Offered* is the rate of the window's own schedule (its window
    requests over the window), not the target rate r: a Poisson schedule's count is random, and
    one 15 s window at 10 req/s (150 expected arrivals, standard deviation 12) falls under 97 %
    of r by chance in about a third of probes. Against the schedule the rule measures what the
    client did with the arrivals it was given: sends spread over longer than the window
    (the last one over 3 % of the window late) or sent late at the tail. More reasons follow
    from the same principle: a window request that waited for a concurrency slot was held back
    by the harness, a request that failed for a client-side reason (out of file descriptors or
    local ports) says nothing about the server, and a session whose next turn tokenwatt failed
    to build was never offered.

    Args:
        offered_rate_rps: arrival rate the schedule offered inside the window, req/s.
        achieved_rate_rps: arrival rate actually delivered, req/s.
        send_lag_p99_ms: p99 of actual minus scheduled send time, ms.
        slot_waits: window requests that waited for a concurrency slot.
        slot_wait_s: total time they waited, s.
        max_concurrency: the cap, for the message.
        client_errors: window requests that failed for a client-side reason.
        harness_errors: sessions cut because tokenwatt failed to build their next turn.
    """
    reasons: list[str] = []
    if offered_rate_rps > 0 and achieved_rate_rps < MIN_ACHIEVED_RATE_FRACTION * offered_rate_rps:
        reasons.append(
            f"achieved arrival rate {achieved_rate_rps:.3f} req/s is under"
            f" {MIN_ACHIEVED_RATE_FRACTION:.0%} of the offered {offered_rate_rps:.3f} req/s"
        )
    if not send_lag_p99_ms <= MAX_SEND_LAG_P99_MS:
        reasons.append(f"p99 send lag {send_lag_p99_ms:.2f} ms exceeds {MAX_SEND_LAG_P99_MS:g} ms")
    if slot_waits > 0:
        cap = f" (max_concurrency {max_concurrency})" if max_concurrency is not None else ""
        reasons.append(
            f"{slot_waits} window requests waited {slot_wait_s:.3f} s in total for a"
            f" concurrency slot{cap}"
        )
    if client_errors > 0:
        reasons.append(
            f"{client_errors} window requests failed for a client-side reason"
            " (file descriptors or local ports exhausted)"
        )
    if harness_errors > 0:
        reasons.append(
            f"{harness_errors} sessions were cut by an error in tokenwatt itself (logged with"
            " its traceback): the load was not the planned one"
        )
    return reasons


def slo_pass(
    *, first_token_ms: LatencyStats, tpot_ms: LatencyStats, slo: SloSpec, client_bound: bool
) -> bool:
    """The SLO pass: the p99 first-token time and p99 TPOT within the SLO, not client-bound.

    ``first_token_ms``: the TTFT, or the TTFAT when the SLO bounds it (``slo.first_token``). A
    probe with no window requests, or whose p99 is unknown, does not pass.
    """
    if client_bound or first_token_ms.p99 is None or tpot_ms.p99 is None:
        return False
    return first_token_ms.p99 <= slo.first_token_p99_ms and tpot_ms.p99 <= slo.tpot_p99_ms


def littles_law_batch(
    intervals_ns: Iterable[tuple[int, int]], window_start_ns: int, window_end_ns: int
) -> float:
    """Time-average number of intervals open inside a window (Little's law).

    With the intervals being requests' decode phases (first token to last token), this is the
    mean running decode batch: the total decode time that falls inside the window divided by the
    window length.

    Args:
        intervals_ns: (start, end) pairs on the monotonic clock, ns; end >= start.
        window_start_ns: window start, ns.
        window_end_ns: window end, ns (after the start).

    Raises:
        ValueError: if the window is empty.
    """
    length = window_end_ns - window_start_ns
    if length <= 0:
        raise ValueError("the window must end after it starts")
    busy = 0
    for start, end in intervals_ns:
        overlap = min(end, window_end_ns) - max(start, window_start_ns)
        if overlap > 0:
            busy += overlap
    return busy / length

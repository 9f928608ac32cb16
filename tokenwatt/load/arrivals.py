"""Seeded arrival schedules: when each request of a probe is due (pure iterators, no I/O).

Every schedule is an endless, non-decreasing sequence of offsets in seconds from the probe's
start; a probe takes as many as it needs (arrivals continue while window requests drain). The
same (seed, stream) gives the same offsets on every machine, so worker processes can each walk
the whole schedule and take their own share without talking to each other.

Processes (``workload.arrival.process``):

- ``poisson``: exponential gaps with mean 1/r.
- ``gamma``: gamma-distributed gaps with shape k = ``burstiness`` and scale 1/(r k): mean gap 1/r,
  coefficient of variation 1/sqrt(k). k = 1 is Poisson, k < 1 burstier, k > 1 smoother (the
  convention of ``vllm bench serve --burstiness``).
- ``constant``: one request every 1/r s, the first at 0.
- ``trace``: the trace's own timestamps, relative to its first row; with ``rescale`` multiplied
  so the trace's mean rate becomes r, without it replayed as recorded. The trace repeats when
  it runs out, the next pass starting one mean gap after the last row.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence

import numpy as np

from tokenwatt.schema.spec import ArrivalSpec

__all__ = [
    "arrival_offsets",
    "constant_offsets",
    "gamma_offsets",
    "poisson_offsets",
    "trace_offsets",
    "trace_rate_rps",
]

_ARRIVAL_KEY = 0x41525256  # separates the arrival draws from the workload's length/prompt draws
_BATCH = 4096


def _rng(seed: int, stream: int) -> np.random.Generator:
    return np.random.Generator(
        np.random.PCG64(np.random.SeedSequence([seed, stream, _ARRIVAL_KEY]))
    )


def _check_rate(rate_rps: float) -> None:
    if not rate_rps > 0:
        raise ValueError(f"rate_rps must be positive, got {rate_rps}")


def _cumulative(gaps: Iterator[np.ndarray]) -> Iterator[float]:
    t = 0.0
    for batch in gaps:
        for gap in batch.tolist():
            t += gap
            yield t


def poisson_offsets(rate_rps: float, *, seed: int, stream: int = 0) -> Iterator[float]:
    """Poisson arrivals at ``rate_rps``: exponential gaps (one before the first request too)."""
    _check_rate(rate_rps)
    rng = _rng(seed, stream)
    scale = 1.0 / rate_rps
    return _cumulative(rng.exponential(scale, _BATCH) for _ in itertools.count())


def gamma_offsets(
    rate_rps: float, *, burstiness: float, seed: int, stream: int = 0
) -> Iterator[float]:
    """Gamma-distributed gaps with shape ``burstiness`` and mean 1/``rate_rps``."""
    _check_rate(rate_rps)
    if not burstiness > 0:
        raise ValueError(f"burstiness must be positive, got {burstiness}")
    rng = _rng(seed, stream)
    scale = 1.0 / (rate_rps * burstiness)
    return _cumulative(rng.gamma(burstiness, scale, _BATCH) for _ in itertools.count())


def constant_offsets(rate_rps: float) -> Iterator[float]:
    """One arrival every 1/``rate_rps`` s, the first at 0 (computed as i/r: no drift)."""
    _check_rate(rate_rps)
    return (i / rate_rps for i in itertools.count())


def trace_rate_rps(times_s: Sequence[float]) -> float:
    """Mean arrival rate of a trace: (rows - 1) / span.

    Raises:
        ValueError: fewer than two rows, or all at the same instant.
    """
    if len(times_s) < 2:
        raise ValueError("a trace needs at least two timestamps to replay its arrivals")
    span = times_s[-1] - times_s[0]
    if not span > 0:
        raise ValueError("every timestamp of the trace is the same: no arrival rate to replay")
    return (len(times_s) - 1) / span


def trace_offsets(times_s: Sequence[float], *, rate_rps: float | None = None) -> Iterator[float]:
    """Replay a trace's timestamps, repeating it when it runs out.

    Args:
        times_s: arrival times in seconds, non-decreasing (any origin).
        rate_rps: rescale so the mean rate is this; None = replay as recorded.

    Raises:
        ValueError: see :func:`trace_rate_rps`, or timestamps that go backwards.
    """
    own_rate = trace_rate_rps(times_s)
    if any(b < a for a, b in itertools.pairwise(times_s)):
        raise ValueError("trace timestamps go backwards: sort the trace by time")
    factor = 1.0 if rate_rps is None else own_rate / rate_rps
    if rate_rps is not None:
        _check_rate(rate_rps)
    start = times_s[0]
    relative = [(t - start) * factor for t in times_s]
    period = relative[-1] + factor / own_rate  # span plus one mean gap
    return (cycle * period + t for cycle in itertools.count() for t in relative)


def arrival_offsets(
    arrival: ArrivalSpec,
    *,
    rate_rps: float,
    seed: int,
    stream: int = 0,
    trace_times_s: Sequence[float] | None = None,
) -> Iterator[float]:
    """The schedule a spec's ``workload.arrival`` asks for, at ``rate_rps``.

    Args:
        arrival: the spec's arrival section.
        rate_rps: target rate, req/s (for ``trace`` without ``rescale`` it is not used: the trace
            sets the pace).
        seed: the workload seed.
        stream: separates the schedules of different probes of one run.
        trace_times_s: the trace's timestamps (``trace`` only).

    Raises:
        ValueError: a ``trace`` process without timestamps, or a bad rate.
    """
    if arrival.process == "poisson":
        return poisson_offsets(rate_rps, seed=seed, stream=stream)
    if arrival.process == "gamma":
        return gamma_offsets(rate_rps, burstiness=arrival.burstiness, seed=seed, stream=stream)
    if arrival.process == "constant":
        return constant_offsets(rate_rps)
    if trace_times_s is None:
        raise ValueError(
            "workload.arrival.process 'trace' needs a trace file with timestamps"
            " (workload.trace), not a built-in workload"
        )
    return trace_offsets(trace_times_s, rate_rps=rate_rps if arrival.rescale else None)

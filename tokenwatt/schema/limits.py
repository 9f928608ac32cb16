"""What no measurement can produce: the physical limits a result file is checked against.

A result that claims the impossible is refused when it is loaded (``tokenwatt validate`` names
the field and exits 2) and never written by ``tokenwatt report``, whatever else it gets right:

- at least one accelerator in use (``hardware.count`` >= 1);
- MBU in (0, 100] %: a decode step cannot read faster than the rated bandwidth;
- power, energy, goodput and latencies never negative;
- percentiles in order: p50 <= p90 <= p95 <= p99 (run files), p50 <= p99 (each probe of a
  result), min <= mean <= max of a power trace, a capacity inside its own interval;
- SLO passes at most the repeats, at most one goodput per repeat, accuracy answers and
  failures at most the questions asked;
- a probe marked as passing has both p99s within the SLO.

Those need only one section of the file (field constraints and validators in
:mod:`tokenwatt.schema.result` and :mod:`tokenwatt.schema.run`); the two that need two sections
are here:

- **Rated power**: with ``power.kind: board`` the mean power is the sum over the GPUs in use, so
  it cannot exceed ``hardware.count`` x the accelerator's rated board power
  (:data:`tokenwatt.gpus.GPU_PRESETS`) by more than :data:`RATED_POWER_TOLERANCE` (a board
  limit can be raised a little above its default; a mean over minutes above that is not a
  reading of those boards). Unknown accelerators are not checked.
- **Goodput**: the output tokens of one window's successful requests cannot exceed the window's
  requests x the longest output the workload asks for. The window's requests are random; the
  bound takes the expected count plus :data:`ARRIVAL_SIGMAS` standard deviations (Poisson:
  the variance is the mean; gamma arrivals of shape k < 1: mean / k) plus
  :data:`ARRIVAL_SLACK_REQUESTS`, which a true count exceeds with a probability far below
  one in a billion. Checked only where the longest output is known (a fixed count, or a
  distribution with a ``max``) and the arrival process is not a replayed trace.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from tokenwatt.gpus import preset_for_device_name
from tokenwatt.schema.spec import FixedTokens, LognormalTokens, UniformTokens, WorkloadSpec

if TYPE_CHECKING:
    from tokenwatt.schema.result import ResultFile

__all__ = [
    "ARRIVAL_SIGMAS",
    "ARRIVAL_SLACK_REQUESTS",
    "RATED_POWER_TOLERANCE",
    "impossible_in_result",
    "max_goodput_tok_s",
    "max_output_tokens",
]

RATED_POWER_TOLERANCE = 1.2
"""Mean board power above this multiple of the rated board power (sum over GPUs) is refused."""

ARRIVAL_SIGMAS = 8.0
"""Standard deviations above the expected window requests that the goodput bound allows."""

ARRIVAL_SLACK_REQUESTS = 8
"""Requests added to the bound, for windows with few expected requests."""


def max_output_tokens(workload: WorkloadSpec) -> int | None:
    """The longest output the workload asks for; None when it is not bounded by the spec."""
    dist = workload.output_tokens
    if isinstance(dist, int):
        return dist
    if isinstance(dist, FixedTokens):
        return dist.value
    if isinstance(dist, UniformTokens):
        return dist.max
    if isinstance(dist, LognormalTokens):
        return dist.max
    return None  # the trace's lengths: not known without reading it


def max_goodput_tok_s(
    *, rate_rps: float, window_s: float, max_output: int, burstiness: float = 1.0
) -> float:
    """The highest goodput one window at ``rate_rps`` can have, tok/s (see the module docstring).

    Example: 10 req/s over 100 s expects 1,000 requests; the bound is 1,000 + 8 x sqrt(1,000)
    + 8 = 1,260.98 requests, so with outputs of at most 256 tokens 3,228.1 tok/s.
    """
    expected = rate_rps * window_s
    spread = math.sqrt(expected / min(1.0, burstiness))
    requests = expected + ARRIVAL_SIGMAS * spread + ARRIVAL_SLACK_REQUESTS
    return requests * max_output / window_s


def _goodput_problems(result: ResultFile) -> list[str]:
    workload = result.spec.workload
    longest = max_output_tokens(workload)
    if longest is None or workload.arrival.process == "trace":
        return []
    burst = workload.arrival.burstiness if workload.arrival.process == "gamma" else 1.0
    problems: list[str] = []
    for i, config in enumerate(result.configs):
        rate = config.confirmed_rate_rps
        window_s = (
            config.measurement.window_s
            if config.measurement is not None
            else result.spec.measurement.window_s
        )
        if rate is not None and rate > 0:
            bound = max_goodput_tok_s(
                rate_rps=rate, window_s=window_s, max_output=longest, burstiness=burst
            )
            claimed = [("goodput_tok_s", config.goodput_tok_s)] + [
                (f"repeat_goodputs_tok_s[{j}]", g)
                for j, g in enumerate(config.repeat_goodputs_tok_s or [])
            ]
            for name, value in claimed:
                if value > bound:
                    problems.append(
                        f"configs[{i}].{name}: {value:,.1f} tok/s is more than {rate:g} req/s"
                        f" over {window_s:g} s with outputs of at most {longest:,} tokens can"
                        f" give ({bound:,.1f} tok/s)"
                    )
        for j, probe in enumerate(config.probes or []):
            bound = max_goodput_tok_s(
                rate_rps=probe.rate_rps,
                window_s=probe.window_s,
                max_output=longest,
                burstiness=burst,
            )
            if probe.goodput_tok_s > bound:
                problems.append(
                    f"configs[{i}].probes[{j}].goodput_tok_s: {probe.goodput_tok_s:,.1f} tok/s"
                    f" is more than {probe.rate_rps:g} req/s with outputs of at most"
                    f" {longest:,} tokens can give ({bound:,.1f} tok/s)"
                )
    return problems


def _power_problems(result: ResultFile) -> list[str]:
    if result.power.kind != "board":
        return []
    gpu = preset_for_device_name(result.hardware.accelerator)
    if gpu is None:
        return []
    count = result.hardware.count
    limit_kw = count * gpu.power_limit_w * RATED_POWER_TOLERANCE / 1000.0
    problems: list[str] = []
    for i, config in enumerate(result.configs):
        kw = config.node_power_kw
        if kw is not None and kw > limit_kw:
            problems.append(
                f"configs[{i}].node_power_kw: {kw:g} kW of board power is more than"
                f" {count} x {gpu.name} can draw ({count} x {gpu.power_limit_w:g} W rated,"
                f" +{RATED_POWER_TOLERANCE - 1:.0%}: {limit_kw:g} kW)"
            )
    return problems


def impossible_in_result(result: ResultFile) -> list[str]:
    """Every claim of the result that no measurement can produce, each naming its field."""
    return _power_problems(result) + _goodput_problems(result)

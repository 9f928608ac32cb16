"""The audits a reviewer would run on every probe (pure); each is kept in the run file.

- **Little's law**: in a steady state the mean number of requests in a system equals the arrival
  rate times the mean time each spends in it (L = lambda W). lambda is the probe's window
  requests over the time taken to send them (its achieved arrival rate), W the mean
  send-to-last-byte time of its successful window requests, and L the engine's own mean running +
  waiting requests over the window (:mod:`tokenwatt.telemetry`). They agree when they differ by
  at most :data:`LITTLES_LAW_TOLERANCE_PCT` % of lambda W or :data:`LITTLES_LAW_SLACK_REQUESTS`
  requests, whichever is larger (the gauges are sampled, and W includes the HTTP round trip the
  engine does not see). A larger disagreement means the engine's gauges, or the client's clock,
  do not describe the same load: a figure built on them (the MBU's batch) cannot be trusted.
- **Conservation**: every window request of the arrival schedule is accounted for exactly once:
  scheduled = ok + failed + cancelled (cut by an early stop) + never sent (after an early stop).
- **Token accounting**: per window request, the server's ``usage.completion_tokens`` against
  the content chunks the client received. Usage *below* the chunks is impossible when counted
  honestly (every chunk with text carries a token) and is a violation; usage *above* them is
  only recorded (a *usage mismatch*: several tokens in one chunk, or a token with no text of its
  own, as real vLLM streams on most requests of a random-weight model), since without the
  model's tokenizer a chunk's tokens cannot be counted. Outputs longer than the ``max_tokens``
  asked for (a server over-reporting what ``ignore_eos`` fixes) and ``ignore_eos`` outputs that
  stopped short are violations. Each is counted, with a few examples.
- **Steady state**: whether the warm-up brought the load to its steady state before the window
  opened. A probe starts from an idle server; under Poisson arrivals at rate lambda the expected
  number of requests in the system t seconds in is lambda times the integral from 0 to t of
  P(D > s) ds, D a request's time in the system, and it reaches lambda E[D] (Little's law) only
  once t passes the longest times. The *shortfall* at t is E[(D - t)+] / E[D]: the share of the
  steady-state load still missing. The audit estimates it from the probe's own window requests
  (D = send to last byte, or to the failure; requests cut by an early stop left out) at the
  window's start and averaged over the window, and the warm-up that would bring it to
  :data:`STEADY_STATE_SHORTFALL_PCT` %. A window that opens short of the steady state holds
  fewer requests in flight than the rate implies: its latencies read low, and a capacity
  estimated from it high. Long answers make this large: with the seed's workload (chat-mix-v1
  with its full output lengths, up to 18,589 tokens) at its SLO's 50 ms per token, the seed's
  45 s warm-up opens the window 23 % short. A probe that ramps (``sweep.ramp``,
  :mod:`tokenwatt.sweep`) starts on the n requests the previous one left in flight; taken as a
  steady-state population they still hold n E[(D - t)+] / E[D] at t, so its shortfall is the
  one from idle times 1 - n / (lambda E[D]) (negative when the carried load was above this
  rate's), and the audit records the carried share.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from tokenwatt.client.openai import RequestResult
from tokenwatt.schema.run import ConservationAudit, LittlesLawAudit, SteadyStateAudit, TokenAudit

__all__ = [
    "LITTLES_LAW_SLACK_REQUESTS",
    "LITTLES_LAW_TOLERANCE_PCT",
    "MAX_EXAMPLES",
    "STEADY_STATE_SHORTFALL_PCT",
    "conservation",
    "littles_law",
    "shortfall",
    "steady_state",
    "steady_warmup_s",
    "token_accounting",
]

LITTLES_LAW_TOLERANCE_PCT = 25.0
"""Largest relative disagreement between lambda W and the engine's count that still agrees, %."""

LITTLES_LAW_SLACK_REQUESTS = 1.0
"""Largest absolute disagreement that still agrees, requests (for lightly loaded probes)."""

MAX_EXAMPLES = 3
"""Offending requests quoted per audit."""

Durations = Sequence[float] | npt.NDArray[np.float64]
"""Times in the system, s."""

STEADY_STATE_SHORTFALL_PCT = 1.0
"""Largest shortfall of the load in the system when the window opens that is steady state, %."""


def littles_law(
    *, arrival_rate_rps: float, mean_time_in_system_s: float, engine_in_system: float
) -> LittlesLawAudit:
    """Compare lambda W with the engine's mean running + waiting.

    Example: 4 req/s x 2.5 s = 10 requests; an engine count of 12 is 20 % above: it agrees;
    14 is 40 % above: it does not.
    """
    expected = arrival_rate_rps * mean_time_in_system_s
    gap = engine_in_system - expected
    allowed = max(LITTLES_LAW_TOLERANCE_PCT / 100.0 * expected, LITTLES_LAW_SLACK_REQUESTS)
    return LittlesLawAudit(
        arrival_rate_rps=arrival_rate_rps,
        mean_time_in_system_s=mean_time_in_system_s,
        expected_in_system=expected,
        engine_in_system=engine_in_system,
        disagreement_pct=gap / expected * 100.0 if expected > 0 else 0.0,
        agrees=abs(gap) <= allowed,
    )


def conservation(*, scheduled: int, statuses: Sequence[str], never_sent: int) -> ConservationAudit:
    """Account for every scheduled window request (``statuses``: those that were recorded)."""
    ok = sum(1 for s in statuses if s == "ok")
    cancelled = sum(1 for s in statuses if s == "cancelled")
    failed = len(statuses) - ok - cancelled
    return ConservationAudit(
        scheduled=scheduled,
        ok=ok,
        failed=failed,
        cancelled=cancelled,
        never_sent=never_sent,
        holds=scheduled == ok + failed + cancelled + never_sent,
    )


def token_accounting(window: Sequence[RequestResult]) -> TokenAudit:
    """Count the window requests whose token counts do not add up, quoting a few."""
    mismatches = below = over = short = 0
    examples: list[str] = []

    def quote(text: str) -> None:
        if len(examples) < MAX_EXAMPLES:
            examples.append(text)

    for r in sorted(window, key=lambda r: r.index):
        if r.usage_mismatch:
            mismatches += 1
        if r.usage_below_chunks:
            below += 1
            quote(
                f"request {r.index}: usage says {r.usage_output_tokens} output tokens,"
                f" {r.content_events} content chunks arrived"
            )
        if r.max_tokens > 0 and r.output_tokens > r.max_tokens:
            over += 1
            quote(f"request {r.index}: {r.output_tokens} output tokens, max_tokens {r.max_tokens}")
        if r.ignore_eos and r.status in ("ok", "short_output") and r.output_tokens < r.max_tokens:
            short += 1
            quote(
                f"request {r.index}: {r.output_tokens} output tokens with ignore_eos,"
                f" max_tokens {r.max_tokens}"
            )
    return TokenAudit(
        requests=len(window),
        usage_mismatches=mismatches,
        usage_below_chunks=below,
        over_max_tokens=over,
        short_ignore_eos=short,
        examples=examples,
    )


def shortfall(durations_s: Durations, at_s: float) -> float:
    """E[(D - t)+] / E[D] at t = ``at_s``: the share of the steady-state load missing (pure).

    Example: times in system 10, 20 and 30 s (mean 20) at t = 15: (0 + 5 + 15) / 3 / 20 = 1/3.
    """
    d = np.asarray(durations_s, dtype=np.float64)
    mean = float(d.mean()) if d.size else 0.0
    if mean <= 0.0:
        return 0.0
    return float(np.maximum(d - at_s, 0.0).mean()) / mean


def _window_shortfall(d: np.ndarray, start_s: float, window_s: float) -> float:
    """The shortfall averaged over [start, start + window]: E[integral of (D - t)+] / E[D] / W."""
    mean = float(d.mean())
    if mean <= 0.0 or window_s <= 0.0:
        return 0.0
    inside = np.clip(d - start_s, 0.0, window_s)  # the part of (D - t)+ > 0 within the window
    # integral over t in [s, s + W] of (D - t)+ = inside * (D - s) - inside^2 / 2
    area = inside * (d - start_s) - inside * inside / 2.0
    return float(area.mean()) / mean / window_s


def steady_warmup_s(durations_s: Durations, target_pct: float, *, scale: float = 1.0) -> float:
    """The shortest warm-up whose shortfall, times ``|scale|``, is at most ``target_pct`` % (pure).

    0 if none is needed. ``scale`` is a ramped probe's 1 - carried load share (see
    :func:`steady_state`). Example: times 10, 20 and 30 s, 10 %: E[(D - t)+] = 2 at t = 24 (the
    30 s request's 6 s / 3); with scale 0.5 the shortfall from idle may reach 20 %: t = 19.
    """
    from scipy import optimize  # slow to import: on first use

    d = np.asarray(durations_s, dtype=np.float64)
    factor = abs(scale)
    if not d.size or factor * shortfall(d, 0.0) <= target_pct / 100.0:
        return 0.0
    target = target_pct / 100.0 / factor
    top = float(d.max())
    if target <= 0.0:
        return top
    return float(optimize.brentq(lambda t: shortfall(d, t) - target, 0.0, top, xtol=1e-6))


def steady_state(
    *,
    warmup_s: float,
    window_s: float,
    durations_s: Sequence[float],
    rate_rps: float | None = None,
    carried_requests: int | None = None,
) -> SteadyStateAudit:
    """The steady-state audit of one probe from its window requests' times in the system.

    A ramped probe (``sweep.ramp``) started with ``carried_requests`` of the previous probe's
    requests in flight. Taken as a steady-state population, their remaining times follow the
    equilibrium residual law, so n of them still hold n E[(D - t)+] / E[D] at t, and the
    shortfall is (1 - n / (rate E[D])) times the one from idle. Example: the times above, 2
    req/s (steady load 40), 30 carried: the shortfall at 15 s is 1/4 x 1/3 = 1/12.
    """
    d = np.asarray([x for x in durations_s if math.isfinite(x) and x >= 0.0], dtype=np.float64)
    mean = float(d.mean()) if d.size else 0.0
    carried_share: float | None = None
    scale = 1.0
    if carried_requests is not None and rate_rps is not None and rate_rps > 0 and mean > 0:
        carried_share = carried_requests / (rate_rps * mean)
        scale = 1.0 - carried_share
    at_start = scale * shortfall(d, warmup_s)
    return SteadyStateAudit(
        requests=int(d.size),
        mean_time_in_system_s=mean,
        longest_time_in_system_s=float(d.max()) if d.size else 0.0,
        warmup_s=warmup_s,
        shortfall_pct=at_start * 100.0,
        window_shortfall_pct=scale * _window_shortfall(d, warmup_s, window_s) * 100.0
        if d.size
        else 0.0,
        steady_warmup_s=steady_warmup_s(d, STEADY_STATE_SHORTFALL_PCT, scale=scale),
        carried_load_pct=carried_share * 100.0 if carried_share is not None else None,
        holds=abs(at_start) * 100.0 <= STEADY_STATE_SHORTFALL_PCT,
    )

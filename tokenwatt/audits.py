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
"""

from __future__ import annotations

from collections.abc import Sequence

from tokenwatt.client.openai import RequestResult
from tokenwatt.schema.run import ConservationAudit, LittlesLawAudit, TokenAudit

__all__ = [
    "LITTLES_LAW_SLACK_REQUESTS",
    "LITTLES_LAW_TOLERANCE_PCT",
    "MAX_EXAMPLES",
    "conservation",
    "littles_law",
    "token_accounting",
]

LITTLES_LAW_TOLERANCE_PCT = 25.0
"""Largest relative disagreement between lambda W and the engine's count that still agrees, %."""

LITTLES_LAW_SLACK_REQUESTS = 1.0
"""Largest absolute disagreement that still agrees, requests (for lightly loaded probes)."""

MAX_EXAMPLES = 3
"""Offending requests quoted per audit."""


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

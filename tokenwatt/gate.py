"""The CI gate of ``tokenwatt report``: an exit status from the verdict, and a summary for scripts.

``--fail-on`` turns the verdict (written by :mod:`tokenwatt.compare`, never by hand) into the
command's exit status, so a pipeline can stop on a regression without parsing text. Each failing
outcome has its own status, so a script can tell them apart; 0, 1, 2 and 130 keep their meaning
for every command (success, an error, bad input, interrupted).

| verdict | ``--fail-on worse`` | ``--fail-on inconclusive`` |
| --- | --- | --- |
| ``worse`` | :data:`EXIT_WORSE` (3) | 3 |
| ``gate_failed`` (accuracy dropped) | :data:`EXIT_GATE_FAILED` (5) | 5 |
| ``inconclusive`` | 0 | :data:`EXIT_INCONCLUSIVE` (4) |
| ``better``, ``no_difference`` | 0 | 0 |

``inconclusive`` is the stricter level: it also fails what ``worse`` fails, because a gate that
asks for proof of no regression cannot pass a proven one. An accuracy-gate failure counts as a
regression: the candidate is never an improvement then, whatever its capacity.

**Several candidates** (an N-way report, :mod:`tokenwatt.multiplicity`): the gate reads every
candidate's verdict (after the multiple-comparison correction) and fails if any one fails it.
The status is that of the most severe failing verdict, in the order ``worse``, ``gate_failed``,
``inconclusive`` (a proven capacity regression first), and the message names that candidate.

:func:`summarize` gives what ``report --json`` prints: the verdict and each configuration's
headline figures, as one JSON object.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal, get_args

from pydantic import Field

from tokenwatt import policy
from tokenwatt.schema.base import Role, StrictModel
from tokenwatt.schema.result import MultipleComparison, ResultFile, Verdict, VerdictOutcome

__all__ = [
    "EXIT_GATE_FAILED",
    "EXIT_INCONCLUSIVE",
    "EXIT_WORSE",
    "FAIL_ON_LEVELS",
    "ConfigSummary",
    "FailOn",
    "ReportSummary",
    "exit_code",
    "failing_verdict",
    "result_verdicts",
    "summarize",
]

FailOn = Literal["worse", "inconclusive"]
"""What ``--fail-on`` fails: a regression, or also a comparison that cannot say."""

FAIL_ON_LEVELS: tuple[FailOn, ...] = get_args(FailOn)

EXIT_WORSE = 3
"""Exit status of ``report --fail-on`` when the candidate is worse than the baseline."""
EXIT_INCONCLUSIVE = 4
"""Exit status of ``report --fail-on inconclusive`` when the verdict is inconclusive."""
EXIT_GATE_FAILED = 5
"""Exit status of ``report --fail-on`` when the candidate fails the accuracy gate."""

_FAILS: dict[FailOn, dict[VerdictOutcome, int]] = {
    "worse": {"worse": EXIT_WORSE, "gate_failed": EXIT_GATE_FAILED},
    "inconclusive": {
        "worse": EXIT_WORSE,
        "gate_failed": EXIT_GATE_FAILED,
        "inconclusive": EXIT_INCONCLUSIVE,
    },
}


def exit_code(verdict: Verdict | None, fail_on: FailOn | None) -> int:
    """The exit status the verdict gives under ``--fail-on`` (0: the gate passes).

    Args:
        verdict: the result's verdict (None: the result has none).
        fail_on: the ``--fail-on`` level; None: no gate, always 0.
    """
    if fail_on is None or verdict is None:
        return 0
    return _FAILS[fail_on].get(verdict.outcome, 0)


_SEVERITY: tuple[VerdictOutcome, ...] = ("worse", "gate_failed", "inconclusive")


def result_verdicts(result: ResultFile) -> list[Verdict]:
    """Every candidate's verdict: an N-way report's ``verdicts``, else its one ``verdict``."""
    if result.verdicts is not None:
        return list(result.verdicts)
    return [result.verdict] if result.verdict is not None else []


def failing_verdict(
    verdicts: Sequence[Verdict], fail_on: FailOn | None
) -> tuple[int, Verdict | None]:
    """The exit status over several verdicts, and the verdict that sets it (None: it passes)."""
    for outcome in _SEVERITY:
        for v in verdicts:
            if v.outcome == outcome and (code := exit_code(v, fail_on)):
                return code, v
    return 0, None


class ConfigSummary(StrictModel):
    """One configuration's headline figures, as the result gives them."""

    key: Role
    label: str
    run_file: str | None = Field(description="The run file it came from")
    slo_capacity_rps: float | None = Field(description="SLO capacity, req/s")
    slo_capacity_ci_rps: list[float] | None = Field(description="Its 95 % interval, req/s")
    binding_slo: Literal["ttft", "ttfat", "tpot"] | None = Field(
        description="The bound that sets it"
    )
    confirmed_rate_rps: float | None = Field(description="Rate the sweep confirmed, req/s")
    goodput_tok_s: float = Field(description="SLO goodput at the confirmed rate, tok/s")
    ttft_p99_ms: float | None = Field(description="p99 TTFT at the confirmed rate, ms")
    tpot_p99_ms: float | None = Field(description="p99 TPOT at the confirmed rate, ms")
    node_power_kw: float | None = Field(description="Mean power, kW")
    tokens_per_joule: float | None = Field(description="Goodput per watt, tok/J")
    mbu_pct: float | None = Field(description="Memory-bandwidth utilisation, %")
    accuracy_score_pct: float | None = Field(description="Accuracy, % correct")
    accuracy_delta_pts: float | None = Field(description="Accuracy minus the baseline's, points")


class ReportSummary(StrictModel):
    """What ``tokenwatt report --json`` prints on stdout: one object for scripts."""

    result_id: str
    result_file: str = Field(description="Where the result was written")
    status: Literal["draft", "published"]
    publishable: bool = Field(description="Meets the publishing policy (recomputed)")
    policy_violations: list[str] = Field(description="Each rule it breaks, in words")
    simulated: bool = Field(description="Made against the embedded simulator")
    verdict: Verdict | None = Field(description="The comparison's verdict, as in the result")
    verdicts: list[Verdict] | None = Field(
        default=None, description="N-way report: every candidate's verdict, as in the result"
    )
    correction: MultipleComparison | None = Field(
        default=None, description="N-way report: the multiple-comparison correction"
    )
    configs: list[ConfigSummary]
    mismatches: list[str] = Field(description="Differences accepted with --allow-mismatch")
    fail_on: FailOn | None = Field(description="The --fail-on level, if any")
    exit_code: int = Field(description="The command's exit status (0: the gate passed)")


def summarize(result: ResultFile, *, result_file: str, fail_on: FailOn | None) -> ReportSummary:
    """The verdict and figures of a result, with the exit status ``--fail-on`` gives it."""
    violations = policy.check_result(result)
    return ReportSummary(
        result_id=result.id,
        result_file=result_file,
        status=result.status,
        publishable=not violations,
        policy_violations=[str(v) for v in violations],
        simulated=bool(result.simulated),
        verdict=result.verdict,
        verdicts=result.verdicts,
        correction=result.correction,
        configs=[
            ConfigSummary(
                key=c.key,
                label=c.label,
                run_file=c.run_file,
                slo_capacity_rps=c.slo_capacity_rps,
                slo_capacity_ci_rps=c.slo_capacity_ci_rps,
                binding_slo=c.binding_slo,
                confirmed_rate_rps=c.confirmed_rate_rps,
                goodput_tok_s=c.goodput_tok_s,
                ttft_p99_ms=c.ttft_p99_ms,
                tpot_p99_ms=c.tpot_p99_ms,
                node_power_kw=c.node_power_kw,
                tokens_per_joule=c.tokens_per_joule,
                mbu_pct=c.mbu_pct,
                accuracy_score_pct=c.accuracy.score if c.accuracy is not None else None,
                accuracy_delta_pts=c.accuracy.delta_pts if c.accuracy is not None else None,
            )
            for c in result.configs
        ],
        mismatches=list(result.mismatches or []),
        fail_on=fail_on,
        exit_code=failing_verdict(result_verdicts(result), fail_on)[0],
    )

"""The publishing policy: minimums every configuration must meet for a result to be published.

The policy is recomputed from the numbers a file carries, never trusted from its ``status``
field: the seed is marked "published" but was measured with 120 s windows, 2 repeats and 50
questions, so it fails here. The table :data:`POLICY` is the one place the limits live; the
methodology page and ``tokenwatt validate --publish`` both read it.

Beyond the durations, the evidence must hold up to a reviewer's audits
(:mod:`tokenwatt.audits`) over the confirmation windows: no token-accounting mismatch (a server
whose usage disagrees with what it streamed cannot be trusted with the goodput), a power
window covered by readings (coverage and longest gap, as InferenceX's strict mode and
ML.ENERGY check them) from the GPUs in use, and the engine's own request count in agreement
with Little's law. A figure that was not measured (no engine gauges, no power source) does not
break these rules: what is missing is flagged on the page instead.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Literal

from tokenwatt import figures
from tokenwatt.audits import LITTLES_LAW_TOLERANCE_PCT
from tokenwatt.schema.result import ConfigAudits, PowerValidity, ResultFile
from tokenwatt.schema.run import RunFile
from tokenwatt.schema.spec import Spec

__all__ = [
    "FLAG_RULES",
    "POLICY",
    "Measured",
    "PolicyRule",
    "Violation",
    "check_measured",
    "check_result",
    "check_run",
    "check_spec",
    "describe",
    "measured_of_result",
]


@dataclass(frozen=True)
class PolicyRule:
    """One limit of the publishing policy: a minimum, or (``bound="max"``) a maximum."""

    name: str
    what: str
    minimum: float
    unit: str
    bound: Literal["min", "max"] = "min"


POLICY: tuple[PolicyRule, ...] = (
    PolicyRule("window_s", "measurement window of each confirmation repeat", 300, "s"),
    PolicyRule("warmup_s", "warm-up before each window", 60, "s"),
    PolicyRule("repeats", "confirmation repeats at the found rate", 3, ""),
    PolicyRule("accuracy_questions", "accuracy questions per seed", 200, ""),
    PolicyRule(
        "token_mismatches",
        "token-accounting violations (usage below the chunks received, outputs over max_tokens,"
        " short ignore_eos outputs) in the confirmation windows",
        0,
        "",
        "max",
    ),
    PolicyRule(
        "power_coverage_pct", "power readings' coverage of each confirmation window", 95, "%"
    ),
    PolicyRule(
        "power_max_gap_s",
        "longest stretch of a confirmation window without a power reading",
        3,
        "s",
        "max",
    ),
    PolicyRule(
        "littles_law_disagreement_pct",
        "disagreement of the engine's running + waiting requests with arrival rate x mean time"
        " in system, in any confirmation window",
        LITTLES_LAW_TOLERANCE_PCT,
        "%",
        "max",
    ),
)
"""The limits (the methodology page's "Publishing policy" table, and the audits)."""

# Rules without a number: each names a condition that makes a configuration unpublishable,
# as (what the violation says, what the policy requires).
FLAG_RULES: dict[str, tuple[str, str]] = {
    "quick": ("measured in quick mode (validation only)", "not measured in quick mode"),
    "simulated": (
        "measured against the embedded simulator, not real hardware",
        "measured on real hardware, not the simulator",
    ),
    "incomplete": ("the run was interrupted or aborted", "every run complete"),
    "no_accuracy": ("accuracy was not measured", "accuracy measured"),
    "power_gpu_count": (
        "the power readings do not cover the GPUs in use",
        "power readings from exactly the GPUs in use",
    ),
    "conservation": (
        "window requests of the arrival schedule are not all accounted for",
        "every scheduled window request accounted for (ok, failed, cancelled or never sent)",
    ),
    "client_ceiling": (
        "probes ran above the load generator's calibrated ceiling",
        "no probe above the load generator's calibrated ceiling (its self-calibration)",
    ),
}


@dataclass(frozen=True)
class Measured:
    """What one configuration was measured with: the inputs of the policy."""

    subject: str
    window_s: float
    warmup_s: float
    repeats: int
    accuracy_questions: int | None
    quick: bool = False
    simulated: bool = False
    complete: bool = True
    token_mismatches: int | None = None
    power_coverage_pct: float | None = None
    power_max_gap_s: float | None = None
    littles_law_disagreement_pct: float | None = None
    power_gpus_seen: tuple[int, ...] = ()
    power_gpus_expected: int | None = None
    conservation_failures: int = 0
    above_client_ceiling: str | None = None
    """Why probes ran above the load generator's calibrated ceiling, or None."""

    @property
    def wrong_gpu_count(self) -> str | None:
        """Why the power readings do not cover the GPUs in use, or None if they do."""
        expected = self.power_gpus_expected
        if expected is None or not self.power_gpus_seen or set(self.power_gpus_seen) == {expected}:
            return None
        seen = ", ".join(str(n) for n in self.power_gpus_seen)
        return f"the power readings cover {seen} GPU(s), {expected} are in use"


@dataclass(frozen=True)
class Violation:
    """One rule broken by one or more configurations."""

    rule: str
    message: str
    subjects: tuple[str, ...]

    def __str__(self) -> str:
        return f"{self.rule}: {self.message} ({', '.join(self.subjects)})"


def _fmt(value: float, unit: str) -> str:
    text = f"{value:.4g}"
    return f"{text} {unit}" if unit else text


def check_measured(items: Iterable[Measured]) -> list[Violation]:
    """Apply :data:`POLICY` and the flag rules to each configuration; one violation per rule."""
    broken: dict[str, tuple[str, list[str]]] = {}

    def add(rule: str, message: str, subject: str) -> None:
        # The first subject's figure is quoted; later subjects that break the rule are listed.
        entry = broken.setdefault(rule, (message, []))
        entry[1].append(subject)

    for item in items:
        for rule in POLICY:
            value = getattr(item, rule.name)
            if value is None:
                if rule.name == "accuracy_questions":
                    add("no_accuracy", FLAG_RULES["no_accuracy"][0], item.subject)
                continue
            broken_rule = value > rule.minimum if rule.bound == "max" else value < rule.minimum
            if broken_rule:
                add(
                    rule.name,
                    f"{rule.what} is {_fmt(value, rule.unit)}, the"
                    f" {'maximum' if rule.bound == 'max' else 'minimum'} is"
                    f" {_fmt(rule.minimum, rule.unit)}",
                    item.subject,
                )
        wrong_gpus = item.wrong_gpu_count
        if wrong_gpus is not None:
            add("power_gpu_count", wrong_gpus, item.subject)
        if item.conservation_failures:
            add(
                "conservation",
                f"{item.conservation_failures} probe(s) lost window requests of the arrival"
                " schedule",
                item.subject,
            )
        if item.above_client_ceiling is not None:
            add("client_ceiling", item.above_client_ceiling, item.subject)
        for flag, present in (
            ("quick", item.quick),
            ("simulated", item.simulated),
            ("incomplete", not item.complete),
        ):
            if present:
                add(flag, FLAG_RULES[flag][0], item.subject)
    return [Violation(rule, msg, tuple(subjects)) for rule, (msg, subjects) in broken.items()]


def measured_of_result(result: ResultFile) -> list[Measured]:
    """The policy inputs of each config of a result, from its recorded measurement settings.

    A config without a ``measurement`` block (the seed's form) is judged by the result's spec
    and its own ``repeats``.
    """
    spec = result.spec
    simulated = figures.result_is_simulated(result)
    out: list[Measured] = []
    for config in result.configs:
        subject = f"{config.key} '{config.label}'"
        m = config.measurement
        if m is not None:
            out.append(
                Measured(
                    subject=subject,
                    window_s=m.window_s,
                    warmup_s=m.warmup_s,
                    repeats=min(m.repeats, config.repeats),
                    accuracy_questions=m.accuracy_questions,
                    quick=m.quick,
                    simulated=m.simulated or simulated,
                    complete=m.complete,
                    above_client_ceiling=above_client_ceiling(
                        config.client_ceiling_rps, [p.rate_rps for p in config.probes or []]
                    ),
                    **_evidence(config.audits, config.power_validity, result.hardware.count),
                )
            )
        else:
            questions = spec.accuracy.limit if spec.accuracy is not None else None
            if config.accuracy is None or config.accuracy.score is None:
                questions = None
            out.append(
                Measured(
                    subject=subject,
                    window_s=spec.measurement.window_s,
                    warmup_s=spec.measurement.warmup_s,
                    repeats=config.repeats,
                    accuracy_questions=questions,
                    simulated=simulated,
                )
            )
    return out


def _evidence(
    audits: ConfigAudits | None, power: PowerValidity | None, gpus_in_use: int | None
) -> dict[str, Any]:
    """The audit inputs of the policy from a config's figures (absent: not measured)."""
    fields: dict[str, Any] = {}
    if audits is not None:
        fields["token_mismatches"] = (
            audits.usage_below_chunks + audits.over_max_tokens + audits.short_ignore_eos
        )
        fields["conservation_failures"] = audits.conservation_failures
        if audits.littles_law_worst_pct is not None:
            fields["littles_law_disagreement_pct"] = abs(audits.littles_law_worst_pct)
    if power is not None:
        fields["power_coverage_pct"] = power.coverage_pct
        fields["power_max_gap_s"] = power.max_gap_s
        fields["power_gpus_seen"] = tuple(power.gpus_seen)
        fields["power_gpus_expected"] = power.gpus_expected or gpus_in_use
    return fields


def check_result(result: ResultFile) -> list[Violation]:
    """Every rule the result breaks; empty means publishable."""
    return check_measured(measured_of_result(result))


def check_run(run: RunFile) -> list[Violation]:
    """Every rule a run breaks, from the durations it actually used."""
    eff = run.effective
    questions = run.accuracy.limit if run.accuracy is not None else None
    accepted = figures.accepted_probes(run)
    power = figures.window_power(run, accepted)
    return check_measured(
        [
            Measured(
                subject=run.label,
                window_s=eff.window_s,
                warmup_s=eff.warmup_s,
                repeats=eff.repeats,
                accuracy_questions=questions,
                quick=run.quick,
                simulated=run.simulated or figures.run_simulated_because(run) is not None,
                complete=run.complete,
                above_client_ceiling=_above_client_ceiling(run),
                **_evidence(
                    figures.audit_summary(run, accepted), figures.power_validity(run, power), None
                ),
            )
        ]
    )


def _above_client_ceiling(run: RunFile) -> str | None:
    """Probes above a ceiling the load generator's calibration found (tokenwatt.load.calibrate)."""
    cal = run.calibration
    if cal is None or not cal.ceiling_found:
        return None
    return above_client_ceiling(cal.ceiling_rps or 0.0, [p.rate_rps for p in run.probes])


def above_client_ceiling(ceiling_rps: float | None, probe_rates_rps: Iterable[float]) -> str | None:
    """Why probes ran above the calibrated ceiling (None: no ceiling found, or none above it)."""
    if ceiling_rps is None:
        return None
    over = sorted({r for r in probe_rates_rps if r > ceiling_rps})
    if not over:
        return None
    return (
        f"{len(over)} probe rate(s) from {over[0]:g} req/s ran above the load generator's"
        f" calibrated ceiling of {ceiling_rps:g} req/s: its latencies there are the client's"
    )


def check_spec(spec: Spec) -> list[Violation]:
    """Every rule a run of this spec (not in quick mode) would break."""
    m = spec.measurement
    return check_measured(
        [
            Measured(
                subject=spec.name,
                window_s=m.window_s,
                warmup_s=m.warmup_s,
                repeats=m.repeats,
                accuracy_questions=spec.accuracy.limit if spec.accuracy is not None else None,
                simulated=spec.engine.endpoint == "sim",
            )
        ]
    )


def describe() -> list[dict[str, str]]:
    """The policy as rows for the methodology page: rule, requirement."""
    rows = [
        {
            "rule": r.name,
            "requirement": f"{r.what} {'≤' if r.bound == 'max' else '≥'} {_fmt(r.minimum, r.unit)}",
        }
        for r in POLICY
    ]
    rows += [{"rule": name, "requirement": need} for name, (_, need) in FLAG_RULES.items()]
    return rows

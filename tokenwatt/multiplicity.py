"""Several candidates against one baseline: the multiple-comparison correction and the ranking.

A report may hold several candidates (role ``tuned``, each with its own label), each compared with
the one baseline (:mod:`tokenwatt.compare`). Compared one at a time at 5 %, m candidates that
are all no different from the baseline would give at least one false "better" or "worse" with
probability up to 1 - 0.95^m (23 % for five). The report therefore holds the *family-wise error
rate* (the chance of any false call among the m) at :data:`FAMILY_ALPHA`, by one of two
corrections, named on the page:

- **Holm** (step-down, the default; Holm 1979, "A simple sequentially rejective multiple test
  procedure"): sort the candidates' p-values p_(1) <= ... <= p_(m); the i-th is tested at level
  alpha / (m - i + 1), in that order, and the procedure stops at the first that is not rejected
  (every later one is retained). Adjusted p-values: p~_(i) = max over j <= i of
  min(1, (m - j + 1) p_(j)); a candidate is rejected where p~ <= alpha. It controls the
  family-wise rate as Bonferroni does and rejects at least as much.
- **Bonferroni**: every candidate at level alpha / m; p~ = min(1, m p).

**Each candidate's p-value** is that of the verdict's own test: its capacity change against the
baseline from the joint fit of every configuration's probes
(:func:`tokenwatt.capacity.relative_capacity`), the log ratio's distance from 0 less the
baseline's drift against its repeat, over its standard error, two-sided Student's t with the
fit's degrees of freedom: t = max(|ln ratio| - drift, 0) / se. A candidate is called better or
worse only if the correction rejects it *and* its interval at the level its step tests
(1 - alpha / (m - i + 1) for Holm, 1 - alpha / m for Bonferroni; Fieller's, widened by the drift)
excludes 0; the page gives each candidate's interval at that level. With one candidate both
corrections are the plain 95 % comparison.

**Ranking.** The configurations are ranked by SLO capacity change against the baseline (the joint
fit's ratio; the baseline at 0), highest first; the table gives each one's interval and verdict,
so a rank is never read as a difference the verdict did not find.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, get_args

__all__ = [
    "CORRECTIONS",
    "FAMILY_ALPHA",
    "Correction",
    "RankRow",
    "adjusted_p_values",
    "bonferroni_adjusted",
    "change_p_value",
    "holm_adjusted",
    "rank_by_change",
    "step_levels",
]

Correction = Literal["holm", "bonferroni"]
CORRECTIONS: tuple[Correction, ...] = get_args(Correction)
FAMILY_ALPHA = 0.05
"""Family-wise error rate the report holds: the chance of any false better/worse call."""


def _ascending(p_values: Sequence[float]) -> list[int]:
    """Indices of the p-values in ascending order (ties keep the given order)."""
    return sorted(range(len(p_values)), key=lambda i: (p_values[i], i))


def holm_adjusted(p_values: Sequence[float]) -> list[float]:
    """Holm's adjusted p-values, in the order given (see the module docstring)."""
    m = len(p_values)
    adjusted = [1.0] * m
    running = 0.0
    for step, i in enumerate(_ascending(p_values)):
        running = max(running, min(1.0, (m - step) * p_values[i]))
        adjusted[i] = running
    return adjusted


def bonferroni_adjusted(p_values: Sequence[float]) -> list[float]:
    """Bonferroni's adjusted p-values: min(1, m p)."""
    m = len(p_values)
    return [min(1.0, m * p) for p in p_values]


def adjusted_p_values(p_values: Sequence[float], method: Correction) -> list[float]:
    """The adjusted p-values of ``method``."""
    return holm_adjusted(p_values) if method == "holm" else bonferroni_adjusted(p_values)


def step_levels(
    p_values: Sequence[float], method: Correction, *, alpha: float = FAMILY_ALPHA
) -> list[float]:
    """The level each candidate is tested at: alpha / (m - i + 1) (Holm), alpha / m (Bonferroni)."""
    m = len(p_values)
    if method == "bonferroni":
        return [alpha / m] * m
    levels = [alpha] * m
    for step, i in enumerate(_ascending(p_values)):
        levels[i] = alpha / (m - step)
    return levels


def change_p_value(log_ratio: float, se: float | None, *, drift_log: float, dof: int) -> float:
    """Two-sided p-value of "no change beyond the drift": t = max(|ln ratio| - drift, 0) / se.

    1 when the standard error is unknown (the fit cannot bound the change).
    """
    from scipy import stats as scipy_stats  # slow to import: on first use

    if se is None or not se > 0 or dof < 1:
        return 1.0
    t = max(abs(log_ratio) - drift_log, 0.0) / se
    return float(min(1.0, 2.0 * scipy_stats.t.sf(t, dof)))


@dataclass(frozen=True)
class RankRow:
    """One row of the ranking table."""

    rank: int
    label: str
    key: str
    capacity_rps: float | None
    change_pct: float | None
    """Against the baseline (0 for the baseline itself); None: no comparison."""
    ci_pct: tuple[float, float] | None
    confidence_pct: float | None
    outcome: str | None
    """The verdict's outcome; None for the baseline."""


def rank_by_change(rows: Sequence[RankRow]) -> list[RankRow]:
    """The rows ranked by change, highest first (those without one last), numbered from 1."""
    ordered = sorted(
        rows,
        key=lambda r: (r.change_pct is None, -(r.change_pct if r.change_pct is not None else 0.0)),
    )
    return [
        RankRow(
            rank=n,
            label=r.label,
            key=r.key,
            capacity_rps=r.capacity_rps,
            change_pct=r.change_pct,
            ci_pct=r.ci_pct,
            confidence_pct=r.confidence_pct,
            outcome=r.outcome,
        )
        for n, r in enumerate(ordered, start=1)
    ]

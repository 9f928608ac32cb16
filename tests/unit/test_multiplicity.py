"""The multiple-comparison corrections and the ranking, against values worked by hand."""

from __future__ import annotations

import pytest

from tokenwatt.multiplicity import (
    RankRow,
    adjusted_p_values,
    bonferroni_adjusted,
    change_p_value,
    holm_adjusted,
    rank_by_change,
    step_levels,
)

P = [0.01, 0.04, 0.03, 0.005]


def test_holm_by_hand():
    # ascending: 0.005 (x4 = 0.02), 0.01 (x3 = 0.03), 0.03 (x2 = 0.06), 0.04 (x1 = 0.04 -> the
    # running maximum keeps 0.06)
    assert holm_adjusted(P) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert adjusted_p_values(P, "holm") == holm_adjusted(P)
    # Rejected at 0.05: the first two of the step-down; it stops at 0.03 > 0.05 / 2.
    assert [p <= 0.05 for p in holm_adjusted(P)] == [True, False, False, True]


def test_bonferroni_by_hand():
    assert bonferroni_adjusted(P) == pytest.approx([0.04, 0.16, 0.12, 0.02])
    assert bonferroni_adjusted([0.5, 0.9]) == [1.0, 1.0]  # capped at 1


def test_step_levels_by_hand():
    assert step_levels(P, "holm") == pytest.approx([0.05 / 3, 0.05 / 1, 0.05 / 2, 0.05 / 4])
    assert step_levels(P, "bonferroni") == pytest.approx([0.0125] * 4)
    # Ties keep the given order; one candidate is the plain comparison.
    assert step_levels([0.2, 0.2], "holm") == pytest.approx([0.025, 0.05])
    assert step_levels([0.3], "holm") == [0.05]
    assert holm_adjusted([0.3]) == [0.3]


def test_change_p_value_by_hand():
    # t = 0.1 / 0.05 = 2 with 10 df: two-sided p = 0.0734 (t tables: t(0.9633, 10) = 2)
    assert change_p_value(0.1, 0.05, drift_log=0.0, dof=10) == pytest.approx(0.07339, abs=1e-4)
    # The drift is taken off first: |ln ratio| - drift = 0.05 -> t = 1, p = 0.3409
    assert change_p_value(-0.1, 0.05, drift_log=0.05, dof=10) == pytest.approx(0.3409, abs=1e-4)
    assert change_p_value(0.02, 0.05, drift_log=0.05, dof=10) == 1.0
    assert change_p_value(0.5, None, drift_log=0.0, dof=10) == 1.0


def _row(label: str, change: float | None) -> RankRow:
    return RankRow(0, label, "tuned", None, change, None, None, None)


def test_ranking_highest_change_first_unknown_last():
    ranked = rank_by_change([_row("a", 2.0), _row("b", None), _row("c", 0.0), _row("d", 9.5)])
    assert [(r.rank, r.label) for r in ranked] == [(1, "d"), (2, "a"), (3, "c"), (4, "b")]

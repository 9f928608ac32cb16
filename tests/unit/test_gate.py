"""The CI gate: which verdicts fail under which ``--fail-on`` level, and with which status."""

from __future__ import annotations

import pytest

from tokenwatt import gate
from tokenwatt.schema.result import Verdict


@pytest.mark.parametrize(
    ("outcome", "worse", "inconclusive"),
    [
        ("better", 0, 0),
        ("no_difference", 0, 0),
        ("worse", 3, 3),
        ("gate_failed", 5, 5),
        ("inconclusive", 0, 4),
        ("not_compared", 0, 0),
    ],
)
def test_exit_code_per_outcome_and_level(outcome, worse, inconclusive):
    verdict = Verdict(outcome=outcome, text="x")
    assert gate.exit_code(verdict, "worse") == worse
    assert gate.exit_code(verdict, "inconclusive") == inconclusive
    assert gate.exit_code(verdict, None) == 0


def test_failing_statuses_are_distinct_and_clear_of_the_error_statuses():
    codes = {gate.EXIT_WORSE, gate.EXIT_INCONCLUSIVE, gate.EXIT_GATE_FAILED}
    assert len(codes) == 3
    assert codes.isdisjoint({0, 1, 2, 130})


def test_no_verdict_never_fails():
    assert gate.exit_code(None, "inconclusive") == 0

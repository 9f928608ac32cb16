"""The ground truth's cache (tokenwatt.plan.true_capacity): used when readable, recomputed and
rewritten when not, never trusted past the bounded reader."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from tokenwatt.plan import TruthResult, engine_config, true_capacity
from tokenwatt.store import load_spec

REPO = Path(__file__).resolve().parents[2]
SPEC = REPO / "tests" / "data" / "tiny-sim.spec.yaml"


def _truth(loaded, config, progress=None) -> TruthResult:
    return true_capacity(
        loaded,
        config,
        bracket_rps=(2.0, 8.0),
        window_s=10.0,
        warmup_s=2.0,
        seeds=1,
        tolerance=0.05,
        progress=progress,
    )


def test_an_unreadable_cache_file_is_recomputed_and_replaced(tmp_path, monkeypatch, caplog):
    monkeypatch.setenv("TOKENWATT_CACHE", str(tmp_path))
    loaded = load_spec(SPEC)
    config = engine_config(loaded)
    first = _truth(loaded, config)
    [cached] = (tmp_path / "truth").glob("*.json")
    # each rate's verdict is its shares over the bounds: a p99 within a bound is at most 1 %
    assert any(step.passed for step in first.steps)
    assert not all(step.passed for step in first.steps)
    for step in first.steps:
        assert step.passed == (step.ttft_over_pct <= 1.0 and step.tpot_over_pct <= 1.0), step
    assert TruthResult.model_validate_json(cached.read_text()) == first
    # A readable cache is what comes back, without bisecting again.
    again = _truth(loaded, config, progress=_fail)
    assert again == first
    # Not JSON (or not a regular file, or too large): a warning, the truth again, a new file.
    cached.write_text("{not json", encoding="utf-8")
    with caplog.at_level(logging.WARNING, logger="tokenwatt.plan"):
        redone = _truth(loaded, config)
    assert "ignoring an unreadable truth cache file" in caplog.text
    assert redone.true_capacity_rps == first.true_capacity_rps
    assert TruthResult.model_validate_json(cached.read_text()) == redone


def _fail(step: object) -> None:
    raise AssertionError(f"bisected again: {step}")


def test_a_bracket_above_the_truth_is_lowered_without_judging_a_rate_twice(tmp_path, monkeypatch):
    monkeypatch.setenv("TOKENWATT_CACHE", str(tmp_path))
    loaded = load_spec(SPEC)
    config = engine_config(loaded)
    truth = _truth(loaded, config).true_capacity_rps
    high = true_capacity(
        loaded,
        config,
        bracket_rps=(truth * 2.0, truth * 4.0),
        window_s=10.0,
        warmup_s=2.0,
        seeds=1,
        tolerance=0.05,
        cache=False,
    )
    rates = [step.rate_rps for step in high.steps]
    assert not high.steps[0].passed  # the bracket's low end failed, so it was lowered
    assert len(rates) == len(set(rates)), rates
    assert high.true_capacity_rps == pytest.approx(truth, rel=0.1)

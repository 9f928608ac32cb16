"""Early stop (``sweep.early_stop``): the rule, the tally, the record and the schema (pure)."""

from __future__ import annotations

import datetime as dt
import math

import numpy as np
import pytest
from pydantic import ValidationError

from tests import factories
from tests.unit.test_probe_record import MS, T0, WS, req
from tokenwatt.load._shard import ExceedTally, ShardResult
from tokenwatt.load.record import StopNote, build_probe_record
from tokenwatt.metrics import exceeding_to_fail, nearest_rank
from tokenwatt.schema.run import EarlyStop, ProbeRecord
from tokenwatt.schema.spec import SloSpec, SweepSpec

SLO = SloSpec(ttft_p99_ms=100, tpot_p99_ms=20)


# -- the rule: how many values over a bound prove the p99 over it --------------------------


@pytest.mark.parametrize(
    ("n", "needed"),
    [
        # n <= 100: ceil(0.99 n) = n, so the largest value is the p99: one over is enough
        (1, 1),
        (2, 1),
        (54, 1),
        (99, 1),
        # n = 100: p99 is the 99th smallest, 100 - 99 + 1 = 2
        (100, 2),
        (101, 2),
        (199, 2),
        (200, 3),  # ceil(198) = 198
        (201, 3),  # ceil(198.99) = 199
        (600, 7),  # the seed's search probe at 10 req/s x 60 s: ceil(594) = 594
        (1000, 11),
    ],
)
def test_exceeding_to_fail_by_hand(n, needed):
    assert exceeding_to_fail(n) == needed


@pytest.mark.parametrize("n", [1, 7, 99, 100, 101, 150, 200, 257, 600, 999, 1000, 1001])
def test_exceeding_to_fail_agrees_with_nearest_rank(n):
    k = exceeding_to_fail(n)
    over = np.array([1.0] * (n - k) + [math.inf] * k)
    under = np.array([1.0] * (n - k + 1) + [math.inf] * (k - 1))
    assert nearest_rank(over, 99.0) == math.inf  # k values over the bound: p99 over it
    assert nearest_rank(under, 99.0) == 1.0  # one fewer: p99 may still be within it


def test_exceeding_to_fail_never_needs_more_for_fewer_values():
    # TPOT leaves out one-token answers: fewer values than N must not need more exceeders
    needs = [exceeding_to_fail(n) for n in range(1, 3000)]
    assert all(a <= b for a, b in zip(needs, needs[1:], strict=False))


def test_exceeding_to_fail_rejects_nonsense():
    with pytest.raises(ValueError, match="at least one value"):
        exceeding_to_fail(0)
    with pytest.raises(ValueError, match="outside"):
        exceeding_to_fail(10, 0.0)


# -- the tally: sums over shards, fires once -----------------------------------------------


def test_tally_sums_shards_and_fires_once():
    tally = ExceedTally(2, needed=3)
    assert tally.update(0, 1, 0) is False
    assert tally.update(1, 1, 1) is False
    assert (tally.ttft_exceeding, tally.tpot_exceeding) == (2, 1)
    assert tally.stopped_ns is None
    assert tally.update(0, 2, 0) is True  # 2 + 1 = 3 over the TTFT bound
    assert tally.stopped_ns is not None
    assert tally.update(1, 5, 5) is False  # already stopped: never twice
    assert tally.tpot_exceeding == 5  # late counts are still summed


def test_tally_counts_only_grow():
    tally = ExceedTally(1, needed=2)
    tally.update(0, 1, 1)
    tally.update(0, 0, 0)  # an out-of-date message cannot lower a count
    assert (tally.ttft_exceeding, tally.tpot_exceeding) == (1, 1)


def test_tally_fires_on_tpot_alone():
    tally = ExceedTally(1, needed=2)
    assert tally.update(0, 0, 2) is True


# -- the record ---------------------------------------------------------------------------


def _stopped_record(window, *, planned, cut, stopped_ms, ttft=1, tpot=0, needed=1):
    shard = ShardResult(window=window, window_cut=cut)
    return build_probe_record(
        index=1,
        phase="search",
        rate_rps=10.0,
        attempt=0,
        repeat=None,
        warmup_s=1.0,
        window_s=10.0,
        started_utc=dt.datetime(2026, 1, 1, tzinfo=dt.UTC),
        t0_ns=T0,
        shards=[shard],
        slo=SLO,
        max_concurrency=64,
        stop=StopNote(
            stopped_ns=WS + int(stopped_ms * MS),
            planned_window_requests=planned,
            exceeding_needed=needed,
            ttft_exceeding=ttft,
            tpot_exceeding=tpot,
        ),
    )


def test_record_of_a_stopped_probe():
    # 2 s into a 10 s window at 10 req/s: 20 sent (one 150 ms TTFT, one cut while waiting over
    # the bound), 80 never sent
    window = [req(i, sched_ms=100 * i) for i in range(18)]
    window.append(req(18, sched_ms=1800, ttft_ms=150.0))
    window.append(req(19, sched_ms=1900, status="cancelled"))
    rec = _stopped_record(window, planned=100, cut=1, stopped_ms=2000, ttft=2, needed=2)
    stop = rec.early_stop
    assert stop is not None
    assert (stop.planned_window_requests, stop.exceeding_needed) == (100, 2)
    assert (stop.cut_window_requests, stop.unsent_window_requests) == (1, 80)
    assert rec.window_requests == 20
    assert rec.failures_by_cause == {"cancelled": 1}  # the cut request: +inf, like a failure
    assert rec.ttft_ms.p99 == math.inf
    assert rec.slo_pass is False
    # offered over the 2 s before the stop (20 requests), not the whole 10 s window
    assert rec.offered_rate_rps == pytest.approx(10.0)
    assert rec.achieved_rate_rps == pytest.approx(10.0)
    assert not rec.client_bound
    # goodput keeps its definition: tokens of successful window requests / window_s
    assert rec.goodput_tok_s == pytest.approx(19 * 11 / 10.0)


def test_a_stop_that_cut_nothing_is_a_complete_probe():
    """Every window request had finished when the tally fired: no label, the data decides."""
    window = [req(i, sched_ms=100 * i) for i in range(100)]
    rec = _stopped_record(window, planned=100, cut=0, stopped_ms=10_500, ttft=2, needed=2)
    assert rec.early_stop is None
    assert rec.slo_pass is True  # every TTFT is 50 ms here: the data say pass


def test_a_stopped_probe_never_passes_even_if_its_figures_would():
    window = [req(i, sched_ms=100 * i) for i in range(20)]  # all within the SLO
    rec = _stopped_record(window, planned=100, cut=0, stopped_ms=2000, ttft=1, needed=1)
    assert rec.early_stop is not None
    assert rec.early_stop.unsent_window_requests == 80
    assert rec.slo_pass is False


# -- the schema ---------------------------------------------------------------------------


def _early(**kw):
    fields = {
        "stopped_ns": 5,
        "planned_window_requests": 100,
        "exceeding_needed": 2,
        "ttft_exceeding": 2,
        "tpot_exceeding": 0,
        "cut_window_requests": 3,
        "unsent_window_requests": 40,
    }
    fields.update(kw)
    return fields


def test_schema_refuses_an_unproven_stop():
    with pytest.raises(ValidationError, match="not proven to fail"):
        EarlyStop.model_validate(_early(ttft_exceeding=1, tpot_exceeding=1))
    assert EarlyStop.model_validate(_early(ttft_exceeding=0, tpot_exceeding=2)).tpot_exceeding == 2


def test_schema_refuses_a_passing_stopped_probe():
    probe = factories.probe(0, passed=True)
    data = probe.model_dump()
    data["early_stop"] = _early()
    with pytest.raises(ValidationError, match="certain fail .* has slo_pass True"):
        ProbeRecord.model_validate(data)
    data["slo_pass"] = False
    assert ProbeRecord.model_validate(data).early_stop is not None


def test_a_certain_pass_that_was_client_bound_does_not_pass():
    # Certified mid-probe; the send lags that make it client-bound are known only at its end.
    certain = _early(
        outcome="pass", ttft_exceeding=0, cut_window_requests=1, unsent_window_requests=0
    )
    data = factories.probe(0, passed=True).model_dump()
    data["early_stop"] = certain
    assert ProbeRecord.model_validate(data).slo_pass is True
    data["client_bound"] = True
    data["client_bound_reasons"] = ["send lag"]
    with pytest.raises(ValidationError, match="certain pass .* client-bound, has slo_pass True"):
        ProbeRecord.model_validate(data)
    data["slo_pass"] = False
    assert ProbeRecord.model_validate(data).client_bound is True


def test_early_stop_is_off_unless_asked():
    assert SweepSpec().early_stop is False
    assert "early_stop" not in factories.spec().model_dump(exclude_unset=True).get("sweep", {})
    spec = factories.spec(sweep={"early_stop": True})
    assert spec.sweep.early_stop is True


# -- tokens that arrived inside the window (the MBU estimate's token rate) ------------------


def test_tokens_inside_counts_chunks_in_the_half_open_window():
    from array import array

    from tokenwatt.client.openai import RequestResult
    from tokenwatt.load._shard import tokens_inside

    r = RequestResult(index=0, t_send_ns=0, t_end_ns=100, status="ok")
    r.chunk_ns = array("q", [5, 10, 20, 30, 40])
    r.output_tokens = 10  # usage: 2 tokens per chunk
    # [10, 40): chunks at 10, 20, 30 -> 3 chunks x 2 tokens; 40 is outside (half-open)
    assert tokens_inside(r, 10, 40) == 6.0
    assert tokens_inside(r, 0, 1_000) == 10.0
    assert tokens_inside(r, 41, 1_000) == 0.0
    # No usage from the server: one token a chunk.
    r.output_tokens = 0
    assert tokens_inside(r, 10, 40) == 3.0
    assert tokens_inside(RequestResult(index=1, t_send_ns=0, t_end_ns=1, status="ok"), 0, 9) == 0


def test_the_rule_of_an_slo_on_ttfat_counts_the_first_answer_token():
    from tokenwatt.client.openai import RequestResult
    from tokenwatt.load._shard import EarlyStopRule

    on_ttft = EarlyStopRule.for_slo(SloSpec(ttft_p99_ms=100.0), count_waiting=True)
    on_ttfat = EarlyStopRule.for_slo(SloSpec(ttfat_p99_ms=300.0), count_waiting=True)
    assert (on_ttft.ttft_ms, on_ttft.first_answer) == (100.0, False)
    assert (on_ttfat.ttft_ms, on_ttfat.first_answer) == (300.0, True)
    # first token 20 ms after the send, first answer token 250 ms after it
    r = RequestResult(index=0, t_send_ns=0, t_end_ns=400 * MS, status="ok")
    r.t_first_ns, r.t_first_answer_ns = 20 * MS, 250 * MS
    assert on_ttft.first_token_ms(r) == 20.0
    assert on_ttfat.first_token_ms(r) == 250.0
    # reasoning only, no answer: +inf against the TTFAT bound, as the statistics count it
    r.t_first_answer_ns = None
    assert on_ttft.first_token_ms(r) == 20.0
    assert on_ttfat.first_token_ms(r) == math.inf
    # no token at all: no value either way
    r.t_first_ns = None
    assert on_ttfat.first_token_ms(r) is None

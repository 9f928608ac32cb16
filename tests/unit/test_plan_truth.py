"""The truth's verdict on a rate (tokenwatt.plan.pooled_p99_within): the p99 of all the seeds'
window requests together, hand-worked."""

from __future__ import annotations

import statistics

from tokenwatt.metrics import exceeding_to_fail
from tokenwatt.plan import pooled_p99_within


def test_a_rare_large_episode_fails_the_pooled_p99_where_the_median_window_passes():
    # Three windows with no request over the bound, two with a queue episode each: each
    # window's own p99 passes in three of five (the median passes), but 110 of 5,000 requests
    # over the bound is 2.2 %, so the long run's p99 is over it.
    counts = [(1000, 0), (1000, 0), (1000, 0), (1000, 50), (1000, 60)]
    window_passes = [k < exceeding_to_fail(n) for n, k in counts]
    assert window_passes == [True, True, True, False, False]
    assert statistics.median(window_passes)
    assert not pooled_p99_within(counts)


def test_the_pooled_p99_meets_the_bound_up_to_one_percent_over_it():
    # 5,000 requests: the nearest-rank p99 is the 4,950th value, so 50 over the bound pass
    # and 51 fail, however they are spread over the windows.
    assert pooled_p99_within([(1000, 10)] * 5)
    assert pooled_p99_within([(4000, 50), (1000, 0)])
    assert not pooled_p99_within([(1000, 10)] * 4 + [(1000, 11)])
    assert not pooled_p99_within([(2500, 0), (2500, 51)])


def test_no_request_counted_is_no_pass():
    assert not pooled_p99_within([])
    assert not pooled_p99_within([(0, 0), (0, 0)])

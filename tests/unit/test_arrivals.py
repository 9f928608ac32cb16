import itertools
import statistics

import pytest

from tokenwatt.load import arrivals
from tokenwatt.schema.spec import ArrivalSpec


def take(iterator, n):
    return list(itertools.islice(iterator, n))


def gaps(times):
    return [b - a for a, b in itertools.pairwise([0.0, *times])]


def test_poisson_is_seeded_and_has_the_rate():
    a = take(arrivals.poisson_offsets(50.0, seed=1, stream=0), 20000)
    b = take(arrivals.poisson_offsets(50.0, seed=1, stream=0), 20000)
    c = take(arrivals.poisson_offsets(50.0, seed=1, stream=1), 20000)
    assert a == b
    assert a != c
    g = gaps(a)
    assert statistics.mean(g) == pytest.approx(1 / 50, rel=0.03)
    # exponential: coefficient of variation 1
    assert statistics.stdev(g) / statistics.mean(g) == pytest.approx(1.0, rel=0.05)
    assert all(x > 0 for x in g)


def test_batches_do_not_change_the_sequence():
    # more than one batch of draws: the 4097th offset continues the same sequence
    a = take(arrivals.poisson_offsets(10.0, seed=3), 9000)
    assert a == sorted(a)
    assert len(set(a)) == len(a)


@pytest.mark.parametrize("shape", [0.25, 1.0, 4.0])
def test_gamma_mean_and_burstiness(shape):
    g = gaps(take(arrivals.gamma_offsets(20.0, burstiness=shape, seed=7), 40000))
    mean = statistics.mean(g)
    assert mean == pytest.approx(1 / 20, rel=0.04)
    # coefficient of variation of a gamma is 1/sqrt(shape)
    assert statistics.stdev(g) / mean == pytest.approx(shape**-0.5, rel=0.06)


def test_constant_has_no_drift():
    offsets = take(arrivals.constant_offsets(3.0), 3001)
    assert offsets[0] == 0.0
    assert offsets[3000] == 1000.0  # i / r, not a sum of rounded gaps


def test_trace_replay_as_recorded_and_repeating():
    times = [100.0, 100.5, 101.0, 103.0]  # span 3 s, 3 gaps: rate 1 req/s
    assert arrivals.trace_rate_rps(times) == 1.0
    got = take(arrivals.trace_offsets(times), 9)
    # second pass starts one mean gap (1 s) after the last row
    assert got == [0.0, 0.5, 1.0, 3.0, 4.0, 4.5, 5.0, 7.0, 8.0]


def test_trace_rescaled_to_a_rate():
    times = [0.0, 0.5, 1.0, 3.0]
    got = take(arrivals.trace_offsets(times, rate_rps=4.0), 5)
    assert got == pytest.approx([0.0, 0.125, 0.25, 0.75, 1.0])


def test_trace_errors():
    with pytest.raises(ValueError, match="at least two"):
        arrivals.trace_rate_rps([1.0])
    with pytest.raises(ValueError, match="same"):
        arrivals.trace_rate_rps([1.0, 1.0])
    with pytest.raises(ValueError, match="backwards"):
        next(arrivals.trace_offsets([0.0, 2.0, 1.0, 3.0]))


def test_dispatch_on_spec():
    spec = ArrivalSpec(process="gamma", burstiness=2.0)
    assert take(arrivals.arrival_offsets(spec, rate_rps=5, seed=1), 3) == take(
        arrivals.gamma_offsets(5, burstiness=2.0, seed=1), 3
    )
    assert take(
        arrivals.arrival_offsets(ArrivalSpec(process="constant"), rate_rps=2, seed=9), 3
    ) == [
        0.0,
        0.5,
        1.0,
    ]
    trace = ArrivalSpec(process="trace", rescale=False)
    assert take(arrivals.arrival_offsets(trace, rate_rps=99, seed=0, trace_times_s=[5, 6]), 2) == [
        0.0,
        1.0,
    ]
    with pytest.raises(ValueError, match="needs a trace"):
        arrivals.arrival_offsets(trace, rate_rps=1, seed=0)
    with pytest.raises(ValueError, match="positive"):
        arrivals.poisson_offsets(0.0, seed=0)

"""The pure parts of the Ray load pool: clock offsets, placement, time shifts (hand-worked)."""

from array import array

import pytest
from pydantic import ValidationError

from tests import factories
from tokenwatt.client.openai import RequestResult
from tokenwatt.errors import ClusterError
from tokenwatt.load._shard import ShardResult
from tokenwatt.load.ray_pool import (
    NodeInfo,
    clock_offset,
    lagging_actors,
    plan_slots,
    shift_result,
)
from tokenwatt.schema.run import LoadActor
from tokenwatt.schema.spec import LoadClusterSpec


def test_clock_offset_takes_the_shortest_round_trip():
    # (send, remote reading, receive): trips of 10, 4 and 6 ns; the 4 ns one bounds it best.
    samples = [(100, 1_055, 110), (200, 1_153, 204), (300, 1_250, 306)]
    offset, uncertainty = clock_offset(samples)
    assert offset == 1_153 - 202  # remote minus the trip's midpoint
    assert uncertainty == 2  # half the shortest trip


def test_clock_offset_rounds_an_odd_trip_up_and_refuses_nonsense():
    assert clock_offset([(0, 500, 5)]) == (500 - 2, 3)
    with pytest.raises(ValueError, match="no round trips"):
        clock_offset([])
    with pytest.raises(ValueError, match="ended before"):
        clock_offset([(10, 0, 5)])


NODES = [
    NodeInfo("head", "10.0.0.1", 2.0),
    NodeInfo("n2", "10.0.0.2", 4.0),
    NodeInfo("server", "10.0.0.9", 8.0),
]


def test_plan_slots_deals_round_robin_and_leaves_the_server_out():
    slots, nodes = plan_slots(
        NODES,
        actors=5,
        actors_per_node=None,
        server_ips=frozenset({"10.0.0.9"}),
        server_nodes=False,
    )
    assert [s.node_id for s in slots] == ["head", "n2", "head", "n2", "n2"]
    assert [s.shard for s in slots] == [0, 1, 2, 3, 4]
    by_id = {n.node_id: n for n in nodes}
    assert by_id["head"].used
    assert by_id["n2"].used
    assert not by_id["server"].used
    assert "server under test" in (by_id["server"].why_not or "")


def test_plan_slots_caps_at_the_budget_and_the_per_node_limit():
    slots, _ = plan_slots(
        NODES, actors=100, actors_per_node=None, server_ips=frozenset(), server_nodes=False
    )
    assert len(slots) == 2 + 4 + 8  # each node's CPUs
    slots, _ = plan_slots(
        NODES, actors=100, actors_per_node=1, server_ips=frozenset({"10.0.0.9"}), server_nodes=True
    )
    assert [s.node_id for s in slots] == ["head", "n2", "server"]


def test_plan_slots_with_every_node_serving_says_what_to_do():
    with pytest.raises(ClusterError, match="server_nodes: true"):
        plan_slots(
            NODES[:1],
            actors=1,
            actors_per_node=None,
            server_ips=frozenset({"10.0.0.1"}),
            server_nodes=False,
        )
    with pytest.raises(ClusterError, match="no alive node"):
        plan_slots([], actors=1, actors_per_node=None, server_ips=frozenset(), server_nodes=False)


def test_shift_result_moves_every_clock_time_and_no_latency():
    r = RequestResult(
        index=3,
        t_send_ns=1_000,
        t_end_ns=9_000,
        status="ok",
        t_first_ns=2_000,
        t_last_ns=8_000,
        t_sched_ns=990,
        chunk_ns=array("q", [2_000, 5_000, 8_000]),
    )
    result = ShardResult(window=[r], decode_intervals=[(2_000, 8_000)], sent=1)
    moved = shift_result(result, -500)
    m = moved.window[0]
    assert (m.t_send_ns, m.t_end_ns, m.t_first_ns, m.t_last_ns, m.t_sched_ns) == (
        500,
        8_500,
        1_500,
        7_500,
        490,
    )
    assert list(m.chunk_ns) == [1_500, 4_500, 7_500]
    assert m.t_first_answer_ns is None
    assert moved.decode_intervals == [(1_500, 7_500)]
    assert moved.sent == 1
    assert m.t_end_ns - m.t_send_ns == r.t_end_ns - r.t_send_ns
    assert list(r.chunk_ns) == [2_000, 5_000, 8_000]  # the original is untouched
    assert shift_result(result, 0) is result


def test_load_cluster_spec_defaults_and_bounds():
    spec = factories.spec(load={"cluster": {}})
    assert spec.load is not None
    assert spec.load.cluster == LoadClusterSpec()
    assert spec.load.cluster.address == "auto"
    assert spec.load.cluster.max_clock_uncertainty_ms == 1.0
    assert not spec.load.cluster.server_nodes
    with pytest.raises(ValidationError, match="actors_per_node"):
        factories.spec(load={"cluster": {"actors_per_node": 0}})
    with pytest.raises(ValidationError, match="adress"):
        factories.spec(load={"cluster": {"adress": "x"}})  # a typo is refused, not ignored


def test_an_actor_lagging_alone_makes_the_probe_client_bound():
    def actor(shard: int, lag: float | None) -> LoadActor:
        return LoadActor(
            shard=shard,
            node_id=f"node{shard}" * 4,
            node_ip=f"10.0.0.{shard}",
            hostname="h",
            pid=1,
            same_clock=False,
            clock_offset_ns=0,
            clock_uncertainty_ns=0,
            round_trips=16,
            send_lag_p99_ms=lag,
        )

    reasons = lagging_actors([actor(0, 0.3), actor(1, 25.0), actor(2, None), actor(3, 10.0)])
    assert reasons == ["load actor 1 on node 10.0.0.1 (node1node1no): p99 send lag 25.0 ms > 10 ms"]


def test_without_ray_the_message_says_how_to_install_it(monkeypatch):
    import sys

    from tokenwatt.load import ray_pool

    monkeypatch.setitem(sys.modules, "ray", None)  # import ray now raises ImportError
    with pytest.raises(ClusterError, match=r"pip install 'tokenwatt\[ray\]'"):
        ray_pool.connect(LoadClusterSpec(address="127.0.0.1:6379"))

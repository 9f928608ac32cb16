"""Each node's meter read by a Ray actor on that node (power.nodes[].ray_node), on a real
two-node Ray cluster (tests/ray_cluster.py): the sum, each reading taken on its own node, and a
node lost mid-sampling as a gap on that node while the other goes on."""

from __future__ import annotations

import time

import pytest

from tests import factories
from tests.ray_cluster import fresh_cluster
from tokenwatt.errors import PowerError
from tokenwatt.load import ray_pool
from tokenwatt.power import NodesSampler, sampler_for_spec
from tokenwatt.power.remote import RemoteSource
from tokenwatt.schema.spec import LoadClusterSpec

ray = pytest.importorskip("ray", reason="Ray is part of the test install (.[dev,ray])")

pytestmark = [pytest.mark.peer, pytest.mark.slow]
__all__ = ["fresh_cluster"]  # fixture


def _spec(head_id: str, other_id: str):
    return factories.spec(
        power={
            "sampling_hz": 5,
            "nodes": [
                {"name": "a", "source": "command", "command": "echo 300", "ray_node": head_id},
                {"name": "b", "source": "command", "command": "echo 450", "ray_node": other_id},
            ],
        }
    )


def test_each_node_is_read_on_its_own_node_and_a_lost_node_is_a_gap(fresh_cluster):
    cluster, node = fresh_cluster
    assert ray_pool.connect(LoadClusterSpec(address=cluster.address))
    try:
        head_id = cluster.head_node.node_id
        sampler = sampler_for_spec(_spec(head_id, node.node_id))
        assert isinstance(sampler, NodesSampler)
        sampler.start()
        try:
            time.sleep(2.0)
            sources = {name: s.source for name, s in sampler.samplers.items()}
            assert isinstance(sources["a"], RemoteSource)
            assert isinstance(sources["b"], RemoteSource)
            assert sources["a"].node_id == head_id  # read by an actor on that node
            assert sources["b"].node_id == node.node_id
            cluster.remove_node(node, allow_graceful=False)
            lost_at = time.monotonic_ns()
            time.sleep(3.0)
        finally:
            evidence = sampler.stop()
    finally:
        ray_pool.disconnect()
    nodes = {n.name: n for n in evidence.nodes or []}
    assert "read on Ray node" in nodes["b"].description
    assert {s.watts for s in nodes["a"].samples} == {300.0}
    assert {s.watts for s in nodes["b"].samples} == {450.0}
    before = [s for s in evidence.samples if s.t_ns < lost_at]
    assert len(before) >= 5  # 2 s at 5 Hz
    assert {s.watts for s in before} == {750.0}
    # Node b's reader went with its node: a gap there, and on the total; node a reads on.
    assert nodes["b"].gaps
    assert any("Ray node" in g.cause for g in nodes["b"].gaps), nodes["b"].gaps
    assert not nodes["a"].gaps
    assert sum(1 for s in nodes["a"].samples if s.t_ns > lost_at + 1_000_000_000) >= 5
    assert not [s for s in evidence.samples if s.t_ns > lost_at + 2_000_000_000]


def test_a_ray_node_without_the_cluster_is_refused():
    sampler = sampler_for_spec(_spec("10.0.0.1", "10.0.0.2"))
    with pytest.raises(PowerError, match=r"load.cluster or --ray"):
        sampler.start()

"""The load generator's Ray cluster when things go wrong (tests/ray_cluster.py): a node lost
mid-probe, the server's own host, a cluster that does not answer."""

from __future__ import annotations

import subprocess
import time

import pytest

from tests.measure_cli import kill_group, load_valid_run, measure_argv
from tests.ray_cluster import cluster, cluster_spec, fresh_cluster, nginx_setup, wait_for_line
from tokenwatt.errors import ClusterError
from tokenwatt.load.probe import LoadGenerator
from tokenwatt.schema.spec import LoadClusterSpec

ray = pytest.importorskip("ray", reason="Ray is part of the test install (.[dev,ray])")

pytestmark = [pytest.mark.anyio, pytest.mark.peer, pytest.mark.slow]
__all__ = ["cluster", "fresh_cluster"]  # fixtures


async def test_the_server_host_is_left_out_unless_asked(nginx_sse, cluster):
    spec, work = nginx_setup(nginx_sse)
    # nginx-sse listens on loopback: this host runs the server, and both nodes are this host.
    with pytest.raises(ClusterError, match="server_nodes: true"):
        async with LoadGenerator(
            spec.engine, work, cluster=LoadClusterSpec(address=cluster.address)
        ):
            pass
    assert not ray.is_initialized()


async def test_an_unreachable_cluster_is_one_clear_error(nginx_sse):
    spec, work = nginx_setup(nginx_sse)
    with pytest.raises(ClusterError, match="cannot join the Ray cluster"):
        async with LoadGenerator(spec.engine, work, cluster=LoadClusterSpec(address="127.0.0.1:1")):
            pass


def test_a_node_lost_mid_probe_fails_the_probe_client_side(repo, tmp_path, fresh_cluster):
    cluster, node = fresh_cluster
    spec = cluster_spec(repo, tmp_path, cluster.address, window_s=8)
    out = tmp_path / "run.json"
    proc = subprocess.Popen(
        measure_argv(spec, out, "--no-accuracy"),
        cwd=repo,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    with proc:
        try:
            seen = wait_for_line(proc, r"probe 1 \(rates\)", 180)
            time.sleep(3.0)  # inside probe 1's window
            cluster.remove_node(node, allow_graceful=False)  # its raylet and actor, killed
            _, err = proc.communicate(timeout=180)
        finally:
            kill_group(proc)
    seen += err
    assert proc.returncode == 0, seen[-3000:]
    assert "Traceback" not in seen
    run = load_valid_run(out, cwd=repo)
    assert run.complete
    assert run.environment.load_cluster is not None
    assert len(run.environment.load_cluster.nodes) == 2
    first, lost, *after = run.probes
    assert not first.client_bound
    assert first.load_actors is not None
    assert len(first.load_actors) == 2
    assert lost.client_bound
    assert lost.load_actors is not None
    gone = [a for a in lost.load_actors if a.lost]
    assert [a.node_id for a in gone] == [node.node_id]
    assert any(
        "lost mid-probe (client side)" in r and node.node_id[:12] in r
        for r in lost.client_bound_reasons
    ), lost.client_bound_reasons
    # Client side, never the server's: the survivor's requests cut by the stop are cancelled.
    assert set(lost.failures_by_cause) <= {"cancelled"}
    assert not lost.slo_pass
    # The sweep goes on (its confirmation) on the node still alive.
    assert [p.phase for p in after] == ["confirm"]
    assert after[0].load_actors is not None
    assert {a.node_id for a in after[0].load_actors} == {first.load_actors[0].node_id} - {
        node.node_id
    } or {a.node_id for a in after[0].load_actors} == {a.node_id for a in first.load_actors} - {
        node.node_id
    }
    assert not after[0].client_bound

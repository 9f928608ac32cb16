"""A real Ray cluster on this machine for the load-generator tests, and what they share.

The cluster is Ray's own ``ray.cluster_utils.Cluster``: a head and one more node, each with its
own raylet and one CPU. Ray is part of the test install (``.[dev,ray]``).
"""

from __future__ import annotations

import contextlib
import re
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests import factories
from tests.measure_cli import alive, load_spec_dict, write_spec
from tokenwatt.load.workload import Workload, build_workload
from tokenwatt.schema.spec import Spec


def two_node_cluster() -> Any:
    from ray.cluster_utils import Cluster

    c = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
    node = c.add_node(num_cpus=1)
    c.wait_for_nodes()
    return c, node


@pytest.fixture(scope="module")
def cluster() -> Iterator[Any]:
    """A two-node cluster for the module (its second node is never killed)."""
    c, _ = two_node_cluster()
    yield c
    c.shutdown()


@pytest.fixture
def fresh_cluster() -> Iterator[Any]:
    """A two-node cluster of the test's own, and its second node (to kill)."""
    c, node = two_node_cluster()
    yield c, node
    c.shutdown()


def nginx_setup(nginx_sse: Any) -> tuple[Spec, Workload]:
    spec = factories.spec(
        engine={"endpoint": f"{nginx_sse.base_url}/v1", "model": "sim"},
        workload={"input_tokens": 64, "output_tokens": 16},
    )
    return spec, build_workload(spec, context_tokens=4096)


def cluster_spec(repo: Path, tmp_path: Path, address: str, window_s: float) -> Path:
    """tests/data/tiny-sim.spec.yaml with its load on the cluster and two explicit rates."""
    data = load_spec_dict(repo / "tests/data/tiny-sim.spec.yaml")
    data["model"]["config"] = str(repo / "specs/models/Qwen__Qwen3-8B/config.json")
    data.pop("accuracy")
    data["measurement"].update({"warmup_s": 1, "window_s": window_s, "search_window_s": window_s})
    data["sweep"] = {"rates": [4, 20]}
    data["load"] = {"cluster": {"address": address, "server_nodes": True}}
    return write_spec(tmp_path / "ray.spec.yaml", data)


def actor_pids() -> list[int]:
    """Processes Ray titled as tokenwatt's shard actors."""
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                if b"ShardActor" in (entry / "cmdline").read_bytes() and alive(int(entry.name)):
                    pids.append(int(entry.name))
    return pids


def wait_for_line(proc: subprocess.Popen[str], pattern: str, timeout_s: float) -> str:
    """Read the process's stderr until a line matches; all of it so far."""
    assert proc.stderr is not None
    seen = ""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        line = proc.stderr.readline()
        if not line:
            break
        seen += line
        if re.search(pattern, line):
            return seen
    raise AssertionError(f"no line matching {pattern!r}: {seen[-3000:]}")

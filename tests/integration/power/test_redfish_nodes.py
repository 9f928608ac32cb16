"""A server spanning two nodes, one real BMC each: two sushy-tools Redfish emulators at different
wattages sampled together (power.nodes). The sum is reported, each node's trace kept with its own
wattage, and one BMC going away is a gap on that node (and on the total) while the other node's
readings go on. Then the whole pipeline: measure against the simulator with the two BMCs as its
power, report, and the result page listing the nodes."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.peers import wait_for
from tokenwatt import energy, store
from tokenwatt.errors import PowerError
from tokenwatt.pages.render import make_environment, render_result, result_view
from tokenwatt.power import NodesSampler, sampler_for_spec
from tokenwatt.schema.spec import Spec

pytestmark = [pytest.mark.peer, pytest.mark.redfish]


def two_node_spec(repo: Path, a_url: str, b_url: str, **power: Any) -> dict[str, Any]:
    """tests/data/tiny-sim.spec.yaml with its paths made absolute and power read from 2 BMCs."""
    data: dict[str, Any] = yaml.safe_load(
        (repo / "tests" / "data" / "tiny-sim.spec.yaml").read_text()
    )
    data["model"]["config"] = str(repo / "specs" / "models" / "Qwen__Qwen3-8B" / "config.json")
    data["accuracy"]["suite"] = str(repo / "specs" / "suites" / "gsm8k-200.jsonl")
    data["power"] = {
        "sampling_hz": 10,
        "nodes": [
            {"name": "node-a", "source": "redfish", "url": a_url},
            {"name": "node-b", "source": "redfish", "url": b_url},
        ],
        **power,
    }
    return data


@pytest.mark.slow
def test_two_bmcs_are_summed_and_one_going_away_is_a_gap_on_its_node(start_redfish, repo):
    a_peer = start_redfish(watts=300)
    b_peer = start_redfish(watts=450)
    spec = Spec.model_validate(two_node_spec(repo, a_peer.url, b_peer.url))
    sampler = sampler_for_spec(spec, env={})
    assert isinstance(sampler, NodesSampler)
    a, b = sampler.samplers["node-a"], sampler.samplers["node-b"]
    sampler.start()
    wait_for(lambda: sampler.sample_count >= 5)
    before = sampler.evidence()
    assert {s.watts for s in before.samples} == {750.0}

    b_peer.stop()  # node-b's BMC goes away
    wait_for(lambda: b.gap_count == 1)
    a_at_outage, total_at_outage = a.sample_count, sampler.sample_count
    wait_for(lambda: a.sample_count >= a_at_outage + 10)  # node-a reads on, at its rate
    assert sampler.sample_count == total_at_outage  # no total while node-b reads nothing
    b_peer.set_watts(500)
    b_peer.start()  # same port, same mockup
    wait_for(lambda: sampler.sample_count >= total_at_outage + 5)
    evidence = sampler.stop()

    assert evidence.source == "nodes"
    assert evidence.scope == "node"
    assert evidence.nodes is not None
    node_a, node_b = evidence.nodes
    # each node's own trace, at its own wattage
    assert (node_a.name, node_b.name) == ("node-a", "node-b")
    assert {s.watts for s in node_a.samples} == {300.0}
    assert {s.watts for s in node_b.samples} == {450.0, 500.0}
    assert (
        node_a.description
        == node_b.description
        == ("Node power from BMC (Redfish EnvironmentMetrics.PowerWatts, chassis 1)")
    )
    assert node_a.power_limit_w == node_b.power_limit_w == 2800.0
    assert evidence.power_limit_w == 5600.0
    # the outage: a gap on node-b, with its cause, and none on node-a, which kept reading
    assert node_a.gaps == []
    (b_gap,) = node_b.gaps
    assert f"cannot reach the BMC at {b_peer.url}" in b_gap.cause
    assert "failed reads" in b_gap.cause
    assert not [s for s in node_b.samples if b_gap.start_ns <= s.t_ns < b_gap.end_ns]
    a_during = [s for s in node_a.samples if b_gap.start_ns <= s.t_ns < b_gap.end_ns]
    assert len(a_during) >= 10
    # ... and on the total, where nothing stands in for node-b: no 300 W "sum", no zero
    (gap,) = evidence.gaps
    assert (gap.start_ns, gap.end_ns) == (b_gap.start_ns, b_gap.end_ns)
    assert gap.cause.startswith("node-b: cannot reach the BMC")
    assert not [s for s in evidence.samples if gap.start_ns <= s.t_ns < gap.end_ns]
    totals = [s.watts for s in evidence.samples]
    assert set(totals) == {750.0, 800.0}
    assert totals == sorted(totals)  # 750 W before the outage, 800 W after
    # a window over the whole run: the sum's energy is the nodes' energies added
    window = (evidence.samples[0].t_ns, evidence.samples[-1].t_ns)
    figures = energy.window_figures(evidence, [window], output_tokens=1)
    per_node = dict(figures.nodes)
    a_energy, b_energy = per_node["node-a"].energy_j, per_node["node-b"].energy_j
    assert a_energy is not None
    assert b_energy is not None
    assert figures.energy_j == pytest.approx(a_energy + b_energy)
    assert a_energy == pytest.approx(300.0 * (window[1] - window[0]) / 1e9)
    assert per_node["node-a"].max_gap_fraction == pytest.approx(0.0, abs=0.05)
    assert figures.max_gap_fraction is not None
    assert figures.max_gap_fraction >= (gap.end_ns - gap.start_ns) / (window[1] - window[0])


@pytest.mark.slow
def test_measure_report_and_page_with_two_bmcs(start_redfish, repo, tmp_path):
    a_peer = start_redfish(watts=300)
    b_peer = start_redfish(watts=450)
    secrets = {"TW_BMC_A_PASS": "Qz8-sEcret-nodeA-77", "TW_BMC_B_PASS": "Wv3-sEcret-nodeB-91"}
    data = two_node_spec(repo, a_peer.url, b_peer.url, sampling_hz=5)
    for node, name in zip(data["power"]["nodes"], secrets, strict=True):
        node.update(username="admin", password_env=name)  # sushy-static accepts any password
    spec_path = tmp_path / "two-nodes.spec.yaml"
    spec_path.write_text(yaml.safe_dump(data, sort_keys=False))
    run_path, result_path = tmp_path / "nodes.json", tmp_path / "result.json"
    env = {**os.environ, **secrets}
    tokenwatt = [sys.executable, "-m", "tokenwatt"]
    measured = subprocess.run(
        [*tokenwatt, "run", "--spec", str(spec_path), "--label", "two-nodes", "--role"]
        + ["baseline", "--out", str(run_path), "--quick"],
        cwd=repo,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,  # a hang guard, not a speed limit
        check=False,
    )
    assert measured.returncode == 0, measured.stderr[-3000:]
    reported = subprocess.run(
        [*tokenwatt, "report", str(run_path), "--title", "Two BMCs", "--out", str(result_path)],
        cwd=repo,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert reported.returncode == 0, reported.stderr[-3000:]

    run = store.load_run(run_path)
    power = run.power
    assert power is not None
    assert power.nodes is not None
    assert [(n.name, n.node_power_kw, n.gaps) for n in power.nodes] == [
        ("node-a", 0.3, []),
        ("node-b", 0.45, []),
    ]
    assert power.node_power_kw == pytest.approx(0.75)
    assert {s.watts for s in power.samples} == {750.0}
    result = store.load_result(result_path)
    assert result.power.kind == "nodes"
    (config,) = result.configs
    assert config.node_power_kw == 0.75
    assert config.power_nodes is not None
    node_a, node_b = config.power_nodes
    assert (node_a.name, node_a.node_power_kw, node_b.name, node_b.node_power_kw) == (
        "node-a",
        0.3,
        "node-b",
        0.45,
    )
    assert node_a.energy_j is not None
    assert node_b.energy_j is not None
    assert config.energy_j == pytest.approx(node_a.energy_j + node_b.energy_j, abs=0.2)
    page = render_result(
        result_view(result, source="results/two-bmcs.json"),
        env=make_environment(repo / "templates"),
        draw=lambda chart, prefix: "",
    )
    row = next(line for line in page.splitlines() if line.startswith("| Power nodes"))
    assert "node-a (redfish): 0.3 kW" in row
    assert "node-b (redfish): 0.45 kW" in row
    assert "above are their sum" in row
    # the passwords went to the BMCs only: never into a file, a log line or the page
    for text in (
        run_path.read_text(),
        result_path.read_text(),
        page,
        measured.stdout + measured.stderr,
        reported.stdout + reported.stderr,
    ):
        for value in secrets.values():
            assert value not in text
    assert "TW_BMC_B_PASS" in run_path.read_text()  # the variable's name is recorded


def test_a_node_whose_bmc_is_down_at_the_start_is_refused_by_name(start_redfish, repo):
    a_peer = start_redfish(watts=300)
    b_peer = start_redfish(watts=450)
    b_peer.stop()
    spec = Spec.model_validate(two_node_spec(repo, a_peer.url, b_peer.url))
    sampler = sampler_for_spec(spec, env={})
    started = time.monotonic()
    with pytest.raises(PowerError, match=r"power node 'node-b': .*cannot reach the BMC"):
        sampler.start()
    assert time.monotonic() - started < 30

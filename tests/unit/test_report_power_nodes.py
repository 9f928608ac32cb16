"""A server spanning nodes through the run file, ``report`` and the result page.

The seed's three runs, measured on two BMCs instead of NVML: node-a at 300 W, node-b at 450 W
(one of node-b's readings missing in the baseline's first window), 1 Hz.
"""

from __future__ import annotations

import pytest

from tests import factories
from tokenwatt import energy, store
from tokenwatt.errors import ResultError
from tokenwatt.figures import accepted_probes, figures_of
from tokenwatt.pages.render import make_environment, render_result, result_view
from tokenwatt.power.nodes import sum_nodes
from tokenwatt.report import LoadedRun, build_result
from tokenwatt.schema.run import NodePowerEvidence, PowerGap, PowerSample, RunFile
from tokenwatt.schema.spec import PowerSpec

S = 1_000_000_000
NODES = PowerSpec.model_validate(
    {
        "nodes": [
            {"name": "node-a", "source": "redfish", "url": "https://10.0.0.1"},
            {"name": "node-b", "source": "redfish", "url": "https://10.0.0.2"},
        ]
    }
)


def on_two_bmcs(run: RunFile, *, drop_b: tuple[int, ...] = ()) -> RunFile:
    """The run with its power read from two BMCs; ``drop_b``: ticks on which node-b failed."""
    confirm = accepted_probes(run)
    t0 = confirm[0].window_start_ns
    end = confirm[-1].window_end_ns
    ticks = list(range((end - t0) // S))
    b_ticks = [t for t in ticks if t not in drop_b]
    times = {t: t0 + t * S + S // 2 for t in ticks}
    a = NodePowerEvidence(
        name="node-a",
        source="redfish",
        description="Node power from BMC (Redfish, chassis 1)",
        scope="node",
        samples=[PowerSample(t_ns=times[t], watts=300.0) for t in ticks],
    )
    b = NodePowerEvidence(
        name="node-b",
        source="redfish",
        description="Node power from BMC (Redfish, chassis 1)",
        scope="node",
        samples=[PowerSample(t_ns=times[t], watts=450.0) for t in b_ticks],
        gaps=[
            PowerGap(start_ns=times[t] - S // 4, end_ns=times[t + 1], cause="BMC timed out")
            for t in drop_b
        ],
    )
    evidence = sum_nodes([(a, ticks), (b, b_ticks)], sampling_hz=1)
    windows, tokens = energy.confirmed_windows(confirm)
    evidence = energy.apply_window_figures(evidence, windows, output_tokens=tokens)
    spec = run.spec.model_copy(update={"power": NODES})
    return run.model_copy(update={"spec": spec, "power": evidence})


@pytest.fixture
def runs(tmp_path) -> list[LoadedRun]:
    """The seed's runs on two BMCs, each written to a run file and read back."""
    seed = factories.seed_runs()
    measured = [on_two_bmcs(seed[0], drop_b=(10,)), *map(on_two_bmcs, seed[1:])]
    loaded = []
    for run in measured:
        path = tmp_path / f"{run.label}.json"
        store.save_run(run, path)
        again = store.load_run(path)
        assert again == run
        loaded.append(LoadedRun(str(path), again))
    return loaded


def test_the_run_file_keeps_each_node_and_the_sum(runs):
    power = runs[0].run.power
    assert power is not None
    assert power.source == "nodes"
    assert power.nodes is not None
    a, b = power.nodes
    assert a.node_power_kw == pytest.approx(0.300)
    assert b.node_power_kw == pytest.approx(0.450)
    assert len(b.samples) == len(a.samples) - 1
    # 750 W on every tick both read; node-b's missing reading is a gap on the total too
    assert {s.watts for s in power.samples} == {750.0}
    assert len(power.samples) == len(b.samples)
    assert [g.cause for g in power.gaps] == ["node-b: BMC timed out"]
    assert power.node_power_kw == pytest.approx(0.750)
    # 2 windows x 120 s: a 300 W x 240 s = 72 kJ, b 450 W (its gap bridged) = 108 kJ
    assert a.energy_j == pytest.approx(72_000.0)
    assert b.energy_j == pytest.approx(108_000.0)
    assert power.energy_j == pytest.approx(180_000.0)
    assert runs[0].run.spec.power.kind == "nodes"


def test_report_gives_each_nodes_figures_and_their_sum(runs, tmp_path):
    result = build_result(runs, title="Two BMCs", report_command="tokenwatt report ...")
    assert result.power.kind == "nodes"
    assert result.power.source == "Sum over 2 nodes: node-a (redfish), node-b (redfish)"
    baseline = result.configs[0]
    assert baseline.node_power_kw == 0.75
    assert baseline.energy_j == 180_000.0
    assert baseline.power_nodes is not None
    assert [
        (n.name, n.source, n.node_power_kw, n.energy_j, n.samples, n.gaps)
        for n in baseline.power_nodes
    ] == [
        ("node-a", "redfish", 0.3, 72_000.0, 240, 0),
        ("node-b", "redfish", 0.45, 108_000.0, 239, 1),
    ]
    assert result.configs[1].power_nodes is not None
    assert [n.gaps for n in result.configs[1].power_nodes] == [0, 0]
    # the result file reads back as written
    path = tmp_path / "two-bmcs.json"
    store.save_result(result, path)
    assert store.load_result(path) == result


def test_the_page_lists_the_nodes_and_says_the_figures_are_their_sum(runs, repo):
    result = build_result(runs, title="Two BMCs", report_command="tokenwatt report ...")
    page = render_result(
        result_view(result, source="results/two-bmcs.json"),
        env=make_environment(repo / "templates"),
        draw=lambda chart, prefix: "",
    )
    row = next(line for line in page.splitlines() if line.startswith("| Power nodes"))
    assert "are their sum" in row
    baseline, tuned, repeat = row.split(" | ")[1:4]
    assert baseline == (
        "node-a (redfish): 0.3 kW, 72,000 J, 0 gaps<br>node-b (redfish): 0.45 kW, 108,000 J, 1 gaps"
    )
    assert tuned.endswith("node-b (redfish): 0.45 kW, 108,000 J, 0 gaps")
    setup = "| Power source | Sum over 2 nodes: node-a (redfish), node-b (redfish) (kind: nodes)"
    assert setup in page


def test_a_page_of_one_source_has_no_nodes_row(repo):
    result = build_result(
        [LoadedRun(f"runs/{r.label}.json", r) for r in factories.seed_runs()],
        title="One source",
        report_command="tokenwatt report ...",
    )
    assert all(c.power_nodes is None for c in result.configs)
    assert "power_nodes" not in store.dump_result(result)["configs"][0]
    page = render_result(
        result_view(result, source="results/one.json"),
        env=make_environment(repo / "templates"),
        draw=lambda chart, prefix: "",
    )
    assert "Power nodes" not in page


def test_a_nodes_figure_that_disagrees_with_its_samples_is_refused(runs):
    run = runs[0].run
    assert run.power is not None
    assert run.power.nodes is not None
    nodes = list(run.power.nodes)
    nodes[1] = nodes[1].model_copy(update={"energy_j": 100_000.0})
    tampered = run.model_copy(update={"power": run.power.model_copy(update={"nodes": nodes})})
    with pytest.raises(ResultError, match=r"power.nodes\[1\].energy_j \(node-b\) is 100000.0"):
        figures_of(tampered, path="runs/x.json")

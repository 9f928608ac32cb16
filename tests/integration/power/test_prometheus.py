"""The prometheus source against prometheus-node-exporter's textfile collector serving
dcgm-exporter-named metrics (labels re-sorted, big numbers in exponent form)."""

from __future__ import annotations

import time

import pytest

from tests.peers import serve_text, wait_for
from tokenwatt import energy
from tokenwatt.errors import PowerError
from tokenwatt.power import PowerSampler, PrometheusSource, build_source
from tokenwatt.schema.spec import PowerSpec

pytestmark = pytest.mark.peer


def dcgm(
    watts: dict[int, float],
    *,
    energy_mj: dict[int, float] | None = None,
    reasons: dict[int, int] | None = None,
    reasons_metric: str = "DCGM_FI_DEV_CLOCKS_EVENT_REASONS",
    limit_w: float | None = 700.0,
    host: str = "node1",
) -> str:
    """A dcgm-exporter page, labels in the exporter's own order."""

    def labels(gpu: int) -> str:
        return (
            f'gpu="{gpu}",UUID="GPU-{gpu:08d}",pci_bus_id="00000000:{gpu + 24:02X}:00.0",'
            f'device="nvidia{gpu}",modelName="NVIDIA H100 80GB HBM3",Hostname="{host}"'
        )

    lines = [
        "# HELP DCGM_FI_DEV_POWER_USAGE Power draw (in W).",
        "# TYPE DCGM_FI_DEV_POWER_USAGE gauge",
    ]
    lines += [f"DCGM_FI_DEV_POWER_USAGE{{{labels(g)}}} {w}" for g, w in watts.items()]
    if energy_mj is not None:
        lines.append("# TYPE DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION counter")
        lines += [
            f"DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION{{{labels(g)}}} {e:.0f}"
            for g, e in energy_mj.items()
        ]
    if reasons is not None:
        lines.append(f"# TYPE {reasons_metric} gauge")
        lines += [f"{reasons_metric}{{{labels(g)}}} {r}" for g, r in reasons.items()]
    if limit_w is not None:
        lines.append("# TYPE DCGM_FI_DEV_POWER_MGMT_LIMIT gauge")
        lines += [f"DCGM_FI_DEV_POWER_MGMT_LIMIT{{{labels(g)}}} {limit_w}" for g in watts]
    return "\n".join(lines) + "\n"


def spec(url: str) -> PowerSpec:
    return PowerSpec(source="prometheus", url=url, sampling_hz=10)


def test_node_exporter_really_re_sorts_labels_and_uses_exponents(node_exporter):
    import httpx

    node_exporter.write(dcgm({0: 412.5}, energy_mj={0: 123456789}))
    page = httpx.get(node_exporter.url).text
    assert 'DCGM_FI_DEV_POWER_USAGE{Hostname="node1",UUID=' in page  # not the order written
    assert "1.23456789e+08" in page  # the exponent form a scraper must read


def test_sums_the_gpus_in_use_and_reads_counter_reasons_and_limit(node_exporter):
    node_exporter.write(
        dcgm(
            {0: 100.0, 1: 200.5, 2: 300.0, 3: 400.0},
            energy_mj={0: 1e8, 1: 2e8, 2: 3e8, 3: 4e8},
            reasons={0: 0, 1: 0x4, 2: 0x24, 3: 0x40},
        )
    )
    source = build_source(spec(node_exporter.url), gpu_indices=[1, 2])
    with source:
        reading = source.read()
    assert reading.watts == 500.5
    assert reading.gpu_watts == (200.5, 300.0)
    assert reading.energy_j == 500_000.0  # (2e8 + 3e8) mJ
    assert reading.throttle_reasons == (
        "sw_power_cap",
        "sw_thermal",
    )  # 0x4 | 0x24, gpu 3 not in use
    assert source.power_limit_w == 1400.0
    assert source.throttle_monitored
    assert source.has_energy_counter

    everything = build_source(spec(node_exporter.url))
    assert isinstance(everything, PrometheusSource)
    with everything:
        assert everything.read().watts == 1000.5
        assert everything.gpus == ["0", "1", "2", "3"]


def test_older_throttle_metric_name_and_no_energy_counter(node_exporter):
    node_exporter.write(
        dcgm(
            {0: 250.0},
            reasons={0: 0x8},
            reasons_metric="DCGM_FI_DEV_CLOCK_THROTTLE_REASONS",
            limit_w=None,
        )
    )
    with build_source(spec(node_exporter.url)) as source:
        reading = source.read()
    assert reading.throttle_reasons == ("hw_slowdown",)
    assert reading.energy_j is None
    assert source.power_limit_w is None
    assert not source.has_energy_counter


def test_counter_reset_while_sampling_is_unwrapped(node_exporter):
    node_exporter.write(dcgm({0: 300.0}, energy_mj={0: 5_000_000}))
    sampler = PowerSampler(build_source(spec(node_exporter.url)), sampling_hz=20)
    sampler.start()
    wait_for(lambda: sampler.sample_count >= 3)
    node_exporter.write(dcgm({0: 300.0}, energy_mj={0: 5_300_000}))  # +300 J
    wait_for(lambda: sampler.evidence().samples[-1].energy_j == 5300.0)
    node_exporter.write(dcgm({0: 300.0}, energy_mj={0: 200_000}))  # driver reloaded: 200 J since
    wait_for(lambda: sampler.evidence().samples[-1].energy_j == 200.0)
    node_exporter.write(dcgm({0: 300.0}, energy_mj={0: 500_000}))  # +300 J
    wait_for(lambda: sampler.evidence().samples[-1].energy_j == 500.0)
    time.sleep(0.1)
    ev = sampler.stop()
    # the window ends where the counter last changed: after that its value may be stale
    last_change = next(s.t_ns for s in ev.samples if s.energy_j == 500.0)
    window = (ev.samples[0].t_ns, last_change)
    figures = energy.window_figures(ev, [window], output_tokens=8000)
    # 300 + 200 (counted from zero after the reset) + 300 J
    assert figures.energy_method == "counter"
    assert figures.energy_j == pytest.approx(800.0)
    assert figures.tokens_per_joule == pytest.approx(10.0)
    assert any("reset 1 time" in n for n in figures.notes)
    assert figures.node_power_kw == pytest.approx(0.3)


def test_exporter_going_away_is_a_gap(node_exporter):
    node_exporter.write(dcgm({0: 350.0}))
    sampler = PowerSampler(build_source(spec(node_exporter.url)), sampling_hz=20)
    sampler.start()
    wait_for(lambda: sampler.sample_count >= 3)
    node_exporter.stop()
    wait_for(lambda: sampler.gap_count == 1)
    count = sampler.sample_count
    node_exporter.start()
    wait_for(lambda: sampler.sample_count >= count + 3)
    ev = sampler.stop()
    assert len(ev.gaps) == 1
    assert "cannot scrape" in ev.gaps[0].cause
    assert {s.watts for s in ev.samples} == {350.0}


def test_missing_gpu_and_ambiguous_series_are_errors(node_exporter):
    node_exporter.write(dcgm({0: 100.0, 1: 100.0}))
    with pytest.raises(PowerError, match=r"no DCGM_FI_DEV_POWER_USAGE for gpu 5 .*serves gpu 0, 1"):
        build_source(spec(node_exporter.url), gpu_indices=[5]).open()
    node_exporter.write(
        dcgm({0: 100.0}, host="a") + dcgm({0: 120.0}, host="b").replace("# ", "#x ")
    )
    with pytest.raises(PowerError, match="twice for gpu 0"):
        build_source(spec(node_exporter.url)).open()
    node_exporter.write("up 1\n")
    with pytest.raises(PowerError, match="serves no DCGM_FI_DEV_POWER_USAGE"):
        build_source(spec(node_exporter.url)).open()


def test_a_page_out_of_format_is_a_power_error_naming_the_line():
    # node-exporter refuses to serve a broken textfile, so a plain HTTP server serves this one.
    page = {"body": dcgm({0: 300.0})}
    with serve_text(lambda: page["body"]) as url:
        with build_source(spec(url)) as source:
            assert source.read().watts == 300.0
            page["body"] = page["body"].replace(" 300.0", " 3OO")
            with pytest.raises(PowerError, match=r"not in the Prometheus text format: line 3: "):
                source.read()
        with pytest.raises(PowerError, match=r"line 3: value is not a number"):
            build_source(spec(url)).open()

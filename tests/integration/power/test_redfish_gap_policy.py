"""A Redfish BMC that stops answering for ~5 s inside a measurement window: the gap reaches the
result's power validity and the publishing policy refuses the result (power_max_gap_s)."""

from __future__ import annotations

import time

import pytest

from tests import factories
from tests.peers import wait_for
from tests.result_factories import full_mode_result
from tokenwatt import energy, policy
from tokenwatt.figures import power_validity
from tokenwatt.pages.render import make_environment, render_result, result_view
from tokenwatt.power import PowerSampler, build_source
from tokenwatt.schema.spec import PowerSpec

pytestmark = [pytest.mark.peer, pytest.mark.redfish, pytest.mark.slow]

OUTAGE_S = 5.0


def test_a_five_second_bmc_outage_in_the_window_makes_the_result_unpublishable(
    start_redfish, seed_path, repo
):
    peer = start_redfish(watts=500)
    power = PowerSpec(source="redfish", url=peer.url, sampling_hz=10)
    sampler = PowerSampler(build_source(power, env={}), sampling_hz=10)
    sampler.start()
    wait_for(lambda: sampler.sample_count >= 3)
    window_start_ns = time.monotonic_ns()
    time.sleep(1.0)
    peer.stop()
    time.sleep(OUTAGE_S)
    peer.start()  # same port, same mockup
    resumed = sampler.sample_count
    wait_for(lambda: sampler.sample_count >= resumed + 10)
    window_end_ns = time.monotonic_ns()
    evidence = sampler.stop()

    assert len(evidence.gaps) == 1
    figures = energy.window_figures(evidence, [(window_start_ns, window_end_ns)], output_tokens=1)
    assert figures.max_gap_s is not None
    assert OUTAGE_S - 0.5 <= figures.max_gap_s <= OUTAGE_S + 5.0  # plus the restart
    validity = power_validity(factories.seed_runs()[0], figures)
    assert validity is not None
    assert validity.max_gap_s is not None
    assert validity.max_gap_s > 3.0

    clean = full_mode_result(seed_path)
    assert "power_max_gap_s" not in {v.rule for v in policy.check_result(clean)}
    configs = [c.model_copy(update={"power_validity": validity}) for c in clean.configs]
    gapped = full_mode_result(seed_path, configs=[c.model_dump() for c in configs])
    refused = [v for v in policy.check_result(gapped) if v.rule == "power_max_gap_s"]
    assert refused, policy.check_result(gapped)

    # ... and the page shows the gap beside the coverage
    page = render_result(
        result_view(gapped, source="results/gapped.json"),
        env=make_environment(repo / "templates"),
        draw=lambda chart, prefix: "",
    )
    row = next(line for line in page.splitlines() if "longest gap" in line)
    assert f" / {validity.max_gap_s:.1f}" in row, row

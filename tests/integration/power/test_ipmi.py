"""The ipmi source against OpenIPMI's ipmi_sim answering DCMI power readings over RMCP+ (UDP)."""

from __future__ import annotations

import functools
import logging

import pytest

from tests import peers
from tokenwatt.errors import PowerError
from tokenwatt.power import IpmiSource, PowerSampler, build_source
from tokenwatt.schema.spec import PowerSpec

# ipmi_sim answers more slowly than the other peers.
wait_for = functools.partial(peers.wait_for, timeout_s=15.0)

pytestmark = pytest.mark.peer

PASSWORD = "Ipmi-s3cret-9"


def spec(port: int) -> PowerSpec:
    return PowerSpec(
        source="ipmi",
        host=f"127.0.0.1:{port}",
        username="admin",
        password_env="TW_IPMI_PASS",
        sampling_hz=5,
    )


@pytest.mark.slow
def test_dcmi_reading_follows_the_bmc_and_survives_an_outage(start_ipmi):
    bmc = start_ipmi(password=PASSWORD, watts=480)
    source = build_source(spec(bmc.port), env={"TW_IPMI_PASS": PASSWORD})
    sampler = PowerSampler(source, sampling_hz=5)
    sampler.start()
    assert isinstance(source, IpmiSource)
    assert source.cipher_suite == 3  # ipmi_sim refuses 17; the source found 3 by itself
    wait_for(lambda: sampler.sample_count >= 2)
    bmc.set_watts(1777)
    wait_for(lambda: sampler.evidence().samples[-1].watts == 1777.0)
    bmc.stop()
    wait_for(lambda: sampler.gap_count == 1)
    count = sampler.sample_count
    bmc.start()
    wait_for(lambda: sampler.sample_count >= count + 2)
    ev = sampler.stop()

    watts = [s.watts for s in ev.samples]
    assert watts[0] == 480.0
    assert 1777.0 in watts
    assert watts[-1] == 1777.0
    assert 0.0 not in watts
    assert len(ev.gaps) == 1
    assert "IPMI session to 127.0.0.1" in ev.gaps[0].cause
    assert ev.scope == "node"
    assert ev.description == f"Node power from BMC (IPMI DCMI power reading, 127.0.0.1:{bmc.port})"


def test_wrong_password_is_a_clear_error_without_the_secret(start_ipmi, caplog):
    caplog.set_level(logging.DEBUG)
    bmc = start_ipmi(password=PASSWORD)
    wrong = "Wr0ng-" + PASSWORD
    source = build_source(spec(bmc.port), env={"TW_IPMI_PASS": wrong})
    with pytest.raises(PowerError) as info:
        source.open()
    message = str(info.value)
    assert message.startswith(f"IPMI session to 127.0.0.1:{bmc.port} refused for user 'admin'")
    assert "check $TW_IPMI_PASS" in message
    for text in (message, caplog.text, repr(info.value.__cause__)):
        assert wrong not in text
        assert PASSWORD not in text


def test_a_bmc_without_dcmi_is_named_as_such(start_ipmi):
    bmc = start_ipmi(password=PASSWORD, dcmi=False)
    with pytest.raises(
        PowerError, match="does not support DCMI power readings .* redfish or command"
    ):
        build_source(spec(bmc.port), env={"TW_IPMI_PASS": PASSWORD}).open()


def test_missing_ipmitool_is_named():
    source = IpmiSource(host="127.0.0.1:1", ipmitool="ipmitool-not-installed")
    with pytest.raises(PowerError, match="ipmitool-not-installed not found on PATH"):
        source.open()

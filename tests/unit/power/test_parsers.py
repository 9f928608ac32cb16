"""Pure pieces of the power sources: output parsers, reason names, the registry.

The Prometheus text format is read by tokenwatt.promtext (tests/unit/test_promtext.py).
"""

from __future__ import annotations

from typing import get_args

import pytest

from tokenwatt.errors import PowerError
from tokenwatt.power import (
    SOURCES,
    BoardSource,
    CommandSource,
    IpmiSource,
    NoneSource,
    PrometheusSource,
    RedfishSource,
    build_source,
    reason_names,
)
from tokenwatt.power.command import extract_watts
from tokenwatt.power.ipmi import parse_dcmi_power_reading, split_host
from tokenwatt.schema.base import PowerSourceName
from tokenwatt.schema.spec import PowerSpec

# -- command output ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("output", "field", "watts"),
    [
        ("412.5\n", None, 412.5),
        ("  7e2 ", None, 700.0),
        ('{"power": {"draw": 351.25}}', "power.draw", 351.25),
        ('{"gpus": [{"w": 100}, {"w": "250.5"}]}', "gpus.1.w", 250.5),
        ('{"gpus": [{"w": 100}, {"w": 300}]}', "gpus.-1.w", 300.0),
        ("Board Power Draw: 612.40 W\n", r"Power Draw:\s*([0-9.]+) W", 612.4),
    ],
)
def test_extract_watts(output, field, watts):
    assert extract_watts(output, field) == watts


@pytest.mark.parametrize(
    ("output", "field", "message"),
    [
        ("N/A", None, "not a number"),
        ('{"power": 1}', "power.draw", "'power.draw' is not in"),
        ('{"gpus": [1]}', "gpus.3", "'gpus.3' is not in"),
        ("not json", "power", "not JSON"),
        ("Power: n/a", r"Power:\s*([0-9.]+)", "does not match"),
        ("Power: 5", r"Power:\s*[0-9.]+", "has no group"),
        ("Power: 5", r"Power:\s*([0-9.]+", "not a valid regular expression"),
        ('{"p": true}', "p", "not a number"),
        ('{"p": -3}', "p", "not a valid number"),
    ],
)
def test_extract_watts_refuses_what_is_not_a_reading(output, field, message):
    with pytest.raises(PowerError, match=message):
        extract_watts(output, field)


# -- ipmitool output -----------------------------------------------------------------------------

DCMI = """
    Instantaneous power reading:                   480 Watts
    Minimum during sampling period:                350 Watts
    Maximum during sampling period:                480 Watts
    Average power reading over sample period:      415 Watts
    IPMI timestamp:                           11/29/26 15:07:33 UTC    Sampling period:  00000012 Seconds.
    Power reading state is:                   activated
"""


def test_parse_dcmi_takes_the_instantaneous_reading():
    assert parse_dcmi_power_reading(DCMI) == 480.0


def test_parse_dcmi_refuses_a_deactivated_measurement():
    with pytest.raises(PowerError, match="deactivated"):
        parse_dcmi_power_reading(DCMI.replace("activated", "deactivated"))
    with pytest.raises(PowerError, match="no 'Instantaneous power reading'"):
        parse_dcmi_power_reading("garbage")


@pytest.mark.parametrize(
    ("host", "expected"),
    [
        ("bmc.example", ("bmc.example", None)),
        ("10.0.0.5:6230", ("10.0.0.5", 6230)),
        ("[fe80::1]:623", ("fe80::1", 623)),
        ("fe80::1", ("fe80::1", None)),
    ],
)
def test_split_host(host, expected):
    assert split_host(host) == expected


def test_split_host_refuses_a_bad_port():
    with pytest.raises(PowerError, match="port must be a number"):
        split_host("bmc:abc")


# -- NVML reason bits ----------------------------------------------------------------------------


def test_reason_names_cover_every_nvml_bit():
    assert reason_names(0) == ()
    assert reason_names(0x4) == ("sw_power_cap",)
    assert reason_names(0x24) == ("sw_power_cap", "sw_thermal")
    assert reason_names(0x1FF) == (
        "gpu_idle",
        "applications_clocks_setting",
        "sw_power_cap",
        "hw_slowdown",
        "sync_boost",
        "sw_thermal",
        "hw_thermal",
        "hw_power_brake",
        "display_clock_setting",
    )
    assert reason_names(0x600) == ("board_limit", "reliability")
    assert reason_names(0x4 | 0x1000) == ("sw_power_cap", "unknown_0x1000")


def test_reason_bits_match_the_installed_nvidia_ml_py():
    import pynvml

    assert pynvml.nvmlClocksThrottleReasonSwPowerCap == 0x4
    assert pynvml.nvmlClocksThrottleReasonHwSlowdown == 0x8
    assert pynvml.nvmlClocksThrottleReasonSwThermalSlowdown == 0x20
    assert pynvml.nvmlClocksThrottleReasonHwThermalSlowdown == 0x40
    assert pynvml.nvmlClocksThrottleReasonHwPowerBrakeSlowdown == 0x80


# -- registry and build_source -------------------------------------------------------------------


def test_every_spec_source_name_is_registered():
    build_source(PowerSpec(source="none"))
    assert set(SOURCES) == set(get_args(PowerSourceName))


def test_build_source_picks_the_class_and_passes_context():
    assert isinstance(build_source(PowerSpec(source="none")), NoneSource)
    board = build_source(PowerSpec(source="board"), gpu_indices=[2, 3])
    assert isinstance(board, BoardSource)
    assert board._requested == [2, 3]
    assert isinstance(build_source(PowerSpec(source="command", command="echo 1")), CommandSource)
    prom = build_source(
        PowerSpec(source="prometheus"), default_metrics_url="http://127.0.0.1:9/metrics"
    )
    assert isinstance(prom, PrometheusSource)
    assert prom.url == "http://127.0.0.1:9/metrics"
    own = build_source(
        PowerSpec(source="prometheus", url="http://exporter:9400/metrics"),
        default_metrics_url="http://127.0.0.1:9/metrics",
    )
    assert isinstance(own, PrometheusSource)
    assert own.url == "http://exporter:9400/metrics"  # the spec's url wins


def test_prometheus_without_any_url_is_an_error():
    with pytest.raises(PowerError, match="needs power.url"):
        build_source(PowerSpec(source="prometheus"))


def test_password_comes_from_the_named_variable_and_never_appears_in_errors():
    spec = PowerSpec(
        source="redfish",
        url="https://bmc.example/redfish/v1",
        username="admin",
        password_env="TW_TEST_BMC_PASS",
    )
    source = build_source(spec, env={"TW_TEST_BMC_PASS": "hunter2-secret"})
    assert isinstance(source, RedfishSource)
    assert source.root_url == "https://bmc.example"
    assert "hunter2-secret" not in source.description
    assert "hunter2-secret" not in repr(source)
    with pytest.raises(PowerError) as info:
        build_source(spec, env={})
    assert "$TW_TEST_BMC_PASS" in str(info.value)
    assert "not set" in str(info.value)
    ipmi = build_source(
        PowerSpec(source="ipmi", host="bmc:623", username="admin", password_env="TW_TEST_BMC_PASS"),
        env={"TW_TEST_BMC_PASS": "hunter2-secret"},
    )
    assert isinstance(ipmi, IpmiSource)
    argv = ipmi._argv(3)
    assert "hunter2-secret" not in " ".join(argv)
    assert "-E" in argv
    assert "-P" not in argv


def test_command_scope_and_redfish_auth_are_spec_fields_of_their_sources():
    assert (
        build_source(PowerSpec(source="command", command="echo 1", scope="board")).scope == "board"
    )
    with pytest.raises(ValueError, match="only used by power source command"):
        PowerSpec(source="board", scope="board")
    with pytest.raises(ValueError, match="only used by power source redfish"):
        PowerSpec(source="ipmi", host="bmc", auth="basic")

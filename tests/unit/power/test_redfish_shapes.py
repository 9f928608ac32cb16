"""Redfish service shapes the peers do not produce (httpx.MockTransport at the transport seam):
a chassis name redirected to a UUID (as sushy-emulator does), several chassis, null readings."""

from __future__ import annotations

import base64
import logging

import httpx
import pytest

from tokenwatt.errors import PowerError
from tokenwatt.power import RedfishSource

UUID = "48295b4d-1f3a-4c5e-9b7d-2a6c8e0f1d3b"


def service(resources: dict[str, object], *, redirects: dict[str, str] | None = None, seen=None):
    def handler(request: httpx.Request) -> httpx.Response:
        if seen is not None:
            seen.append(request)
        path = request.url.path
        if redirects and path in redirects:
            return httpx.Response(307, headers={"Location": redirects[path]})
        if request.method == "POST":
            return httpx.Response(405)
        body = resources.get(path)
        if body is None:
            return httpx.Response(404)
        if isinstance(body, int):
            return httpx.Response(body)
        if isinstance(body, str):
            return httpx.Response(200, text=body)
        return httpx.Response(200, json=body)

    return httpx.MockTransport(handler)


def link(path: str) -> dict[str, str]:
    return {"@odata.id": path}


ROOT = {"Chassis": link("/redfish/v1/Chassis")}


def test_a_redirected_chassis_is_followed_with_its_credentials():
    seen: list[httpx.Request] = []
    transport = service(
        {
            "/redfish/v1/": ROOT,
            "/redfish/v1/Chassis": {"Members": [link("/redfish/v1/Chassis/gpu-node")]},
            f"/redfish/v1/Chassis/{UUID}": {
                "Id": UUID,
                "Power": link(f"/redfish/v1/Chassis/{UUID}/Power"),
            },
            f"/redfish/v1/Chassis/{UUID}/Power": {
                "PowerControl": [{"MemberId": "0", "PowerConsumedWatts": 0}]
            },
        },
        redirects={"/redfish/v1/Chassis/gpu-node": f"/redfish/v1/Chassis/{UUID}"},
        seen=seen,
    )
    source = RedfishSource(
        url="https://bmc.example",
        username="admin",
        password="pw",
        auth="basic",
        chassis="gpu-node",
        transport=transport,
    )
    with source:
        assert source.read().watts == 0.0  # a real 0 W reading is kept, not taken for "none"
    assert f"chassis {UUID}" in source.description
    redirected = [r for r in seen if r.url.path == f"/redfish/v1/Chassis/{UUID}"]
    expected = "Basic " + base64.b64encode(b"admin:pw").decode()
    assert redirected
    assert redirected[0].headers["Authorization"] == expected


def test_discovery_skips_chassis_without_power_and_warns_when_several_have_it(caplog):
    caplog.set_level(logging.WARNING, logger="tokenwatt.power.redfish")
    env = {"PowerWatts": {"Reading": 1234.5}}
    transport = service(
        {
            "/redfish/v1/": ROOT,
            "/redfish/v1/Chassis": {
                "Members": [
                    link("/redfish/v1/Chassis/Enclosure.Internal.0-1"),
                    link("/redfish/v1/Chassis/System.Embedded.1"),
                    link("/redfish/v1/Chassis/PSU.Slot.1"),
                ]
            },
            "/redfish/v1/Chassis/Enclosure.Internal.0-1": {"Id": "Enclosure.Internal.0-1"},
            "/redfish/v1/Chassis/System.Embedded.1": {
                "Id": "System.Embedded.1",
                "EnvironmentMetrics": link(
                    "/redfish/v1/Chassis/System.Embedded.1/EnvironmentMetrics"
                ),
            },
            "/redfish/v1/Chassis/System.Embedded.1/EnvironmentMetrics": env,
            "/redfish/v1/Chassis/PSU.Slot.1": {
                "Id": "PSU.Slot.1",
                "Power": link("/redfish/v1/Chassis/PSU.Slot.1/Power"),
            },
        }
    )
    with RedfishSource(url="https://bmc.example/redfish/v1/", transport=transport) as source:
        assert source.read().watts == 1234.5
    assert source.chassis_path == "/redfish/v1/Chassis/System.Embedded.1"
    assert "2 chassis have power resources" in caplog.text
    assert "set power.chassis to choose" in caplog.text


def test_unusable_answers_are_errors_naming_the_url():
    resources: dict[str, object] = {
        "/redfish/v1/": ROOT,
        "/redfish/v1/Chassis": {"Members": [link("/redfish/v1/Chassis/1")]},
        "/redfish/v1/Chassis/1": {"EnvironmentMetrics": link("/redfish/v1/Chassis/1/EM")},
        "/redfish/v1/Chassis/1/EM": {"PowerWatts": {"Reading": 300}},
    }
    source = RedfishSource(url="https://bmc.example", transport=service(resources))
    source.open()
    resources["/redfish/v1/Chassis/1/EM"] = {"PowerWatts": {"Reading": None}}
    with pytest.raises(
        PowerError, match=r"no power reading at /redfish/v1/Chassis/1/EM \(got None\)"
    ):
        source.read()
    resources["/redfish/v1/Chassis/1/EM"] = "<html>maintenance</html>"
    with pytest.raises(PowerError, match="with something that is not JSON"):
        source.read()
    resources["/redfish/v1/Chassis/1/EM"] = 503
    with pytest.raises(
        PowerError, match="HTTP 503 from BMC at https://bmc.example/redfish/v1/Chassis/1/EM"
    ):
        source.read()
    source.close()


def test_session_mode_refuses_a_bmc_without_sessions():
    transport = service({"/redfish/v1/": ROOT})
    source = RedfishSource(
        url="https://bmc.example", username="u", password="p", auth="session", transport=transport
    )
    with pytest.raises(PowerError, match="gave no session token .* set power.auth: basic"):
        source.open()

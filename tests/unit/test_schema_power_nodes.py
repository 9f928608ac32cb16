"""``power.nodes``: a server spanning nodes, one meter per node (spec validation and dumps)."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from tests import factories
from tokenwatt import redact, store
from tokenwatt.power import build_source
from tokenwatt.schema.spec import PowerSourceSpec, PowerSpec, Spec


def bmc(name: str, port: int, **kw: Any) -> dict[str, Any]:
    return {"name": name, "source": "redfish", "url": f"https://127.0.0.1:{port}", **kw}


TWO_BMCS = [bmc("node-a", 8443), bmc("node-b", 9443)]


def refused(power: dict[str, Any], **sections: Any) -> str:
    with pytest.raises(ValidationError) as info:
        Spec.model_validate(factories.spec_dict(power=power, **sections))
    return str(info.value)


def test_two_bmcs_are_a_sum_over_nodes():
    spec = factories.spec(
        power={
            "sampling_hz": 5,
            "nodes": [
                bmc("node-a", 8443, username="root", password_env="BMC_A_PASS"),
                bmc("node-b", 9443, username="root", password_env="BMC_B_PASS"),
            ],
        }
    )
    assert spec.power.kind == "nodes"
    assert [where for where, _ in spec.power.meters] == ["power.nodes[0]", "power.nodes[1]"]
    assert spec.power.password_envs == ("BMC_A_PASS", "BMC_B_PASS")
    assert spec.power.nodes is not None
    assert [n.reading_scope for n in spec.power.nodes] == ["node", "node"]


def test_a_single_source_is_what_it_was():
    power = PowerSpec(source="redfish", url="https://bmc", username="u", password_env="BMC_PASS")
    assert power.kind == "redfish"
    assert power.meters == (("power", power),)
    assert power.password_envs == ("BMC_PASS",)
    # no 'nodes' key in its dumps: files written for one source are unchanged
    assert "nodes" not in power.model_dump()
    assert list(power.model_dump())[:3] == ["source", "sampling_hz", "url"]


def test_a_nodes_spec_dumps_without_the_meter_fields_and_reads_back():
    spec = factories.spec(power={"sampling_hz": 5, "nodes": TWO_BMCS})
    dumped = spec.model_dump()["power"]
    assert list(dumped) == ["sampling_hz", "nodes"]
    # every field written out, as a run file writes its spec, and read back: the same spec
    assert Spec.model_validate(spec.model_dump()) == spec
    assert store.filled(spec) == spec
    assert Spec.model_validate_json(spec.model_dump_json()) == spec


@pytest.mark.parametrize(
    ("beside", "named"),
    [
        ({"source": "redfish"}, "'source'"),
        ({"source": "board"}, "'source'"),  # the default, written: refused all the same
        ({"url": "https://bmc"}, "'url'"),
        ({"password_env": "BMC_PASS", "username": "root"}, "'username', 'password_env'"),
        ({"verify_tls": True}, "'verify_tls'"),
    ],
)
def test_a_meter_field_beside_nodes_is_refused_by_name(beside, named):
    message = refused({**beside, "nodes": TWO_BMCS})
    assert f"{named} set beside 'nodes'" in message
    assert "move" in message
    assert message.count("Value error") == 1  # one error, not one per field or per node


def test_an_assignment_is_checked_by_the_values_it_leaves():
    power = factories.spec(power={"nodes": TWO_BMCS}).power
    power.sampling_hz = 4  # every field is validated again, the meter defaults with it
    assert power.sampling_hz == 4
    single = PowerSpec(source="redfish", url="https://bmc")
    with pytest.raises(ValidationError, match="'source', 'url' set beside 'nodes'"):
        single.nodes = power.nodes


@pytest.mark.parametrize(
    ("nodes", "needle"),
    [
        ([bmc("node-a", 1), bmc("node-a", 2)], "names node-a twice"),
        ([bmc("only", 1)], "at least 2 items"),
        ([{"name": "node-a", "url": "https://a"}, bmc("node-b", 2)], "source\n  Field required"),
        ([bmc("node-a", 1), {"name": "node-b", "source": "redfish"}], "needs 'url'"),
        ([bmc("node-a", 1), bmc("node-b", 2, username="root")], "password_env"),
        ([bmc("node-a", 1), bmc("node-b", 2, password_env="hunter2")], "environment variable"),
        ([bmc("node-a", 1), bmc("node-b", 2, host="bmc-b")], "only used by power source ipmi"),
        ([bmc("node-a", 1), bmc("node-b", 2, sampling_hz=10)], "Extra inputs are not permitted"),
        ([bmc("node a", 1), bmc("node-b", 2)], "String should match pattern"),
        ([bmc("a", 1), {"name": "b", "source": "none"}], "source 'none'"),
        ([bmc("a", 1), bmc("b", 1)], "a and b read the same meter"),
        (
            [
                {"name": "a", "source": "command", "command": "x", "scope": "board"},
                {"name": "b", "source": "board"},
                {"name": "c", "source": "board"},
            ],
            "b, c all have source 'board'",
        ),
    ],
)
def test_each_node_is_checked(nodes, needle):
    assert needle in refused({"nodes": nodes})


def test_nodes_that_cover_different_things_are_refused():
    message = refused(
        {
            "nodes": [
                bmc("node-a", 1),
                {"name": "node-b", "source": "prometheus", "url": "http://b:9400/metrics"},
            ]
        }
    )
    assert "cover different things (node-a: node, node-b: board)" in message
    assert "same scope" in message


def test_board_scope_on_every_node_is_accepted():
    spec = factories.spec(
        power={
            "nodes": [
                {"name": "here", "source": "board"},
                {"name": "there", "source": "prometheus", "url": "http://there:9400/metrics"},
                {"name": "third", "source": "command", "command": "x", "scope": "board"},
            ]
        }
    )
    assert spec.power.nodes is not None
    assert {n.reading_scope for n in spec.power.nodes} == {"board"}


def test_nvml_on_other_machines_is_read_there():
    # One board node is this machine; the others name the Ray node that reads NVML there.
    spec = factories.spec(
        power={
            "nodes": [
                {"name": "here", "source": "board"},
                {"name": "n2", "source": "board", "ray_node": "10.0.0.2"},
                {"name": "n3", "source": "board", "ray_node": "10.0.0.3"},
            ]
        }
    )
    assert spec.power.nodes is not None
    assert [n.ray_node for n in spec.power.nodes] == [None, "10.0.0.2", "10.0.0.3"]


def test_the_engine_checks_apply_to_each_node():
    board = [
        {"name": "a", "source": "board"},
        {"name": "b", "source": "command", "command": "x", "scope": "board"},
    ]
    message = refused({"nodes": board}, hardware={"adapter": "none"})
    assert "power.nodes[0].source 'board' reads NVML and needs hardware.adapter 'nvidia'" in message
    exporters = [
        {"name": "a", "source": "prometheus", "url": "http://a:9400/metrics"},
        {"name": "b", "source": "prometheus"},
    ]
    message = refused({"nodes": exporters})
    assert "power.nodes[1].source 'prometheus' needs power.nodes[1].url" in message


def test_the_spec_scope_agrees_with_each_source_built_from_it():
    meters = [
        PowerSourceSpec(source="board"),
        PowerSourceSpec(source="redfish", url="https://bmc"),
        PowerSourceSpec(source="ipmi", host="bmc"),
        PowerSourceSpec(source="prometheus", url="http://x:9400/metrics"),
        PowerSourceSpec(source="command", command="echo 1"),
        PowerSourceSpec(source="command", command="echo 1", scope="board"),
        PowerSourceSpec(source="none"),
    ]
    for meter in meters:
        assert build_source(meter, env={}).scope == meter.reading_scope, meter.source


def test_every_node_password_is_a_secret_to_redact():
    spec = factories.spec(
        power={
            "nodes": [
                bmc("a", 1, username="root", password_env="TW_BMC_A"),
                bmc("b", 2, username="root", password_env="TW_BMC_B"),
            ]
        }
    )
    env = {"TW_BMC_A": "Xq7-node-a-pass", "TW_BMC_B": "Zr9-node-b-pass"}
    assert redact.spec_secrets(spec, env) == [
        ("TW_BMC_A", "Xq7-node-a-pass"),
        ("TW_BMC_B", "Zr9-node-b-pass"),
    ]

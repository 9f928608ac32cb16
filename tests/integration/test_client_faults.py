"""Faults no real server makes on demand, over real sockets (tests/faultserver.py)."""

import asyncio
import time

import pytest

from tests import factories
from tests.peers import free_port
from tokenwatt.client.openai import GenerationRequest, OpenAIClient
from tokenwatt.errors import EndpointError

pytestmark = pytest.mark.anyio

REQUEST = GenerationRequest(index=0, max_tokens=6, input_tokens=3, prompt_ids=[5, 6, 7])


def engine(**kw):
    return factories.spec(engine={"endpoint": "http://127.0.0.1:1/v1", "model": "m", **kw}).engine


async def one(url, *, transport="fast", timeout_s=5.0, request=REQUEST, **kw):
    async with OpenAIClient(
        engine(**kw), base_url=url, transport=transport, request_timeout_s=timeout_s
    ) as client:
        return await client.generate(request)


# fault -> (status, what the error says)
EXPECTED = {
    "ok": ("ok", None),
    "cut": ("connection_error", "mid-response, after 3 content chunks"),
    "garbage": ("malformed_stream", "not an HTTP/1.x response"),
    "garbage_sse": ("malformed_stream", "not JSON"),
    "http500": ("http_error", "HTTP 500: engine crashed"),
    "error_after_headers": ("server_error", "EngineDeadError"),
    "error_event_type": ("server_error", "overloaded"),
    "no_done": ("ok", None),
    "no_finish": ("malformed_stream", "without [DONE] or a finish_reason"),
    "no_usage": ("ok", None),
    "usage_on_final": ("ok", None),
    "short": ("short_output", "3 output tokens of the 6"),
    "long": ("ok", None),
    "multi_token_events": ("ok", None),
    "inflated_usage": ("ok", None),  # plausible alone: the probe's token audit catches it
    "crlf_bytewise": ("ok", None),
    "close_delimited": ("ok", None),
    "content_length": ("ok", None),
    "bad_chunk": ("malformed_stream", "bad chunk size"),
    "json_body": ("malformed_stream", "not an event stream"),
    "comments": ("ok", None),
    "informational": ("ok", None),
    "chunk_extensions": ("ok", None),
    "huge_head": ("malformed_stream", "response head larger than 64 KiB"),
    "trailing_bytes": ("ok", None),
    "http10_keep_alive": ("ok", None),
    "http10": ("ok", None),
}


@pytest.mark.parametrize("fault", sorted(EXPECTED))
async def test_fast_transport_faults(fault_server, fault):
    status, message = EXPECTED[fault]
    result = await one(fault_server.base_url(fault))
    assert result.status == status, result.error
    if message:
        assert message in result.error
    else:
        assert result.error is None
    assert result.ok == (status == "ok")


@pytest.mark.parametrize(
    "fault",
    [
        "ok",
        "cut",
        "http500",
        "error_after_headers",
        "no_done",
        "short",
        "crlf_bytewise",
        "comments",
    ],
)
async def test_httpx_transport_agrees(fault_server, fault):
    result = await one(fault_server.base_url(fault), transport="httpx")
    assert result.status == EXPECTED[fault][0], result.error


async def test_httpx_transport_garbage_fails(fault_server):
    result = await one(fault_server.base_url("garbage"), transport="httpx")
    assert result.status in ("malformed_stream", "connection_error")


async def test_token_counts_by_server_shape(fault_server):
    no_usage = await one(fault_server.base_url("no_usage"))
    assert (no_usage.output_tokens, no_usage.output_tokens_approx) == (6, True)
    final = await one(fault_server.base_url("usage_on_final"))
    assert (final.output_tokens, final.output_tokens_approx, final.input_tokens) == (6, False, 3)
    multi = await one(fault_server.base_url("multi_token_events"))
    assert multi.output_tokens == 6
    assert multi.content_events == 3
    assert multi.usage_mismatch
    long = await one(fault_server.base_url("long"))
    assert long.output_tokens == 7
    assert long.output_length_violation
    short = await one(fault_server.base_url("short"))
    assert short.output_length_violation


@pytest.mark.parametrize("transport", ["fast", "httpx"])
@pytest.mark.parametrize("fault", ["stall", "stall_head"])
async def test_stall_past_the_timeout(fault_server, transport, fault):
    start = time.monotonic()
    result = await one(fault_server.base_url(fault), transport=transport, timeout_s=0.4)
    elapsed = time.monotonic() - start
    assert result.status == "timeout"
    assert "0.4 s" in result.error
    assert 0.35 < elapsed < 2.0
    assert result.e2e_ms == pytest.approx(400, abs=150)


@pytest.mark.parametrize("transport", ["fast", "httpx"])
async def test_connection_refused(transport):
    start = time.monotonic()
    result = await one(f"http://127.0.0.1:{free_port()}/v1", transport=transport)
    assert result.status == "connection_error"
    assert time.monotonic() - start < 2.0


async def test_keep_alive_reuses_one_connection(fault_server):
    before = fault_server.connections
    async with OpenAIClient(engine(), base_url=fault_server.base_url("ok")) as client:
        for _ in range(5):
            assert (await client.generate(REQUEST)).ok
    assert fault_server.connections - before == 1


@pytest.mark.parametrize(
    ("fault", "connections"),
    [
        ("ok", 1),
        ("http10_keep_alive", 1),  # HTTP/1.0 keeps the connection only when it says so
        ("http10", 3),
        ("trailing_bytes", 3),  # bytes after a response: the connection is out of step
    ],
)
async def test_a_connection_is_reused_only_when_its_response_allows(
    fault_server, fault, connections
):
    before = fault_server.connections
    async with OpenAIClient(engine(), base_url=fault_server.base_url(fault)) as client:
        results = [await client.generate(REQUEST) for _ in range(3)]
    assert [r.status for r in results] == ["ok"] * 3, [r.error for r in results]
    assert fault_server.connections - before == connections


async def test_server_closing_a_kept_alive_connection_is_retried_once(fault_server):
    # The server drops the connection when the second request arrives on it: nothing was
    # processed, so the client resends on a fresh connection and the user sees no error.
    before = fault_server.connections
    async with OpenAIClient(engine(), base_url=fault_server.base_url("close_on_reuse")) as client:
        results = [await client.generate(REQUEST) for _ in range(3)]
    assert [r.status for r in results] == ["ok", "ok", "ok"]
    assert fault_server.connections - before == 3


async def test_many_faults_at_once_none_lost(fault_server):
    faults = ["ok", "cut", "http500", "garbage", "short", "no_finish"] * 20
    async with OpenAIClient(engine(), base_url=fault_server.base_url("ok")) as client:
        clients = {
            f: OpenAIClient(engine(), base_url=fault_server.base_url(f)) for f in set(faults)
        }
        for c in clients.values():
            await c.__aenter__()
        try:
            results = await asyncio.gather(*(clients[f].generate(REQUEST) for f in faults))
        finally:
            for c in clients.values():
                await c.aclose()
        assert client.in_flight == 0
    assert len(results) == len(faults)
    for fault, result in zip(faults, results, strict=True):
        assert result.status == EXPECTED[fault][0]


async def test_discovery_against_a_server_without_version(fault_server):
    async with OpenAIClient(engine(), base_url=fault_server.base_url("ok")) as client:
        assert await client.models() == ["fault"]
        assert await client.max_model_len("fault") == 2048
        assert await client.max_model_len("other") is None
        version, source = await client.server_version()
    assert version is None
    assert source.startswith("not reported (tried GET /version")


async def test_models_on_a_dead_server_is_an_endpoint_error():
    async with OpenAIClient(engine(), base_url=f"http://127.0.0.1:{free_port()}/v1") as client:
        with pytest.raises(EndpointError, match="is the server running"):
            await client.models()


async def test_api_key_from_the_named_variable(fault_server):
    with pytest.raises(EndpointError, match="TW_TEST_KEY"):
        OpenAIClient(engine(api_key_env="TW_TEST_KEY"), env={})
    result = None
    async with OpenAIClient(
        engine(api_key_env="TW_TEST_KEY"),
        base_url=fault_server.base_url("ok"),
        env={"TW_TEST_KEY": "sk-secret"},
    ) as client:
        result = await client.generate(REQUEST)
    assert result.ok
    assert fault_server.last_headers["authorization"] == "Bearer sk-secret"


async def test_cancelled_generate_closes_the_request(fault_server):
    async with OpenAIClient(engine(), base_url=fault_server.base_url("stall")) as client:
        task = asyncio.ensure_future(client.generate(REQUEST))
        await asyncio.sleep(0.1)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert client.in_flight == 0


async def test_sim_endpoint_needs_a_url():
    with pytest.raises(EndpointError, match="simulator"):
        OpenAIClient(factories.spec(engine={"endpoint": "sim", "model": "m"}).engine)

"""The simulator's API shapes and metric names against a real vLLM (0.32, CPU build).

Whatever scrapes or parses vLLM must work unchanged on the simulator: same metric names and
types, same places for ``usage``, ``[DONE]``, errors and ``/v1/models`` fields.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.integration.sse import Streamed, stream
from tokenwatt import promtext
from tokenwatt.schema.spec import SimSpec
from tokenwatt.sim.launch import SimSettings, launch

pytestmark = [pytest.mark.peer, pytest.mark.slow]

# Series tokenwatt (and dashboards built for vLLM) read; both servers must have every one.
REQUIRED = {
    "vllm:num_requests_running": "gauge",
    "vllm:num_requests_waiting": "gauge",
    "vllm:kv_cache_usage_perc": "gauge",
    "vllm:prompt_tokens_total": "counter",
    "vllm:generation_tokens_total": "counter",
    "vllm:time_to_first_token_seconds": "histogram",
    "vllm:inter_token_latency_seconds": "histogram",
    "vllm:e2e_request_latency_seconds": "histogram",
    "vllm:request_success_total": "counter",
    "vllm:num_preemptions_total": "counter",
    "vllm:prefix_cache_queries_total": "counter",
    "vllm:prefix_cache_hits_total": "counter",
    "vllm:cache_config_info": "gauge",
}


@pytest.fixture(scope="module")
def pair(vllm_server, shared: Path) -> Iterator[tuple[str, str]]:
    """(vLLM root URL, simulator root URL), both serving a model called "tiny" of 4,096 tokens."""
    settings = SimSettings(
        config_file=shared / "data" / "models" / "meta-llama__Llama-3.1-8B" / "config.json",
        served_model_name="tiny",
        sim=SimSpec(max_model_len=4096),
    )
    with launch(settings) as sim:
        yield vllm_server.base_url, sim.url


def types(text: str) -> dict[str, str]:
    out = {}
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(" ", 3)
            out[name] = kind
    return out


def both(pair: tuple[str, str], fn) -> tuple[Any, Any]:
    with httpx.Client(timeout=120) as client:
        return fn(client, pair[0]), fn(client, pair[1])


def test_metric_names_and_types(pair):
    real, sim = both(pair, lambda c, u: c.get(u + "/metrics").text)
    real_types, sim_types = types(real), types(sim)
    for name, kind in REQUIRED.items():
        assert real_types.get(name) == kind, f"vLLM: {name}"
        assert sim_types.get(name) == kind, f"simulator: {name}"
    for name, kind in sim_types.items():
        if name.startswith("vllm:"):
            assert real_types.get(name) == kind, f"{name} ({kind}) is not a vLLM 0.32 metric"
    # Same label names on the engine gauges, same histogram buckets.
    for name in ("vllm:num_requests_running", "vllm:kv_cache_usage_perc"):
        (r,) = [s for s in promtext.parse(real) if s.name == name]
        (s,) = [s for s in promtext.parse(sim) if s.name == name]
        assert set(r.labels) == set(s.labels) == {"engine", "model_name"}
    for hist in ("vllm:time_to_first_token_seconds", "vllm:inter_token_latency_seconds"):
        bounds = [
            sorted(float(s.labels["le"]) for s in promtext.parse(t) if s.name == f"{hist}_bucket")
            for t in (real, sim)
        ]
        assert bounds[0] == bounds[1], hist


def test_models_fields(pair):
    real, sim = both(pair, lambda c, u: c.get(u + "/v1/models").json())
    assert set(real) == set(sim)
    assert set(real["data"][0]) == set(sim["data"][0])
    assert set(real["data"][0]["permission"][0]) == set(sim["data"][0]["permission"][0])
    assert sim["data"][0]["id"] == real["data"][0]["id"] == "tiny"
    assert sim["data"][0]["max_model_len"] == real["data"][0]["max_model_len"] == 4096


def test_health(pair):
    real, sim = both(pair, lambda c, u: c.get(u + "/health"))
    assert real.status_code == sim.status_code == 200
    assert real.content == sim.content == b""


def _keys(obj: dict[str, Any]) -> set[str]:
    return set(obj)


@pytest.mark.parametrize("route", ["completions", "chat"])
def test_whole_response_shape(pair, route):
    if route == "completions":
        body = {"model": "tiny", "prompt": [1, 2, 3, 4, 5], "max_tokens": 3, "ignore_eos": True}
        path = "/v1/completions"
    else:
        body = {
            "model": "tiny",
            "messages": [{"role": "user", "content": "hi there"}],
            "max_tokens": 3,
            "ignore_eos": True,
        }
        path = "/v1/chat/completions"
    real, sim = both(pair, lambda c, u: c.post(u + path, json=body).json())
    assert _keys(real) == _keys(sim)
    assert _keys(real["choices"][0]) == _keys(sim["choices"][0])
    assert _keys(real["usage"]) == _keys(sim["usage"])
    assert real["object"] == sim["object"]
    assert real["usage"]["completion_tokens"] == sim["usage"]["completion_tokens"] == 3
    if route == "chat":
        assert _keys(real["choices"][0]["message"]) == _keys(sim["choices"][0]["message"])
    else:
        assert real["usage"]["prompt_tokens"] == sim["usage"]["prompt_tokens"] == 5


@pytest.mark.parametrize("route", ["completions", "chat"])
def test_streamed_shape(pair, route):
    if route == "completions":
        body: dict[str, Any] = {"model": "tiny", "prompt": [1, 2, 3, 4, 5]}
        path = "/v1/completions"
    else:
        body = {"model": "tiny", "messages": [{"role": "user", "content": "hi there"}]}
        path = "/v1/chat/completions"
    body.update(max_tokens=4, ignore_eos=True, stream_options={"include_usage": True})
    real, sim = both(pair, lambda c, u: stream(c, u + path, body))
    for out in (real, sim):
        assert isinstance(out, Streamed)
        assert out.done
        assert out.after_done == []
        usage = out.events[-1]
        assert usage["choices"] == []
        assert set(usage["usage"]) == {"prompt_tokens", "total_tokens", "completion_tokens"}
        assert usage["usage"]["completion_tokens"] == 4
        assert out.content_events[-1]["choices"][0]["finish_reason"] == "length"
    assert _keys(real.events[-1]) == _keys(sim.events[-1])
    real_chunk, sim_chunk = real.content_events[0], sim.content_events[0]
    assert _keys(real_chunk) == _keys(sim_chunk)
    assert _keys(real_chunk["choices"][0]) == _keys(sim_chunk["choices"][0])
    real_last, sim_last = real.content_events[-1], sim.content_events[-1]
    assert _keys(real_last["choices"][0]) == _keys(sim_last["choices"][0])
    if route == "chat":
        assert _keys(real.events[0]) == _keys(sim.events[0])
        assert real.events[0]["choices"][0]["delta"] == sim.events[0]["choices"][0]["delta"]


@pytest.mark.parametrize(
    ("body", "status"),
    [
        ({"model": "nope", "prompt": [1], "max_tokens": 2}, 404),
        ({"model": "tiny", "prompt": [1], "max_tokens": 5000}, 400),
    ],
)
def test_error_shape(pair, body, status):
    real, sim = both(pair, lambda c, u: c.post(u + "/v1/completions", json=body))
    assert real.status_code == sim.status_code == status
    r, s = real.json()["error"], sim.json()["error"]
    assert set(r) == set(s)
    assert r["type"] == s["type"]
    assert r["code"] == s["code"] == status

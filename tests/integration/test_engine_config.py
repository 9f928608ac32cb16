"""The engine's configuration as the server reports it, read over a socket (sim, real vLLM)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import pytest

from tests import factories
from tests.peers import serve_http
from tokenwatt.client.openai import OpenAIClient
from tokenwatt.engine_config import read_engine_config
from tokenwatt.schema.engine import EngineConfig
from tokenwatt.sim.launch import SimProcess, SimSettings, launch

pytestmark = [pytest.mark.anyio]


def engine(model: str):
    return factories.spec(engine={"endpoint": "http://127.0.0.1:1/v1", "model": model}).engine


async def reported(base_url: str, model: str) -> EngineConfig:
    async with OpenAIClient(engine(model), base_url=base_url) as client:
        return await read_engine_config(client, max_model_len=await client.max_model_len())


@pytest.fixture(scope="module")
def sim(repo: Path) -> Iterator[SimProcess]:
    settings = SimSettings(
        config_file=repo / "specs" / "models" / "Qwen__Qwen3-8B" / "config.json",
        served_model_name="served-model",
    )
    with launch(settings) as running:
        yield running


async def test_the_simulator_reports_its_cache_config_and_context(sim):
    config = await reported(sim.base_url, "served-model")
    assert config.metrics_source == "GET /metrics"
    assert config.max_model_len == 40960  # Qwen3-8B's max_position_embeddings
    (cache,) = config.info
    assert cache.name == "vllm:cache_config_info"
    assert cache.labels["enable_prefix_caching"] == "True"  # on by default, as in vLLM
    assert int(cache.labels["num_gpu_blocks"]) > 0


class _NoMetrics(BaseHTTPRequestHandler):
    """Serves /v1/models without max_model_len, and 404 elsewhere (no /metrics)."""

    def do_GET(self) -> None:
        if self.path == "/v1/models":
            body = json.dumps({"data": [{"id": "tiny"}]}).encode()
            self.send_response(200)
            self.send_header("content-type", "application/json")
        else:
            body = b"not found"
            self.send_response(404)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


async def test_a_server_that_reports_nothing_is_not_measured():
    with serve_http(_NoMetrics) as url:
        config = await reported(f"{url}/v1", "tiny")
    assert config.max_model_len is None
    assert config.info == []
    assert config.metrics_source == "not reported (GET /metrics answered HTTP 404)"


@pytest.mark.peer
@pytest.mark.slow
async def test_real_vllm_reports_its_cache_config(vllm_server):
    config = await reported(f"{vllm_server.base_url}/v1", "tiny")
    assert config.metrics_source == "GET /metrics"
    assert config.max_model_len == 4096
    names = [g.name for g in config.info]
    assert "vllm:cache_config_info" in names
    assert "python_info" not in names  # the interpreter, not the engine
    cache = next(g for g in config.info if g.name == "vllm:cache_config_info")
    # the fixture starts it with --no-enable-prefix-caching, and that is what it says
    assert cache.labels["enable_prefix_caching"] == "False"
    assert int(cache.labels["block_size"]) > 0

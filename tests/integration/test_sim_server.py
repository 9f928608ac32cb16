"""The simulator over real sockets: started in its own process, as ``tokenwatt measure`` does."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.integration.sse import stream
from tokenwatt import promtext
from tokenwatt.geometry import load_geometry
from tokenwatt.load.engine_metrics import parse_engine_metrics
from tokenwatt.schema.spec import SimSpec
from tokenwatt.sim.launch import SimProcess, SimSettings, launch

MODEL = "qwen3-moe"


@pytest.fixture(scope="module")
def sim(shared: Path) -> Iterator[SimProcess]:
    settings = SimSettings(
        config_file=shared / "data" / "models" / "Qwen__Qwen3-30B-A3B-FP8" / "config.json",
        kv_dtype="bf16",
        served_model_name=MODEL,
    )
    with launch(settings) as proc:
        yield proc


@pytest.fixture
def client() -> Iterator[httpx.Client]:
    with httpx.Client() as c:
        yield c


def metric(text: str, name: str, **labels: str) -> float:
    for s in promtext.parse(text):
        if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()):
            return s.value
    raise AssertionError(f"{name} {labels} not in /metrics")


def test_version_says_simulated(sim: SimProcess, client: httpx.Client):
    body = client.get(sim.url + "/version").json()
    assert body["simulated"] is True
    assert body["version"].startswith("tokenwatt-sim")
    assert body["gpu"] == "NVIDIA H100 80GB HBM3"


def test_health_and_models(sim: SimProcess, client: httpx.Client):
    health = client.get(sim.url + "/health")
    assert health.status_code == 200
    assert health.content == b""
    models = client.get(sim.base_url + "/models").json()
    assert models["object"] == "list"
    (entry,) = models["data"]
    assert entry["id"] == MODEL
    assert entry["max_model_len"] == 40960
    assert entry["object"] == "model"


def test_streamed_completion_token_ids(sim: SimProcess, client: httpx.Client):
    out = stream(
        client,
        sim.base_url + "/completions",
        {
            "model": MODEL,
            "prompt": list(range(100, 164)),
            "max_tokens": 40,
            "ignore_eos": True,
            "stream_options": {"include_usage": True},
        },
    )
    assert out.status == 200
    assert out.done
    assert out.after_done == []
    content = out.content_events
    assert len(content) == 40
    assert [c["choices"][0]["finish_reason"] for c in content[:-1]] == [None] * 39
    assert content[-1]["choices"][0]["finish_reason"] == "length"
    last = out.events[-1]
    assert last["choices"] == []
    assert last["usage"] == {"prompt_tokens": 64, "total_tokens": 104, "completion_tokens": 40}
    assert len(out.text().split()) == 40  # one word per token


def test_usage_only_when_asked(sim: SimProcess, client: httpx.Client):
    out = stream(
        client,
        sim.base_url + "/completions",
        {"model": MODEL, "prompt": [1, 2, 3], "max_tokens": 5, "ignore_eos": True},
    )
    assert out.done
    assert all("usage" not in ev for ev in out.events)
    assert len(out.content_events) == 5


def test_streamed_chat(sim: SimProcess, client: httpx.Client):
    out = stream(
        client,
        sim.base_url + "/chat/completions",
        {
            "model": MODEL,
            "messages": [{"role": "user", "content": "x" * 400}],
            "max_tokens": 12,
            "ignore_eos": True,
            "stream_options": {"include_usage": True},
        },
    )
    assert out.done
    first = out.events[0]["choices"][0]
    assert first["delta"] == {"role": "assistant", "content": ""}
    assert len(out.content_events) == 12
    assert out.events[-1]["object"] == "chat.completion.chunk"
    # 400 characters / 4 + 4 for the message + 3 for the reply
    assert out.events[-1]["usage"]["prompt_tokens"] == 107


def test_whole_completion_and_chat(sim: SimProcess, client: httpx.Client):
    comp = client.post(
        sim.base_url + "/completions",
        json={"model": MODEL, "prompt": "a" * 40, "max_tokens": 7, "ignore_eos": True},
    ).json()
    assert comp["object"] == "text_completion"
    assert comp["usage"]["prompt_tokens"] == 10
    assert comp["usage"]["completion_tokens"] == 7
    assert comp["choices"][0]["finish_reason"] == "length"
    chat = client.post(
        sim.base_url + "/chat/completions",
        json={"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3},
    ).json()
    assert chat["object"] == "chat.completion"
    assert chat["choices"][0]["message"]["role"] == "assistant"
    assert chat["usage"]["completion_tokens"] <= 3


def test_without_ignore_eos_the_model_stops_by_itself(sim: SimProcess, client: httpx.Client):
    comp = client.post(
        sim.base_url + "/completions",
        json={"model": MODEL, "prompt": "Question: 2+2?", "max_tokens": 5000},
    ).json()
    assert comp["choices"][0]["finish_reason"] == "stop"
    assert 0 < comp["usage"]["completion_tokens"] < 300


def test_stop_strings(sim: SimProcess, client: httpx.Client):
    body = {"model": MODEL, "prompt": [5, 6, 7], "max_tokens": 200, "ignore_eos": True}
    full = client.post(sim.base_url + "/completions", json=body).json()["choices"][0]["text"]
    stop = full.split()[5]  # the sixth word
    cut = client.post(sim.base_url + "/completions", json={**body, "stop": [stop]}).json()
    choice = cut["choices"][0]
    assert choice["finish_reason"] == "stop"
    assert choice["stop_reason"] == stop
    assert choice["text"] == full[: full.index(stop)]
    streamed = stream(client, sim.base_url + "/completions", {**body, "stop": stop})
    assert streamed.text() == choice["text"]
    assert streamed.content_events[-1]["choices"][0]["finish_reason"] == "stop"


@pytest.mark.parametrize(
    ("body", "status", "fragment"),
    [
        ({"model": "nope", "prompt": "x"}, 404, "does not exist"),
        ({"model": MODEL, "prompt": "x", "max_tokens": 50000}, 400, "max_model_len"),
        ({"model": MODEL, "prompt": [[1, 2], [3]]}, 400, "batched prompts"),
        ({"model": MODEL, "prompt": [1, -2]}, 400, "non-negative"),
        ({"model": MODEL}, 400, "prompt"),
        ({"model": MODEL, "prompt": "x", "n": 2}, 400, "n = 1"),
    ],
)
def test_errors_have_vllm_shape(sim: SimProcess, client: httpx.Client, body, status, fragment):
    resp = client.post(sim.base_url + "/completions", json=body)
    assert resp.status_code == status
    err = resp.json()["error"]
    assert set(err) == {"message", "type", "param", "code"}
    assert err["code"] == status
    assert fragment in err["message"]


def test_invalid_json_is_a_400(sim: SimProcess, client: httpx.Client):
    resp = client.post(
        sim.base_url + "/completions",
        content=b"{nope",
        headers={"content-type": "application/json"},
    )
    assert resp.status_code == 400
    assert "not valid JSON" in resp.json()["error"]["message"]


def test_metrics_have_vllm_and_dcgm_series(sim: SimProcess, client: httpx.Client):
    before = client.get(sim.metrics_url)
    assert before.headers["content-type"].startswith("text/plain")
    client.post(
        sim.base_url + "/completions",
        json={"model": MODEL, "prompt": list(range(3000)), "max_tokens": 50, "ignore_eos": True},
    )
    time.sleep(0.2)
    after = client.get(sim.metrics_url).text
    b = before.text
    lab = {"engine": "0", "model_name": MODEL}
    assert metric(after, "vllm:prompt_tokens_total", **lab) - metric(
        b, "vllm:prompt_tokens_total", **lab
    ) == pytest.approx(3000)
    assert metric(after, "vllm:generation_tokens_total", **lab) - metric(
        b, "vllm:generation_tokens_total", **lab
    ) == pytest.approx(50)
    assert metric(after, "vllm:time_to_first_token_seconds_count", **lab) > metric(
        b, "vllm:time_to_first_token_seconds_count", **lab
    )
    engine = parse_engine_metrics(after)
    assert engine.running == 0
    assert engine.waiting == 0
    assert engine.kv_cache_memory_bytes is not None
    assert engine.kv_cache_memory_bytes > 40e9
    # dcgm-exporter's names, units and labels
    power = [s for s in promtext.parse(after) if s.name == "DCGM_FI_DEV_POWER_USAGE"]
    assert len(power) == 1
    assert set(power[0].labels) == {"gpu", "UUID", "device", "modelName", "Hostname"}
    assert power[0].labels["UUID"].startswith("GPU-")
    assert power[0].labels["modelName"] == "NVIDIA H100 80GB HBM3"
    assert 90.0 < power[0].value <= 700.0  # the request's steps ran within the last second
    # A counter's samples are read as <name>_total (promtext): dcgm-exporter writes no suffix.
    assert "\nDCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION{" in after
    e0 = metric(b, "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION_total")
    e1 = metric(after, "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION_total")
    assert e1 > e0  # mJ, counting up
    assert metric(after, "DCGM_FI_DEV_POWER_MGMT_LIMIT") == 700.0
    assert metric(after, "DCGM_FI_DEV_CLOCKS_EVENT_REASONS") == 1.0  # idle now
    # ground truth of its own
    assert metric(after, "tokenwatt_sim_steps_total") > metric(b, "tokenwatt_sim_steps_total")
    assert metric(after, "tokenwatt_sim_read_bytes_total") > 30e9
    assert "tokenwatt_sim_scheduling_lag_seconds_bucket" in after


def test_client_gone_aborts_the_request(sim: SimProcess, client: httpx.Client):
    lab = {"engine": "0", "model_name": MODEL, "finished_reason": "abort"}
    aborted = metric(client.get(sim.metrics_url).text, "vllm:request_success_total", **lab)
    body = {"model": MODEL, "prompt": [1, 2], "max_tokens": 5000, "ignore_eos": True}
    with client.stream("POST", sim.base_url + "/completions", json={**body, "stream": True}) as r:
        for n, _ in enumerate(r.iter_lines()):
            if n > 10:
                break
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        text = client.get(sim.metrics_url).text
        if metric(text, "vllm:request_success_total", **lab) > aborted:
            break
        time.sleep(0.05)
    assert metric(text, "vllm:request_success_total", **lab) == aborted + 1
    assert parse_engine_metrics(text).running == 0


def test_decode_pace_is_the_simulated_step_time(
    sim: SimProcess, client: httpx.Client, shared: Path
):
    """One sequence alone: tokens arrive one decode step apart (weights / bandwidth + overhead).

    A window in which the simulator had to skip time (starved of CPU) is measured again.
    """
    for _ in range(3):
        lost0 = metric(client.get(sim.metrics_url).text, "tokenwatt_sim_lost_seconds_total")
        out = stream(
            client,
            sim.base_url + "/completions",
            {"model": MODEL, "prompt": [1] * 16, "max_tokens": 101, "ignore_eos": True},
        )
        lost1 = metric(client.get(sim.metrics_url).text, "tokenwatt_sim_lost_seconds_total")
        if lost1 == lost0:
            break
    times = out.content_times
    tpot = (times[-1] - times[0]) / (len(times) - 1)
    g = load_geometry(shared / "data" / "models" / "Qwen__Qwen3-30B-A3B-FP8" / "config.json")
    step = g.decode_step_bytes(batch=1, mean_context_tokens=66)
    assert step.total_bytes == pytest.approx(3.37e9, rel=0.01)  # attention + 8 experts + head
    expected = step.total_bytes / (3.35e12 * 0.70) + 0.002  # at 70 % of 3.35 TB/s, + 2 ms
    assert tpot == pytest.approx(expected, rel=0.15)


def test_stop_ends_the_process(shared: Path):
    settings = SimSettings(
        config_file=shared / "data" / "models" / "Qwen__Qwen3-8B" / "config.json"
    )
    proc = launch(settings)
    url = proc.url
    pid = proc.pid
    assert pid is not None
    assert httpx.get(url + "/health").status_code == 200
    proc.stop()
    with pytest.raises(httpx.ConnectError):
        httpx.get(url + "/health", timeout=2)
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


def test_power_cap_shows_as_sw_power_cap(shared: Path):
    """A low board limit: prefill steps hit it, clocks drop, dcgm's reason field says 0x4."""
    settings = SimSettings(
        config_file=shared / "data" / "models" / "Qwen__Qwen3-8B" / "config.json",
        sim=SimSpec(power_limit_w=330),
    )
    with launch(settings) as sim, httpx.Client(timeout=60) as client:
        body = {"prompt": [7] * 30000, "max_tokens": 2, "ignore_eos": True}
        with client.stream("POST", sim.base_url + "/completions", json={**body, "stream": True}):
            time.sleep(0.3)  # inside the first (stretched) prefill step
            during = client.get(sim.metrics_url).text
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:  # the stretched step ends, then it is counted
            after = client.get(sim.metrics_url).text
            if metric(after, "tokenwatt_sim_steps_total") >= 1:
                break
            time.sleep(0.1)
    assert metric(during, "DCGM_FI_DEV_CLOCKS_EVENT_REASONS") == 4.0
    assert metric(during, "DCGM_FI_DEV_POWER_MGMT_LIMIT") == 330.0
    # the mean of the last second: part idle (70 W) before the request, part at the cap
    assert 120.0 < metric(during, "DCGM_FI_DEV_POWER_USAGE") <= 330.0
    assert metric(after, "tokenwatt_sim_throttled_seconds_total") > 0.2

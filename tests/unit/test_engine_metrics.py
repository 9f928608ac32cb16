"""The engine's figures read from /metrics pages (vLLM, SGLang, llama.cpp), and the sampler."""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path

import pytest

from tests.peers import free_port, serve_text
from tokenwatt.load.engine_metrics import (
    RUNNING_GAUGES,
    find_running_gauge,
    parse_engine_metrics,
    sample_running_batch,
)

DATA = Path(__file__).resolve().parents[1] / "data" / "metrics"


def test_parse_engine_metrics_sums_engines():
    text = "\n".join(
        [
            'vllm:num_requests_running{engine="0",model_name="m"} 5',
            'vllm:num_requests_running{engine="1",model_name="m"} 7',
            'vllm:num_requests_waiting{engine="0",model_name="m"} 2',
            'vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.25',
            'vllm:kv_cache_usage_perc{engine="1",model_name="m"} 0.75',
            'vllm:generation_tokens_total{engine="0",model_name="m"} 100',
            'vllm:cache_config_info{block_size="16",kv_cache_memory_bytes="1000"} 1',
        ]
    )
    m = parse_engine_metrics(text)
    assert m.running == 12
    assert m.waiting == 2
    assert m.kv_cache_usage == 0.5
    assert m.generation_tokens_total == 100
    assert m.prompt_tokens_total is None
    assert m.kv_cache_memory_bytes == 1000.0
    assert parse_engine_metrics("").running is None


def test_running_gauge_sums_label_sets():
    text = (
        "# HELP vllm:num_requests_running Number of requests in model execution batches.\n"
        "# TYPE vllm:num_requests_running gauge\n"
        'vllm:num_requests_running{engine="0",model_name="tiny"} 3.0\n'
        'vllm:num_requests_running{engine="1",model_name="tiny"} 2.0\n'
        'vllm:num_requests_running_total{engine="0"} 99.0\n'
        "vllm:num_requests_waiting 7.0\n"
    )
    assert RUNNING_GAUGES[0] == "vllm:num_requests_running"
    assert parse_engine_metrics(text).running == 5.0
    assert parse_engine_metrics("vllm:num_requests_running 4\n").running == 4.0
    assert parse_engine_metrics("# nothing here\n").running is None


def test_llama_server_page():
    """A page llama.cpp's llama-server (b0, ``--metrics``) served with 3 requests decoding.

    Captured from the real server (../shared/peers/start-llama-server.sh) mid-load.
    """
    m = parse_engine_metrics((DATA / "llama-server-b0.prom").read_text())
    assert m.running == 3  # llamacpp:requests_processing
    assert m.waiting == 0  # llamacpp:requests_deferred
    assert m.prompt_tokens_total == 2664
    assert m.generation_tokens_total == 387  # llamacpp:tokens_predicted_total
    assert m.kv_cache_usage is None  # not on this page


def test_sglang_names_summed_over_dp_ranks():
    # SGLang's gauges carry a "dp" label per data-parallel rank (sglang/srt/metrics/collector.py)
    text = "\n".join(
        [
            "# TYPE sglang:num_running_reqs gauge",
            'sglang:num_running_reqs{dp="0",model_name="m"} 6.0',
            'sglang:num_running_reqs{dp="1",model_name="m"} 4.0',
            'sglang:num_queue_reqs{dp="0",model_name="m"} 3.0',
            'sglang:token_usage{dp="0",model_name="m"} 0.28',
            'sglang:generation_tokens_total{model_name="m"} 7.557572e+06',
        ]
    )
    m = parse_engine_metrics(text)
    assert m.running == 10
    assert m.waiting == 3
    assert m.kv_cache_usage == 0.28
    assert m.generation_tokens_total == 7_557_572
    assert m.prompt_tokens_total is None


def test_first_dialect_present_wins_and_is_not_added_to_another():
    # One page, one engine: a proxy that re-exports two engines' gauges is not summed across
    # dialects; vLLM's name comes first.
    text = "vllm:num_requests_running 2\nllamacpp:requests_processing 5\n"
    assert parse_engine_metrics(text).running == 2
    assert parse_engine_metrics("llamacpp:requests_processing 5\n").running == 5


def test_a_page_out_of_format_is_an_error_not_an_empty_reading():
    with pytest.raises(ValueError, match="line 2: "):
        parse_engine_metrics("vllm:num_requests_running 4\nnothing here\n")


def _window(length_s: float, *, lead_s: float = 1.0) -> tuple[int, int]:
    # The sampler sets up (event loop, HTTP client) before the window starts; with a 50 ms lead,
    # a loaded machine took longer than lead + window and the sampler never scraped at all.
    start = time.monotonic_ns() + int(lead_s * 1e9)
    return start, start + int(length_s * 1e9)


def test_sampler_reads_the_gauge_inside_the_window_only():
    values = iter(range(3, 1000, 2))

    def page() -> str:
        return f'vllm:num_requests_running{{engine="0"}} {next(values)}\n'

    samples: list[float] = []
    errors: list[str] = []
    with serve_text(page) as url:
        start, end = _window(0.5)
        asyncio.run(sample_running_batch(url, start, end, samples, errors, period_s=0.1))
        after = time.monotonic_ns()
    assert after >= end
    assert errors == []
    # One scrape every 0.1 s from the window start: at most 5 (none before the window opens or
    # after it closes), each a new value, in order. How many fewer depends on the machine's load
    # (two under a full test run beside a benchmark on two cores): at least one.
    assert 1 <= len(samples) <= 5
    assert samples == [3.0, 5.0, 7.0, 9.0, 11.0][: len(samples)]


@pytest.mark.parametrize(
    ("page", "error"),
    [
        ("vllm:num_requests_waiting 2\n", "none of vllm:num_requests_running, sglang:"),
        (
            "vllm:num_requests_running 2\nnot a metric line\n",
            "not in the Prometheus text format: line 2",
        ),
    ],
)
def test_sampler_records_unreadable_pages_as_errors(page, error):
    samples: list[float] = []
    errors: list[str] = []
    with serve_text(lambda: page) as url:
        start, end = _window(0.25)
        asyncio.run(sample_running_batch(url, start, end, samples, errors, period_s=0.1))
    assert samples == []
    assert errors
    assert all(error in e for e in errors)


def test_a_scrape_answered_after_the_window_is_a_failed_scrape_not_silence():
    # vLLM's API server on a loaded box once answered every scrape of a 14 s window late: the
    # probe said 0 samples and 0 errors, as if nobody had asked.
    def slow() -> str:
        time.sleep(0.6)
        return 'vllm:num_requests_running{engine="0"} 1\n'

    samples: list[float] = []
    errors: list[str] = []
    with serve_text(slow) as url:
        start, end = _window(0.2)
        asyncio.run(sample_running_batch(url, start, end, samples, errors, period_s=0.1))
    assert samples == []
    assert len(errors) == 1
    assert "after the window ended" in errors[0]


def test_a_scrape_unanswered_when_the_probe_ends_is_a_failed_scrape():
    asked = threading.Event()

    def stuck() -> str:
        asked.set()
        time.sleep(1.5)
        return 'vllm:num_requests_running{engine="0"} 1\n'

    samples: list[float] = []
    errors: list[str] = []

    async def probe_ends_early() -> None:
        # The probe ends while the scrape waits for its answer (not after a fixed delay: on a
        # loaded machine a 0.2 s window could close before the first scrape was sent at all).
        start, end = _window(5.0, lead_s=0.0)
        task = asyncio.create_task(
            sample_running_batch(url, start, end, samples, errors, period_s=0.1)
        )
        assert await asyncio.to_thread(asked.wait, 30.0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    with serve_text(stuck) as url:
        asyncio.run(probe_ends_early())
    assert samples == []
    assert len(errors) == 1
    assert errors[0].startswith("no answer in ")


def test_sampler_records_a_server_that_is_not_there():
    samples: list[float] = []
    errors: list[str] = []
    start, end = _window(0.2)
    url = f"http://127.0.0.1:{free_port()}/metrics"
    asyncio.run(sample_running_batch(url, start, end, samples, errors, period_s=0.1))
    assert samples == []
    assert errors
    assert errors[0].startswith("ConnectError")


@pytest.mark.parametrize(
    ("page", "why_not"),
    [
        ('vllm:num_requests_running{engine="0"} 0\n', None),
        ((DATA / "llama-server-b0.prom").read_text(), None),
        ("", "none of vllm:num_requests_running, sglang:num_running_reqs"),
        ("node_cpu_seconds_total 5\n", "none of vllm:num_requests_running"),
        ("vllm:num_requests_running 1\n<html>\n", "not in the Prometheus text format: line 2"),
    ],
)
def test_find_running_gauge(page, why_not):
    with serve_text(lambda: page) as url:
        found = asyncio.run(find_running_gauge(url))
    if why_not is None:
        assert found is None
    else:
        assert found is not None
        assert why_not in found
        assert url in found


def test_find_running_gauge_on_a_server_that_is_not_there():
    url = f"http://127.0.0.1:{free_port()}/metrics"
    found = asyncio.run(find_running_gauge(url, timeout_s=2.0))
    assert found is not None
    assert found.startswith(f"GET {url}: ConnectError")

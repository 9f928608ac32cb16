"""The engine's figures read from vLLM-named /metrics pages, and the running-batch sampler."""

from __future__ import annotations

import asyncio
import time

import pytest

from tests.peers import free_port, serve_text
from tokenwatt.load.engine_metrics import RUNNING_GAUGE, parse_engine_metrics, sample_running_batch


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
    assert RUNNING_GAUGE == "vllm:num_requests_running"
    assert parse_engine_metrics(text).running == 5.0
    assert parse_engine_metrics("vllm:num_requests_running 4\n").running == 4.0
    assert parse_engine_metrics("# nothing here\n").running is None


def test_a_page_out_of_format_is_an_error_not_an_empty_reading():
    with pytest.raises(ValueError, match="line 2: "):
        parse_engine_metrics("vllm:num_requests_running 4\nnothing here\n")


def _window(length_s: float, *, lead_s: float = 0.05) -> tuple[int, int]:
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
    # One scrape every 0.1 s from the window start: about 5, each a new value, in order.
    assert 3 <= len(samples) <= 5
    assert samples == [3.0, 5.0, 7.0, 9.0, 11.0][: len(samples)]


@pytest.mark.parametrize(
    ("page", "error"),
    [
        ("vllm:num_requests_waiting 2\n", "vllm:num_requests_running not found in http://"),
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


def test_sampler_records_a_server_that_is_not_there():
    samples: list[float] = []
    errors: list[str] = []
    start, end = _window(0.2)
    url = f"http://127.0.0.1:{free_port()}/metrics"
    asyncio.run(sample_running_batch(url, start, end, samples, errors, period_s=0.1))
    assert samples == []
    assert errors
    assert errors[0].startswith("ConnectError")

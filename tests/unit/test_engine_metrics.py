"""The engine's figures read from vLLM-named /metrics pages."""

from __future__ import annotations

import pytest

from tokenwatt.load.engine_metrics import RUNNING_GAUGE, parse_engine_metrics


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

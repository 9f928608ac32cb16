"""Reading the engine's own configuration from its /metrics page (pure part)."""

from __future__ import annotations

from tokenwatt.engine_config import info_gauges
from tokenwatt.pages.render import engine_changes
from tokenwatt.promtext import parse
from tokenwatt.schema.engine import EngineConfig, InfoGauge

PAGE = """\
# HELP python_info Python platform information
# TYPE python_info gauge
python_info{implementation="CPython",major="3",minor="11"} 1.0
# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig
# TYPE vllm:cache_config_info gauge
vllm:cache_config_info{engine="0",enable_prefix_caching="True",block_size="128"} 1.0
# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="tiny"} 0.0
"""


def test_only_the_engines_info_gauges_are_kept_with_their_labels():
    assert info_gauges(parse(PAGE)) == [
        InfoGauge(
            name="vllm:cache_config_info",
            labels={"block_size": "128", "enable_prefix_caching": "True", "engine": "0"},
        )
    ]


def test_engine_changes_name_each_reported_setting_that_differs():
    base = EngineConfig(
        max_model_len=4096,
        info=info_gauges(parse(PAGE)),
        metrics_source="GET /metrics",
    )
    other_page = PAGE.replace('enable_prefix_caching="True"', 'enable_prefix_caching="False"')
    other = EngineConfig(
        max_model_len=8192, info=info_gauges(parse(other_page)), metrics_source="GET /metrics"
    )
    assert engine_changes(base, base) == ()
    assert engine_changes(base, other) == (
        "max_model_len: 4096 \u2192 8192",
        'vllm:cache_config_info.enable_prefix_caching: "True" \u2192 "False"',
    )

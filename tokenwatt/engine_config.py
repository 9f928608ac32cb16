"""The engine's configuration as the server reports it: read once, in pre-flight.

Three sources, each optional (a server that has none is "not measured" on the page, never an
error): the context length of the served model (``max_model_len`` on ``GET /v1/models``,
vLLM's and the simulator's field), and the ``*_info`` gauges of the engine's ``/metrics``
(vLLM's ``vllm:cache_config_info``: block size, KV dtype, prefix caching, KV-cache size...),
whose labels are the settings and whose value is always 1. Only engine-namespaced series
(``vllm:``, ``sglang:``, ``llamacpp:``: a colon in the name) are kept; ``python_info`` and other
process collectors describe the interpreter, not the engine. The version (``GET /version``) is
read by :meth:`~tokenwatt.client.openai.OpenAIClient.server_version` into the run's
environment.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from tokenwatt.client.openai import OpenAIClient
from tokenwatt.promtext import Sample, parse
from tokenwatt.schema.engine import EngineConfig, InfoGauge

__all__ = ["info_gauges", "read_engine_config"]

logger = logging.getLogger(__name__)


def info_gauges(samples: Iterable[Sample]) -> list[InfoGauge]:
    """The engine's ``*_info`` series of a parsed ``/metrics`` page, in page order."""
    return [
        InfoGauge(name=s.name, labels=dict(sorted(s.labels.items())))
        for s in samples
        if s.name.endswith("_info") and ":" in s.name
    ]


async def read_engine_config(client: OpenAIClient, *, max_model_len: int | None) -> EngineConfig:
    """What the server says about its configuration (``max_model_len`` already read)."""
    text, source = await client.metrics_text()
    info: list[InfoGauge] = []
    if text is not None:
        try:
            info = info_gauges(parse(text))
        except ValueError as exc:
            # A page that does not parse tells nothing about the configuration; the probes'
            # own scrapes report it as an error where it matters.
            logger.warning(
                "engine configuration: %s/metrics does not parse: %s", client.root_url, exc
            )
            source = f"not reported (GET /metrics does not parse: {exc})"
    logger.info(
        "engine configuration: max_model_len %s, %d info gauge(s) (%s)",
        max_model_len,
        len(info),
        source,
    )
    return EngineConfig(max_model_len=max_model_len, info=info, metrics_source=source)

"""The engine's configuration as the server itself reports it (read in pre-flight).

Written into the run file's environment and carried per config into the result, so a page can
show what a server was launched with, beside what the spec says about it.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from tokenwatt.schema.base import StrictModel

__all__ = ["EngineConfig", "InfoGauge"]


class InfoGauge(StrictModel):
    """One ``*_info`` series of the engine's ``/metrics``: its labels are the settings."""

    name: str = Field(min_length=1, description="Series name, e.g. vllm:cache_config_info")
    labels: dict[str, str] = Field(description="Label name to value, as the page wrote them")


class EngineConfig(StrictModel):
    """What the server said about its own configuration before any load.

    The version the server reported is the run's ``environment.engine_version``; it is not
    repeated here.
    """

    max_model_len: Annotated[int, Field(ge=1)] | None = Field(
        default=None,
        description="Context length the server allows for the model (GET /v1/models);"
        " null = not reported",
    )
    info: list[InfoGauge] = Field(
        default_factory=list,
        description="The engine's *_info gauges on /metrics (vLLM's cache_config_info, ...)",
    )
    metrics_source: str = Field(
        description="Where the info gauges were read, or why none were (e.g. 'GET /metrics')"
    )

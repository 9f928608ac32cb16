"""Shared pieces of every file model: the strict base class, version, closed sets and aliases."""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

__all__ = [
    "RUN_KIND",
    "SCHEMA_VERSION",
    "SIM_ENGINE",
    "EnvVarName",
    "KvDtype",
    "Num",
    "Pct",
    "PowerKind",
    "PowerSourceName",
    "Role",
    "StrictInputModel",
    "StrictModel",
    "WeightDtype",
]

SCHEMA_VERSION = 1
"""Version of the run and result file formats this tokenwatt writes and reads (absent = 1)."""

SIM_ENGINE = "tokenwatt-sim"
"""How the embedded simulator names itself (``/version``'s ``engine``, the start of its version)."""

RUN_KIND = "tokenwatt-run"
"""Value of the ``kind`` key that marks a run file."""


class StrictModel(BaseModel):
    """Base of every tokenwatt model: unknown keys are errors, NaN and infinities are refused."""

    model_config = ConfigDict(
        extra="forbid",
        allow_inf_nan=False,
        validate_assignment=True,
        validate_default=True,
        populate_by_name=False,
    )


class StrictInputModel(StrictModel):
    """Base of the models a user writes (the spec): no type coercion at all.

    Pydantic's default (lax) mode turns ``true`` into 1, ``"5"`` into 5 and ``2.0`` into 2, so
    ``window_s: true`` would become a one-second window. Here a number must be written as a
    number (an integer is accepted where a float is meant) and a boolean as a boolean.
    """

    model_config = ConfigDict(strict=True)


Num = int | float
"""A number that keeps its JSON type on a round trip (``45`` stays an int)."""

Pct = Annotated[float, Field(ge=0.0, le=100.0)]
"""A percentage between 0 and 100."""

Role = Literal["baseline", "tuned", "other"]
"""Role of a run in a comparison: ``other`` is, in the seed, a repeat of the baseline."""

PowerSourceName = Literal["board", "redfish", "ipmi", "command", "prometheus", "none"]
"""Where power readings come from (methodology page, "Power and energy")."""

PowerKind = PowerSourceName | Literal["nodes"]
"""What a run's power figures come from: one source, or ``nodes``, the sum over ``power.nodes``
(each node's own source is named in its evidence)."""

WeightDtype = Literal["fp32", "bf16", "fp16", "fp8", "int8", "int4", "fp4", "mxfp4", "nvfp4"]
"""Storage type of the weights."""

KvDtype = Literal["fp32", "bf16", "fp16", "fp8"]
"""Storage type of the KV cache."""

_ENV_NAME = re.compile(r"[A-Z_][A-Z0-9_]*")


def _check_env_name(value: str) -> str:
    """Accept only the *name* of an environment variable, never the secret itself."""
    if not _ENV_NAME.fullmatch(value) or len(value) > 128:
        raise ValueError(
            "must be the name of an environment variable (upper case letters, digits and _,"
            " e.g. OPENAI_API_KEY) that holds the secret, never the secret itself"
        )
    return value


EnvVarName = Annotated[str, AfterValidator(_check_env_name)]
"""Name of an environment variable holding a secret (API key, BMC password)."""

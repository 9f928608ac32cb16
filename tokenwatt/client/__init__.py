"""Clients of the server under test: an SSE parser and a streaming OpenAI-compatible client."""

from tokenwatt.client.openai import (
    FAILURE_CAUSES,
    GenerationRequest,
    OpenAIClient,
    PreparedRequest,
    RequestResult,
    TextCompletion,
)
from tokenwatt.client.sse import SSEDecoder, SSEEvent

__all__ = [
    "FAILURE_CAUSES",
    "GenerationRequest",
    "OpenAIClient",
    "PreparedRequest",
    "RequestResult",
    "SSEDecoder",
    "SSEEvent",
    "TextCompletion",
]

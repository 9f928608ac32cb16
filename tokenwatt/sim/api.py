"""The OpenAI-compatible request models and response shapes of the simulator (no I/O).

Response bodies copy vLLM 0.32's field for field (checked against a real vLLM by the tests):
non-streamed responses carry ``usage``; streamed ones end with a ``choices: []`` chunk holding
``usage`` (only when ``stream_options.include_usage`` is set) and then ``data: [DONE]``.

Text prompts are not tokenized: their length is estimated at 4 characters per token (the usual
figure for English with BPE vocabularies), and each chat message adds 4 tokens of template, plus
3 for the assistant's turn. Token-id prompts are exact. The text the simulator returns is English
words from a fixed passage, one word per token: plausible, not a model's answer. A completion
that asks for ``return_token_ids`` (as vLLM takes it) gets each token's id in its chunk: the
word's position in the passage plus :data:`TOKEN_ID_BASE`.
"""

from __future__ import annotations

import json
import zlib
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

__all__ = [
    "ApiError",
    "ChatMessage",
    "ChatRequest",
    "CompletionRequest",
    "GenerationParams",
    "StreamOptions",
    "TextSource",
    "chat_prompt_tokens",
    "error_body",
    "text_prompt_tokens",
]

CHARS_PER_TOKEN = 4
TOKEN_ID_BASE = 1000
"""The simulator's reply token ids are ``TOKEN_ID_BASE`` + the word's position in its passage."""
CHAT_TOKENS_PER_MESSAGE = 4
CHAT_TOKENS_PER_REPLY = 3


class ApiError(Exception):
    """A request the server refuses, with vLLM's error type and HTTP status."""

    def __init__(
        self, message: str, *, status: int = 400, param: str | None = None, kind: str = ""
    ) -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.param = param
        self.kind = kind or ("NotFoundError" if status == 404 else "BadRequestError")


def error_body(err: ApiError) -> dict[str, Any]:
    """The error JSON vLLM returns."""
    return {
        "error": {
            "message": err.message,
            "type": err.kind,
            "param": err.param,
            "code": err.status,
        }
    }


class _Request(BaseModel):
    # Clients send many sampling fields the simulator does not use (temperature, top_p,
    # repetition_penalty, logprobs...): accept and ignore them, as vLLM ignores unknown ones.
    model_config = ConfigDict(extra="allow")


class StreamOptions(_Request):
    """``stream_options`` of a request."""

    include_usage: bool | None = False
    continuous_usage_stats: bool | None = False


@dataclass(frozen=True)
class GenerationParams:
    """What generation needs from a request (the request itself, prompt and all, is dropped)."""

    stream: bool
    include_usage: bool
    stops: tuple[str, ...]
    ignore_eos: bool
    max_tokens: int | None
    min_tokens: int
    n: int
    return_token_ids: bool = False


class _Common(_Request):
    model: str | None = None
    stream: bool | None = False
    stream_options: StreamOptions | None = None
    ignore_eos: bool = False
    stop: str | list[str] | None = None
    n: int = Field(default=1, ge=1)
    max_tokens: int | None = Field(default=None, ge=1)
    min_tokens: int = Field(default=0, ge=0)
    return_token_ids: bool | None = False

    @property
    def stops(self) -> list[str]:
        """Stop strings as a list (empty strings dropped)."""
        if self.stop is None:
            return []
        items = [self.stop] if isinstance(self.stop, str) else self.stop
        return [s for s in items if s]

    @property
    def include_usage(self) -> bool:
        """Whether a streamed response ends with a usage chunk."""
        return bool(self.stream_options and self.stream_options.include_usage)

    def params(self, *, max_tokens: int | None = None) -> GenerationParams:
        """The generation parameters (``max_tokens`` replaces the request's when given)."""
        return GenerationParams(
            stream=bool(self.stream),
            include_usage=self.include_usage,
            stops=tuple(self.stops),
            ignore_eos=self.ignore_eos,
            max_tokens=max_tokens if max_tokens is not None else self.max_tokens,
            min_tokens=self.min_tokens,
            n=self.n,
            return_token_ids=bool(self.return_token_ids),
        )


class CompletionRequest(_Common):
    """``POST /v1/completions``."""

    prompt: str | list[int] | list[str] | list[list[int]]
    echo: bool | None = False

    @field_validator("prompt")
    @classmethod
    def _one_prompt(
        cls, value: str | list[int] | list[str] | list[list[int]]
    ) -> str | list[int] | list[str] | list[list[int]]:
        if isinstance(value, list):
            if not value:
                raise ValueError("prompt is empty")
            if len(value) == 1 and isinstance(value[0], str | list):
                return value[0]
            if not all(isinstance(v, int) for v in value):
                raise ValueError("batched prompts are not supported by the simulator")
        return value


class ChatMessage(_Request):
    """One chat message (text content, or a list of parts whose text parts count)."""

    role: str
    content: str | list[dict[str, Any]] | None = None


class ChatRequest(_Common):
    """``POST /v1/chat/completions``."""

    messages: list[ChatMessage] = Field(min_length=1)
    max_completion_tokens: int | None = Field(default=None, ge=1)


def text_prompt_tokens(text: str) -> int:
    """Estimated tokens of a text prompt: 4 characters per token, at least 1."""
    return max(1, round(len(text) / CHARS_PER_TOKEN))


def _content_text(content: str | list[dict[str, Any]] | None) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    return "".join(str(part.get("text", "")) for part in content if isinstance(part, dict))


def chat_prompt_tokens(messages: list[ChatMessage]) -> tuple[int, str]:
    """Estimated prompt tokens of a chat request, and its text (for seeding the reply)."""
    total = float(CHAT_TOKENS_PER_REPLY)
    texts: list[str] = []
    for m in messages:
        text = _content_text(m.content)
        texts.append(text)
        total += CHAT_TOKENS_PER_MESSAGE + len(text) / CHARS_PER_TOKEN
    return max(1, round(total)), "\n".join(texts)


_PASSAGE = (
    "The request was answered by a simulated engine running on a model of the hardware. "
    "Each token costs the time it takes to read the weights and the cache from memory, "
    "and the batch grows as more requests arrive, so the answer comes back at the pace "
    "a real server would keep. The words are chosen from this passage and mean nothing "
    "beyond it: they are here so that the stream looks like text, counts like tokens, "
    "and lets every part of the measurement run from end to end. A reviewer who reads "
    "this should look at the numbers instead, which say how many tokens the box would "
    "serve each second, how long the first token takes, and how much power it draws."
)
_WORDS: tuple[str, ...] = tuple(" " + w for w in _PASSAGE.split())
_WORDS_JSON: tuple[str, ...] = tuple(json.dumps(w) for w in _WORDS)


class TextSource:
    """The words of one response, one per token, starting at a point set by the prompt."""

    __slots__ = ("_offset",)

    def __init__(self, seed_text: str) -> None:
        self._offset = zlib.crc32(seed_text.encode("utf-8", "surrogatepass")) % len(_WORDS)

    def word(self, index: int) -> str:
        """Text of token ``index`` (0-based)."""
        return _WORDS[(self._offset + index) % len(_WORDS)]

    def token_id(self, index: int) -> int:
        """Token id of token ``index`` (0-based)."""
        return TOKEN_ID_BASE + (self._offset + index) % len(_WORDS)

    def word_json(self, index: int) -> str:
        """The same, JSON-encoded."""
        return _WORDS_JSON[(self._offset + index) % len(_WORDS)]

    def natural_length(self) -> int:
        """Tokens after which the simulated model stops on its own (without ``ignore_eos``)."""
        return 24 + (self._offset * 37) % 200


FinishReason = Literal["stop", "length", "abort"]

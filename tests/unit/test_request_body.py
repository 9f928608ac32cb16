"""The request body: msgspec writes it, and it is byte for byte what ``json.dumps`` writes."""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

import pytest

from tests import factories
from tokenwatt.client.openai import GenerationRequest, request_body
from tokenwatt.schema.spec import EngineSpec


def engine(**fields: Any) -> EngineSpec:
    data = factories.spec_dict()["engine"] | fields
    return EngineSpec.model_validate(data)


def reference(body: bytes) -> bytes:
    """The same JSON as json.dumps writes it (compact, non-ASCII escaped): what it always was."""
    return json.dumps(json.loads(body), separators=(",", ":"), ensure_ascii=True).encode("ascii")


IDS = GenerationRequest(index=0, max_tokens=32, input_tokens=512, prompt_ids=range(1000, 1512))
ASCII = GenerationRequest(index=1, max_tokens=8, input_tokens=3, prompt_text='say "hi"\n\t\x01')
UNICODE = GenerationRequest(
    index=2, max_tokens=8, input_tokens=3, prompt_text="héllo “world” \u2028 日本 \U0001f600"
)
SESSION = GenerationRequest(
    index=3,
    max_tokens=8,
    input_tokens=9,
    messages=[("user", "a"), ("assistant", "b ü"), ("user", "c")],
    keep_reply=True,
)


EXTRAS: dict[str, dict[str, Any]] = {
    "plain": {},
    "sampling": {"ignore_eos": True, "extra_body": {"top_k": 1, "temperature": 0.7}},
    "chat-kwargs": {"extra_body": {"chat_template_kwargs": {"enable_thinking": False}}},
    "odd-extra": {"extra_body": {"stop": ["ü", None], "n": 10**30, "nested": [[1.5e-7]]}},
}
CASES = [
    (api, request_, extra)
    for extra in EXTRAS
    for api, requests in (
        ("completions", [IDS, ASCII, UNICODE]),
        ("chat", [ASCII, UNICODE, SESSION]),
    )
    for request_ in requests
]


@pytest.mark.parametrize(
    ("api", "request_", "extra"), CASES, ids=[f"{a}-{r.index}-{x}" for a, r, x in CASES]
)
def test_the_body_is_what_json_dumps_writes(api, request_, extra):
    e = engine(api=api, **EXTRAS[extra])
    got = request_body(e, request_)
    assert got == reference(got)
    assert json.loads(got)["max_tokens"] == request_.max_tokens
    assert got.isascii()


def test_what_json_dumps_refuses_is_still_refused():
    # YAML reads an unquoted date as a date: the spec refuses it (test_schema_spec), and should
    # one reach a request anyway (a model built without validation), json.dumps still refuses
    # it rather than msgspec sending a string.
    with pytest.raises(ValueError, match="until is a date"):
        engine(extra_body={"until": dt.date(2026, 12, 3)})
    e = engine().model_copy(update={"extra_body": {"until": dt.date(2026, 12, 3)}})
    with pytest.raises(TypeError, match="not JSON serializable"):
        request_body(e, IDS)

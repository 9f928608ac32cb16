"""Small parts of the simulator: request parsing, text, metrics exposition, the real-time loop."""

from __future__ import annotations

import asyncio
import math
from pathlib import Path

import pytest
from pydantic import ValidationError

from tokenwatt.geometry import load_geometry
from tokenwatt.gpus import preset
from tokenwatt.schema.spec import SimSpec
from tokenwatt.sim.api import (
    ChatMessage,
    CompletionRequest,
    TextSource,
    chat_prompt_tokens,
    text_prompt_tokens,
)
from tokenwatt.sim.engine import EngineConfig, EngineCore, EngineLoop, SimRequest
from tokenwatt.sim.metrics import Histogram, MetricsWriter, format_value


def test_text_prompt_estimate():
    assert text_prompt_tokens("") == 1
    assert text_prompt_tokens("abcd" * 25) == 25
    assert text_prompt_tokens("abcdef") == 2  # 1.5 rounds to 2


def test_chat_prompt_estimate():
    messages = [
        ChatMessage(role="system", content="x" * 40),
        ChatMessage(role="user", content=[{"type": "text", "text": "y" * 8}]),
    ]
    tokens, text = chat_prompt_tokens(messages)
    # 3 for the reply + (4 + 10) + (4 + 2)
    assert tokens == 23
    assert text == "x" * 40 + "\n" + "y" * 8


def test_text_source_is_deterministic_words():
    a, b = TextSource("same prompt"), TextSource("same prompt")
    words = [a.word(i) for i in range(50)]
    assert words == [b.word(i) for i in range(50)]
    assert all(w.startswith(" ") and w.strip() for w in words)
    assert a.word_json(3) == '"' + a.word(3) + '"'
    assert 24 <= a.natural_length() < 224
    assert TextSource("another prompt").word(0) != a.word(0) or (
        TextSource("another prompt").word(1) != a.word(1)
    )


def test_completion_request_prompt_forms():
    assert CompletionRequest.model_validate({"prompt": [[1, 2, 3]]}).prompt == [1, 2, 3]
    assert CompletionRequest.model_validate({"prompt": ["hi"]}).prompt == "hi"
    with pytest.raises(ValidationError, match="batched prompts"):
        CompletionRequest.model_validate({"prompt": ["a", "b"]})
    with pytest.raises(ValidationError, match="empty"):
        CompletionRequest.model_validate({"prompt": []})
    req = CompletionRequest.model_validate(
        {"prompt": "x", "stop": "END", "stream_options": {"include_usage": True}, "top_p": 0.9}
    )
    params = req.params()
    assert params.stops == ("END",)
    assert params.include_usage
    assert not params.stream


def test_histogram_and_exposition():
    h = Histogram((0.1, 1.0))
    for v in (0.05, 0.1, 0.5, 2.0):
        h.observe(v)
    assert h.cumulative() == [(0.1, 2), (1.0, 3), (math.inf, 4)]
    assert h.quantile(0.5) == 0.1
    assert h.quantile(0.99) == math.inf
    assert math.isnan(Histogram((1.0,)).quantile(0.5))
    w = MetricsWriter()
    w.histogram("x_seconds", "help", h, {"model_name": 'a"b'})
    w.simple("y_total", "counter", "help y", 3)
    text = w.text()
    assert "# TYPE x_seconds histogram" in text
    assert 'x_seconds_bucket{model_name="a\\"b",le="0.1"} 2.0' in text
    assert 'x_seconds_bucket{model_name="a\\"b",le="+Inf"} 4.0' in text
    assert 'x_seconds_sum{model_name="a\\"b"} 2.65' in text
    assert text.endswith("y_total 3.0\n")
    assert format_value(math.inf) == "+Inf"


def test_engine_loop_reports_lag_and_catches_up(shared: Path):
    """A stalled event loop shows up as scheduling lag, and the timeline moves on."""
    g = load_geometry(shared / "data" / "models" / "Qwen__Qwen3-8B" / "config.json")
    cfg = EngineConfig.build(geometry=g, gpu=preset("h100-sxm"), sim=SimSpec())

    async def go() -> EngineCore:
        core = EngineCore(cfg)
        loop = EngineLoop(core, max_catchup_s=0.05)
        loop.start()
        done = asyncio.Event()

        class Stall:
            def notify(self, req: SimRequest, t_s: float) -> None:
                if req.generated == 3:
                    import time

                    time.sleep(0.3)  # the event loop is blocked for 300 ms
                if req.done:
                    done.set()

        loop.submit(SimRequest(0, prompt_tokens=10, max_tokens=20, listener=Stall()))
        await asyncio.wait_for(done.wait(), timeout=10)
        await loop.stop()
        return core

    core = asyncio.run(go())
    st = core.stats
    assert st.generation_tokens == 20
    assert st.lag.count >= st.steps
    # Upper bounds are loose: a busy machine adds stalls of its own.
    assert 0.25 < st.lag_max_s < 5.0
    assert 0.2 < st.lost_s < 5.0  # the 300 ms stall, less the 50 ms the loop may catch up
    # The steps after the stall started at most max_catchup behind the clock, not 300 ms.
    assert st.lag.quantile(0.5) < 0.1


def test_engine_loop_failure_ends_requests(shared: Path, caplog):
    g = load_geometry(shared / "data" / "models" / "Qwen__Qwen3-8B" / "config.json")
    cfg = EngineConfig.build(geometry=g, gpu=preset("h100-sxm"), sim=SimSpec())
    ended: list[str | None] = []

    class Listener:
        def notify(self, req: SimRequest, t_s: float) -> None:
            if req.done:
                ended.append(req.finish_reason)

    async def go() -> EngineLoop:
        core = EngineCore(cfg)

        def broken(start_s: float):
            raise RuntimeError("scheduler bug")

        core.schedule = broken  # type: ignore[method-assign]
        loop = EngineLoop(core)
        loop.start()
        loop.submit(SimRequest(0, prompt_tokens=10, max_tokens=5, listener=Listener()))
        for _ in range(100):
            await asyncio.sleep(0.01)
            if not loop.alive:
                break
        return loop

    loop = asyncio.run(go())
    assert not loop.alive
    assert loop.failure == "RuntimeError: scheduler bug"
    assert ended == ["error"]
    assert "the simulated engine stopped" in caplog.text
    assert loop.core.stats.finished["error"] == 1

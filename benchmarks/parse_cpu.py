"""CPU per streamed event of the response parser alone, against an earlier revision's.

``tokenwatt.client._stream.StreamState`` (SSE framing of the body, JSON of the chunks, the
per-event stamps and counts) fed a 100-token vLLM-shaped completions stream with no socket and
no event loop: **batched**, the whole body in one read (as from a server with no delays), and
**spaced**, one event a read (as from a real engine). Process CPU time, best of 7 repeats (pure
CPU work: the best is the least disturbed); events are the stream's SSE events (tokens, the
usage chunk, ``[DONE]``). ``--against REV`` loads that git revision's ``_stream.py`` beside the
working tree's and times both in the same process, alternately, so that a change is measured
as a ratio on the same box at the same moment.

    .venv/bin/python benchmarks/parse_cpu.py
    .venv/bin/python benchmarks/parse_cpu.py --against HEAD~1
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

REPO = Path(__file__).resolve().parent.parent
TOKENS = 100


def _load(name: str, path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def _event(obj: object) -> bytes:
    return b"data: " + json.dumps(obj).encode() + b"\n\n"


def vllm_stream(tokens: int = TOKENS) -> list[bytes]:
    """The events of a vLLM completions stream: its tokens, the usage chunk and ``[DONE]``."""

    def chunk(finish: str | None) -> bytes:
        return _event(
            {
                "id": "cmpl-8d1c0b4a9e2f4b0c9a",
                "object": "text_completion",
                "created": 1733212345,
                "model": "tiny",
                "choices": [
                    {
                        "index": 0,
                        "text": " tok",
                        "logprobs": None,
                        "finish_reason": finish,
                        "stop_reason": None,
                    }
                ],
                "usage": None,
            }
        )

    usage = {"prompt_tokens": 16, "completion_tokens": tokens, "total_tokens": 16 + tokens}
    last = _event(
        {
            "id": "x",
            "object": "text_completion",
            "created": 1,
            "model": "tiny",
            "choices": [],
            "usage": usage,
        }
    )
    return [*(chunk(None) for _ in range(tokens - 1)), chunk("length"), last, b"data: [DONE]\n\n"]


def per_event_s(module: ModuleType, reads: list[bytes], events: int, repeats: int) -> float:
    """Best of 7: CPU seconds per event to read ``reads`` as one response."""

    def response() -> None:
        state = module.StreamState(
            index=0,
            t_send_ns=0,
            max_tokens=TOKENS,
            input_tokens_sent=16,
            ignore_eos=True,
            on_done=lambda result: None,
        )
        state.on_head(200, "OK", {"content-type": "text/event-stream"})
        for data in reads:
            state.on_body(data, 5)
        state.on_end(6)

    return _best(response, repeats) / events


def _best(work: Callable[[], None], repeats: int) -> float:
    best = float("inf")
    for _ in range(7):
        t0 = time.process_time()
        for _ in range(repeats):
            work()
        best = min(best, (time.process_time() - t0) / repeats)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--against", metavar="REV", help="git revision to compare with")
    args = parser.parse_args()
    sys.path.insert(0, str(REPO))
    modules = {"working tree": _load("stream_now", REPO / "tokenwatt/client/_stream.py")}
    if args.against:
        text = subprocess.run(
            ["git", "show", f"{args.against}:tokenwatt/client/_stream.py"],
            cwd=REPO,
            check=True,
            capture_output=True,
            text=True,
        ).stdout
        with tempfile.TemporaryDirectory() as folder:
            old = Path(folder) / "stream_then.py"
            old.write_text(text)
            modules = {args.against: _load("stream_then", old), **modules}
    events = vllm_stream()
    shapes = {"batched": ([b"".join(events)], 2000), "spaced": (events, 1000)}
    for shape, (reads, repeats) in shapes.items():
        times = {
            name: per_event_s(module, reads, len(events), repeats)
            for name, module in modules.items()
        }
        line = ", ".join(f"{name} {t * 1e6:.3f} µs" for name, t in times.items())
        if len(times) == 2:
            then, now = times.values()
            line += f" (ratio {now / then:.2f})"
        print(f"{shape}, per event: {line}")


if __name__ == "__main__":
    main()

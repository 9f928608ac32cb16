"""A small streaming client for the simulator tests: SSE events with their arrival times."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any

import httpx


@dataclass
class Streamed:
    """One streamed response: its JSON events (with arrival times) and whether [DONE] came."""

    status: int
    events: list[dict[str, Any]] = field(default_factory=list)
    times: list[float] = field(default_factory=list)
    done: bool = False
    t_send: float = 0.0
    after_done: list[str] = field(default_factory=list)

    @property
    def content_events(self) -> list[dict[str, Any]]:
        """Events that carry generated text."""
        out = []
        for ev in self.events:
            for choice in ev.get("choices", []):
                delta = choice.get("delta")
                if "text" in choice or (delta is not None and delta.get("content")):
                    out.append(ev)
        return out

    @property
    def content_times(self) -> list[float]:
        """Arrival times of the content events."""
        return [
            t
            for ev, t in zip(self.events, self.times, strict=True)
            if any(
                "text" in c or (c.get("delta") or {}).get("content") for c in ev.get("choices", [])
            )
        ]

    def text(self) -> str:
        """The generated text, joined."""
        parts = []
        for ev in self.content_events:
            for choice in ev["choices"]:
                parts.append(choice.get("text") or (choice.get("delta") or {}).get("content") or "")
        return "".join(parts)


def stream(client: httpx.Client, url: str, body: dict[str, Any]) -> Streamed:
    """POST ``body`` with ``stream: true`` and collect every ``data:`` event."""
    out = Streamed(status=0, t_send=time.monotonic())
    with client.stream("POST", url, json={**body, "stream": True}, timeout=60) as resp:
        out.status = resp.status_code
        if resp.status_code != 200:
            resp.read()
            return out
        for line in resp.iter_lines():
            if not line.startswith("data: "):
                continue
            payload = line[len("data: ") :]
            if out.done:
                out.after_done.append(payload)
            elif payload == "[DONE]":
                out.done = True
            else:
                out.events.append(json.loads(payload))
                out.times.append(time.monotonic())
    return out

"""Multi-turn sessions: one conversation's history and its next turn (pure, no I/O).

With ``workload.sessions`` each arrival of the probe's schedule starts a session; the arrival rate
counts sessions per second. Session ``i`` of stream ``s`` draws its turn count, think times, new
messages and output lengths from its own generator seeded with (seed, s, i, turn), so the same
seed gives every configuration the same sessions; the replies, and so the histories, are the
server's own.

- Turn 0 is the workload's request ``i`` (its prompt, shared prefix included, and output length).
- Turn k > 0 sends the history, every earlier prompt and the server's actual reply in order,
  then a new user message of ``sessions.new_tokens`` tokens (default: the workload's input
  lengths). Completions API: the history is the token ids, the reply's ids as the server
  returned them (vLLM's ``return_token_ids``; a reply without them ends the session, counted as
  cut, since text cannot be turned back into the ids the model saw without its tokenizer). Chat
  API: the history is the messages, each reply as an assistant message of its text.
- It is sent ``think_time_s`` after the previous reply's last byte (its scheduled send time).
- A turn that fails cuts the session: its later turns are never sent, and are counted.
- When the model's context is known, a turn whose history, new message and output would not fit
  gets fewer output tokens; one that cannot fit a single output token is not sent and the
  session ends there (counted as ended by the context, not as cut).
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from tokenwatt.client.openai import GenerationRequest, RequestResult
from tokenwatt.load.workload import Workload, draw_count
from tokenwatt.schema.spec import ExponentialSeconds, SessionSpec, ThinkTime, UniformSeconds

__all__ = [
    "CHAT_TOKENS_PER_TURN",
    "Conversation",
    "SessionEnd",
    "SessionTally",
    "draw_seconds",
    "mean_seconds",
]

_SESSION_KEY = 0x53455353  # separates a session's draws from its first request's
_THINK_KEY = 0x5448494E  # separates a turn's think time from its lengths and new message

CHAT_TOKENS_PER_TURN = 8
"""Chat API: template tokens allowed per turn (a reply and a new message) when a turn's history
is fitted to the context; the history itself is the server's count of the last turn."""

SessionEnd = Literal["completed", "context", "cut"]
"""How a session ended: every turn answered, stopped by the model's context, or cut by a
failed turn (or a reply without the token ids its next turn needs)."""


def draw_seconds(dist: ThinkTime, rng: np.random.Generator) -> float:
    """One draw of a duration (a fixed number, or a uniform or exponential distribution)."""
    if isinstance(dist, UniformSeconds):
        return float(rng.uniform(dist.min, dist.max))
    if isinstance(dist, ExponentialSeconds):
        return float(rng.exponential(dist.mean))
    return float(dist)


def mean_seconds(dist: ThinkTime) -> float:
    """The mean of a duration's distribution."""
    if isinstance(dist, UniformSeconds):
        return (dist.min + dist.max) / 2
    if isinstance(dist, ExponentialSeconds):
        return float(dist.mean)
    return float(dist)


@dataclass(slots=True)
class SessionTally:
    """What happened to the sessions of one shard (or, summed, of one probe)."""

    started: int = 0
    """Sessions whose first turn was sent."""
    completed: int = 0
    """Sessions whose every turn was answered."""
    context_ended: int = 0
    """Sessions ended early because the next turn no longer fitted the model's context."""
    cut: int = 0
    """Sessions cut by a failed turn (or a reply without token ids)."""
    unsent_turns: int = 0
    """Turns of cut sessions that were therefore never sent."""
    cut_causes: Counter[str] = field(default_factory=Counter)
    """Cut sessions by the failing turn's status (``no_token_ids``: a reply without them)."""

    def add(self, other: SessionTally) -> None:
        """Add another tally to this one."""
        self.started += other.started
        self.completed += other.completed
        self.context_ended += other.context_ended
        self.cut += other.cut
        self.unsent_turns += other.unsent_turns
        self.cut_causes.update(other.cut_causes)


class Conversation:
    """Session ``index`` of ``stream``: its planned turns, its history, its next request.

    Args:
        workload: the request stream (with ``sessions`` set).
        index: the session's position in the stream (its arrival's).
        stream: the workload stream.
    """

    __slots__ = ("_ids", "_messages", "index", "stream", "turn", "turns", "workload")

    def __init__(self, workload: Workload, index: int, *, stream: int) -> None:
        spec = workload.sessions
        if spec is None:
            raise ValueError("the workload has no sessions")
        self.workload = workload
        self.index = index
        self.stream = stream
        self.turns = max(1, draw_count(spec.turns, self._rng(0)))
        self.turn = 0
        """The turn sent last."""
        self._ids: list[int] = []
        self._messages: list[tuple[str, str]] = []

    @property
    def spec(self) -> SessionSpec:
        """The workload's session section."""
        assert self.workload.sessions is not None
        return self.workload.sessions

    def _rng(self, turn: int, key: int = _SESSION_KEY) -> np.random.Generator:
        seq = np.random.SeedSequence([self.workload.seed, self.stream, self.index, key, turn])
        return np.random.Generator(np.random.PCG64(seq))

    def first(self) -> GenerationRequest:
        """Turn 0: the workload's request ``index``, marked as a kept-reply turn."""
        request = self.workload.request(self.index, stream=self.stream)
        if request.prompt_ids is not None:
            self._ids = list(request.prompt_ids)
        else:
            self._messages = [("user", request.prompt_text or "")]
        return dataclasses.replace(request, turn=0, keep_reply=True)

    def think_time_s(self, turn: int) -> float:
        """The pause before turn ``turn`` (> 0) is sent, s."""
        return max(0.0, draw_seconds(self.spec.think_time_s, self._rng(turn, _THINK_KEY)))

    def after(
        self, reply: RequestResult
    ) -> GenerationRequest | SessionEnd | Literal["no_token_ids"]:
        """The next turn after a successful reply to the last one, or how the session ends.

        ``"no_token_ids"``: a completions reply without its token ids (the session is cut).
        """
        if reply.turn != self.turn:
            raise ValueError(f"reply to turn {reply.turn}, expected turn {self.turn}")
        if self.turn + 1 >= self.turns:
            return "completed"
        turn = self.turn + 1
        rng = self._rng(turn)
        n_new, n_out = self.workload.turn_lengths(self.index + turn, rng)
        api = self.workload.api
        if api == "completions":
            if reply.reply_token_ids is None:
                return "no_token_ids"
            history = len(self._ids) + len(reply.reply_token_ids)
        else:
            # The server's count of the last prompt and its reply; the new message estimated.
            history = reply.input_tokens + reply.output_tokens + CHAT_TOKENS_PER_TURN
        room = self.workload.turn_room(history + n_new)
        if room is not None:
            if room < 1:
                return "context"
            n_out = min(n_out, room)
        self.turn = turn
        if api == "completions":
            assert reply.reply_token_ids is not None
            self._ids.extend(reply.reply_token_ids)
            self._ids.extend(self.workload.new_ids(n_new, rng))
            return GenerationRequest(
                index=self.index,
                max_tokens=n_out,
                input_tokens=len(self._ids),
                prompt_ids=list(self._ids),
                turn=turn,
                keep_reply=True,
            )
        self._messages.append(("assistant", reply.reply_text or ""))
        self._messages.append(("user", self.workload.new_text(n_new, rng)))
        return GenerationRequest(
            index=self.index,
            max_tokens=n_out,
            input_tokens=history + n_new,
            messages=list(self._messages),
            turn=turn,
            keep_reply=True,
        )

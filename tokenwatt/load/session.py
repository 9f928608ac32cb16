"""Multi-turn sessions: one conversation's history and its next turn (pure, no I/O).

``workload.sessions: {turns, think_time_s, new_tokens}`` turns each arrival of a probe's schedule
into a session: a conversation of ``turns`` requests (a count or a distribution, drawn per
session, at most 1,000) whose later turns resend everything said so far.

- **The rate counts sessions.** With sessions, a probe's rate (``rate_rps``, the sweep's rates
  and the SLO capacity) is **sessions per second**: sessions start by the configured arrival
  process (Poisson, gamma, constant or a trace's times), and each brings its turns. The probe's
  offered and achieved rates (client-bound check) count its window *turns* per second.
- **Turn 0** is the workload's request ``i`` (its prompt, shared prefix included, and output
  length), exactly as without sessions.
- **Turn k > 0** sends the history, every earlier prompt and the server's actual reply in order,
  then a new user message of ``new_tokens`` tokens (default: the workload's input lengths), and
  asks for an output length drawn as for any request. Completions API: the history is token
  ids, each reply as the ids the server returned (vLLM's ``return_token_ids``, which tokenwatt
  asks for on every turn; the simulator answers it too). A reply without them ends its session,
  counted as cut (``no_token_ids``): text cannot be turned back into the ids the model saw
  without its tokenizer, and re-tokenised text would not be the history the model produced. Chat
  API: the history is the messages, each reply as an assistant message holding its text.
- **Think time**: turn k is scheduled ``think_time_s`` (fixed, or ``{dist: uniform, min, max}``
  or ``{dist: exponential, mean}``, drawn per turn) after the last byte of turn k - 1's reply,
  and that scheduled time is its ``t_send`` target: its send lag is measured against it as for
  any request.
- **Window**: a turn is a window request when its *scheduled* send falls inside the window,
  whichever session it belongs to, so a session started in the warm-up contributes its later
  turns. The probe drains until every window turn has finished; as a turn can be scheduled inside
  the window until the window ends, the window is complete only after its end.
- **TTFT, TPOT, E2E** are per turn, as for any request; the request table's ``session`` and
  ``turn`` columns say which turn each row is (written only with sessions; older run files have
  neither and load as before).
- **A failed turn cuts its session**: its later turns are never sent. The failed turn is a
  request like any other (+inf in every percentile when it is a window turn), and the probe's
  ``sessions`` record counts the sessions cut (by cause) and their unsent turns, beside the
  sessions started and completed. Sessions still running when the probe ends are neither.
- **Context**: when the model's context length is known, a turn whose history, new message and
  output would not fit gets fewer output tokens, and one that cannot fit a single output token is
  not sent: its session ends there, counted as ``context_ended``, not as a failure. The chat
  history's length is the server's count of the previous turn, plus 8 tokens a turn for the
  template.
- **Same seed, same sessions**: session ``i`` of stream ``s`` draws its turn count, think times,
  new messages and output lengths from generators seeded with (seed, s, i, turn), so every
  configuration sees the same sessions; only the replies, and therefore the histories, are each
  server's own.

Not supported with sessions, and refused with a message saying so: ``sweep.early_stop`` and the
``adaptive`` sweep (both need the window's request count before the probe starts; with sessions
it depends on the replies' lengths and times), ``workload.prompts`` (first human turns cannot be
continued by synthetic messages), a trace whose ``hash_ids`` shape the prompts, and virtual time
(``tokenwatt plan``: its loop sends one request per arrival; measure sessions against the
simulator in real time).
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

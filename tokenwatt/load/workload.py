"""The deterministic request stream of a spec: prompt and output lengths, prompts, trace times.

Lengths come from, in order of precedence: ``workload.input_tokens`` / ``output_tokens`` (a fixed
count or a distribution), else the trace (``workload.trace``):

- ``chat-mix-v1`` (built in): independent log-normal input and output lengths fitted to the
  seed's published quantiles, input median 1,024 / p90 4,096 tokens and output median 256 /
  p90 1,024 tokens. Fit: a log-normal with median m and 90th percentile q has
  mu = ln m and sigma = (ln q - ln m) / z_0.9, z_0.9 = 1.2815515655446004 (the standard normal's
  90th percentile), so both quantiles are matched exactly before clipping: sigma = ln 4 / z_0.9
  = 1.0817 for both. A draw is exp(mu + sigma * N(0, 1)) rounded to the nearest integer.
- A trace file: the Azure LLM inference trace CSV (``TIMESTAMP,ContextTokens,GeneratedTokens``)
  or JSONL with one object per line, ``{"t_s": 0.0, "input_tokens": 812, "output_tokens": 41}``
  (``t_s`` optional: seconds, any origin; the Mooncake trace's ``timestamp`` in ms with
  ``input_length``/``output_length`` is read too). Rows are used in order and repeat.

Every request is clipped to the model's context: input to [1, C - 1], then output to
[1, C - input], where C is the context length the caller gives (``tokenwatt measure``: the
server's own if it reports one, else the model geometry's ``max_position_embeddings``, from
``model.geometry`` or the model's ``config.json``); without one nothing is clipped (and a warning
is logged). For the chat API, C is reduced by 32 tokens for the chat template.

Prompts: the completions API gets token ids (exact input length, no tokenizer needed) drawn
uniformly from [vocab/100, vocab - vocab/20): the lowest 1 % and highest 5 % of a vocabulary are
where special, byte and reserved tokens usually sit, and ids past the tokenizer's last token are
rejected by vLLM ("out of vocabulary"; Qwen3's config says 151,936 while its tokenizer ends at
151,668). The chat API cannot take ids, so it gets that many words from a fixed list of common
English words (about one token each; the server's usage gives the true count).

Real prompts (``workload.prompts``, a ShareGPT JSON file: ``[{"conversations": [{"from":
"human", "value": "..."}, ...]}, ...]``): each request sends the first human turn of one
conversation as text (the chat API as one user message, the completions API as a text prompt).
Each probe stream walks the file in its own seeded order (a permutation per stream), so requests
repeat only after every prompt was used once, and the same seed sends the same prompts to every
configuration. The prompt's length is **the server's count** (``usage.prompt_tokens``, recorded
per request); before sending, it is only estimated at 4 characters a token (the simulator's
rule), to clip output lengths to the context and to leave out prompts that cannot fit with one
output token (logged). Output lengths come from ``workload.output_tokens``, else the trace file's
(with ``trace_prefix: false`` for one with hash_ids), else chat-mix-v1's. A file of N prompts
repeats after N requests of a probe: a server with prefix caching then finds whole prompts in its
cache, so a long probe needs a file with more prompts than it sends.

Shared prefixes (``workload.prefix``, or a trace's ``hash_ids``) put repeated tokens before or
inside the prompts: :mod:`tokenwatt.load.prefix` (methodology, "Shared prefixes").

Multi-turn sessions (``workload.sessions``): each arrival starts a session whose later turns
resend its history with the server's replies: :mod:`tokenwatt.load.session` (methodology,
"Multi-turn sessions").

Same seed, same requests, byte for byte: request ``i`` of stream ``s`` draws from its own random
generator seeded with (seed, s, i), so any request can be made alone, in any order, in any
process. Each probe of a run uses its own stream, so prompts never repeat between probes (a
repeated prompt would be served from the prefix cache), shared prefixes included.

Content variants: a probe that sends a stream a second time (the adaptive sweep's stream pairs,
:mod:`tokenwatt.adaptive`) sends it as *variant* v > 0: the same arrival schedule, the same input
and output lengths, the same repeats of shared prefixes within the probe, but every prompt token
different, so a prefix cache serves nothing of it from the first sending. Variant v shifts every
token id by a non-zero offset drawn from (seed, v), cyclically within the id range (every word
of a chat prompt likewise within the word list); variant 0 is the stream as it always was. Real
prompts (``workload.prompts``: the text sets the length) and sessions (later turns draw their
text and lengths together) have no variants (:attr:`Workload.varies_content`).
"""

from __future__ import annotations

import csv
import datetime as dt
import json
import logging
import math
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np

from tokenwatt import bounded
from tokenwatt.client.openai import GenerationRequest
from tokenwatt.errors import SpecError
from tokenwatt.load import prefix as shared
from tokenwatt.load.arrivals import arrival_offsets, trace_offsets
from tokenwatt.schema.spec import (
    BUILTIN_WORKLOADS,
    ArrivalSpec,
    FixedTokens,
    LognormalTokens,
    PrefixSpec,
    SessionSpec,
    Spec,
    TokenCount,
    UniformTokens,
)
from tokenwatt.sim.api import text_prompt_tokens

__all__ = [
    "CHAT_MIX_V1",
    "CHAT_TEMPLATE_MARGIN_TOKENS",
    "Z90",
    "TraceRow",
    "Workload",
    "build_workload",
    "draw_count",
    "lognormal_params",
    "mean_tokens",
    "read_prompts",
    "read_trace",
    "token_id_range",
]

logger = logging.getLogger(__name__)

Z90 = 1.2815515655446004
"""The standard normal distribution's 90th percentile."""

CHAT_MIX_V1: tuple[LognormalTokens, LognormalTokens] = (
    LognormalTokens(median=1024, p90=4096),
    LognormalTokens(median=256, p90=1024),
)
"""Input and output length distributions of the built-in ``chat-mix-v1`` workload."""

CHAT_TEMPLATE_MARGIN_TOKENS = 32
"""Context kept free for the chat template when the chat API is used."""

_REQUEST_KEY = 0x52455153  # separates per-request draws from the arrival draws
_PROMPT_KEY = 0x50524F4D  # separates the prompt order of a stream from the other draws
_VARIANT_KEY = 0x56415249  # separates a content variant's offsets from the other draws

# Common English words; each is one token in the usual BPE vocabularies.
_WORD_TEXT = """
the of and to in is was for on that with as by at from his her it an were are which this be or
has had not but one all they their there been have new more can will who would other time some
two first after when also most into over only about out than many then these so may any such
made where while during through world city year years state part people used known since both
under three each well however between later around before being called high long life game
music work film war best did you we could found own just
"""
_WORDS: tuple[str, ...] = tuple(_WORD_TEXT.split())


def lognormal_params(median: float, p90: float) -> tuple[float, float]:
    """(mu, sigma) of the log-normal with this median and 90th percentile.

    Raises:
        ValueError: unless 0 < median < p90.
    """
    if not 0 < median < p90:
        raise ValueError(f"need 0 < median < p90, got median {median}, p90 {p90}")
    mu = math.log(median)
    return mu, (math.log(p90) - mu) / Z90


def token_id_range(vocab_size: int) -> tuple[int, int]:
    """Token ids are drawn from [low, high): the vocabulary minus its lowest 1 % and top 5 %."""
    if vocab_size < 2:
        raise ValueError("vocab_size must be at least 2")
    low = vocab_size // 100
    high = vocab_size - vocab_size // 20
    return low, max(high, low + 1)


@dataclass(frozen=True, slots=True)
class TraceRow:
    """One request of a trace file."""

    t_s: float | None
    input_tokens: int
    output_tokens: int
    hash_ids: tuple[int, ...] | None = None
    """The prompt's blocks (Mooncake): equal ids, identical blocks."""


def _hash_ids(value: object, where: str) -> tuple[int, ...]:
    if not isinstance(value, list) or not all(
        isinstance(h, int) and not isinstance(h, bool) and h >= 0 for h in value
    ):
        raise SpecError(f"{where}: hash_ids is not a list of non-negative integers")
    return tuple(value)


def _positive(value: object, what: str, where: str) -> int:
    try:
        number = int(str(value).strip())
    except ValueError:
        raise SpecError(f"{where}: {what} is not an integer: {value!r}") from None
    if number < 0:
        raise SpecError(f"{where}: {what} is negative: {number}")
    return max(number, 1)  # 0 tokens cannot be asked for; 1 is the nearest request


def _azure_time(text: str, where: str) -> dt.datetime:
    # "2023-11-16 18:15:46.6805900": 7 fractional digits, one more than datetime accepts.
    head, dot, frac = text.strip().partition(".")
    try:
        moment = dt.datetime.fromisoformat(head)
        if dot:
            digits = (frac + "000000")[:6]
            moment = moment.replace(microsecond=int(digits))
    except ValueError:
        raise SpecError(f"{where}: TIMESTAMP is not a date-time: {text!r}") from None
    return moment


def _read_csv(path: Path) -> list[TraceRow]:
    rows: list[TraceRow] = []
    with bounded.open_text(path, error=SpecError) as handle:
        reader = csv.DictReader(handle)
        fields = {name.strip().lower(): name for name in reader.fieldnames or []}
        need = {"contexttokens", "generatedtokens"}
        if not need <= fields.keys():
            raise SpecError(
                f"{path}: not an Azure LLM trace CSV: expected columns TIMESTAMP,"
                f"ContextTokens,GeneratedTokens, found {reader.fieldnames}"
            )
        time_field = fields.get("timestamp")
        origin: dt.datetime | None = None
        for line_no, record in enumerate(reader, start=2):
            where = f"{path}:{line_no}"
            t_s: float | None = None
            if time_field is not None:
                raw = record[time_field] or ""
                try:
                    t_s = float(raw)
                except ValueError:
                    moment = _azure_time(raw, where)
                    origin = origin or moment
                    t_s = (moment - origin).total_seconds()
                if not math.isfinite(t_s):
                    raise SpecError(f"{where}: TIMESTAMP is not a finite number: {raw!r}")
            rows.append(
                TraceRow(
                    t_s=t_s,
                    input_tokens=_positive(record[fields["contexttokens"]], "ContextTokens", where),
                    output_tokens=_positive(
                        record[fields["generatedtokens"]], "GeneratedTokens", where
                    ),
                )
            )
    return rows


def _read_jsonl(path: Path) -> list[TraceRow]:
    rows: list[TraceRow] = []
    with bounded.open_text(path, error=SpecError) as handle:
        for line_no, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            where = f"{path}:{line_no}"
            try:
                obj = bounded.parse_json_line(line)
            except ValueError as exc:
                raise SpecError(f"{where}: not JSON: {exc}") from None
            if not isinstance(obj, dict):
                raise SpecError(f"{where}: expected a JSON object per line")
            if "input_tokens" in obj:
                keys = ("input_tokens", "output_tokens")
            elif "input_length" in obj:
                keys = ("input_length", "output_length")
            else:
                raise SpecError(f"{where}: missing 'input_tokens' (and 'output_tokens')")
            if keys[1] not in obj:
                raise SpecError(f"{where}: missing {keys[1]!r}")
            t_s: float | None = None
            raw_t = obj.get("t_s", obj.get("timestamp"))
            if raw_t is not None:
                if not isinstance(raw_t, int | float) or isinstance(raw_t, bool):
                    raise SpecError(f"{where}: the timestamp is not a number: {raw_t!r}")
                t_s = float(raw_t) if "t_s" in obj else float(raw_t) / 1000.0
            raw_ids = obj.get("hash_ids")
            rows.append(
                TraceRow(
                    t_s=t_s,
                    input_tokens=_positive(obj[keys[0]], keys[0], where),
                    output_tokens=_positive(obj[keys[1]], keys[1], where),
                    hash_ids=None if raw_ids is None else _hash_ids(raw_ids, where),
                )
            )
    return rows


def read_trace(path: Path) -> list[TraceRow]:
    """Read a trace file: ``.csv`` (Azure LLM trace) or ``.jsonl``/``.json`` (one object a line).

    Raises:
        SpecError: a missing or malformed file, naming the file, line and field.
    """
    suffix = path.suffix.lower()
    try:
        if suffix == ".csv":
            rows = _read_csv(path)
        elif suffix in (".jsonl", ".json", ".ndjson"):
            rows = _read_jsonl(path)
        else:
            raise SpecError(
                f"workload.trace: {path}: unknown trace format {suffix!r}"
                " (use .csv for the Azure LLM trace, .jsonl for one request per line)"
            )
    except csv.Error as exc:
        # e.g. "field larger than field limit (131072)": a CSV that is not an Azure trace
        raise SpecError(f"workload.trace: {path}: not a readable CSV trace: {exc}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise SpecError(f"workload.trace: cannot read {path}: {exc}") from None
    if not rows:
        raise SpecError(f"workload.trace: {path} holds no requests")
    return rows


def _first_human_turn(entry: object, where: str) -> str:
    if not isinstance(entry, dict) or not isinstance(entry.get("conversations"), list):
        raise SpecError(f"{where}: not a ShareGPT entry (an object with a 'conversations' list)")
    for turn in entry["conversations"]:
        if isinstance(turn, dict) and turn.get("from") in ("human", "user"):
            value = turn.get("value")
            if not isinstance(value, str) or not value.strip():
                raise SpecError(f"{where}: its first human turn has no text ('value')")
            return value
    raise SpecError(f"{where}: no turn 'from' 'human' in its conversations")


def read_prompts(path: Path) -> list[str]:
    """The first human turn of every conversation of a ShareGPT JSON file, in file order.

    Raises:
        SpecError: an unreadable file, not a JSON array of ShareGPT entries, or an entry without
            a human turn (named by its position).
    """
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise SpecError(f"workload.prompts: {path}: cannot read: {exc}") from exc
    except ValueError as exc:
        raise SpecError(f"workload.prompts: {path}: not JSON: {exc}") from exc
    if not isinstance(data, list) or not data:
        raise SpecError(
            f"workload.prompts: {path}: expected a ShareGPT JSON array of conversations"
            ' ([{"conversations": [{"from": "human", "value": ...}]}, ...]), with at least one'
        )
    return [
        _first_human_turn(entry, f"workload.prompts: {path}: entry {i}")
        for i, entry in enumerate(data)
    ]


def _draw(dist: TokenCount | None, rng: np.random.Generator) -> int | None:
    if dist is None:
        return None
    if isinstance(dist, int):
        return dist
    if isinstance(dist, FixedTokens):
        return dist.value
    if isinstance(dist, UniformTokens):
        return int(rng.integers(dist.min, dist.max + 1))
    mu, sigma = lognormal_params(dist.median, dist.p90)
    value = round(math.exp(mu + sigma * float(rng.standard_normal())))
    value = max(value, dist.min)
    if dist.max is not None:
        value = min(value, dist.max)
    return value


def draw_count(dist: TokenCount, rng: np.random.Generator) -> int:
    """One draw of a count (a fixed number, or a distribution)."""
    value = _draw(dist, rng)
    assert value is not None
    return value


def mean_tokens(dist: TokenCount, *, draws: int = 4000) -> float:
    """The mean of a token count: exact for fixed and uniform, the mean of seeded draws else."""
    if isinstance(dist, int):
        return float(dist)
    if isinstance(dist, FixedTokens):
        return float(dist.value)
    if isinstance(dist, UniformTokens):
        return (dist.min + dist.max) / 2
    rng = np.random.Generator(np.random.PCG64(_REQUEST_KEY))
    return math.fsum(_draw(dist, rng) or 0 for _ in range(draws)) / draws


def _draw_or_row(dist: TokenCount | None, rng: np.random.Generator, row_tokens: int | None) -> int:
    """A draw from ``dist``, else the trace row's count (a workload without one has a trace)."""
    value = _draw(dist, rng)
    if value is None:
        assert row_tokens is not None
        return row_tokens
    return value


class Workload:
    """The request stream of one spec: request ``i`` of stream ``s`` is always the same.

    Build it with :func:`build_workload`. Picklable: worker processes receive a copy.
    """

    def __init__(
        self,
        *,
        name: str,
        api: Literal["completions", "chat"],
        vocab_size: int,
        seed: int,
        arrival: ArrivalSpec,
        input_dist: TokenCount | None,
        output_dist: TokenCount | None,
        rows: list[TraceRow] | None,
        context_tokens: int | None,
        prefix: PrefixSpec | None = None,
        trace_block_tokens: int | None = None,
        prompts: list[str] | None = None,
        sessions: SessionSpec | None = None,
    ) -> None:
        if rows is None and ((input_dist is None and prompts is None) or output_dist is None):
            raise ValueError("without a trace, both length distributions are needed")
        if trace_block_tokens is not None and (
            rows is None or input_dist is not None or prefix is not None or prompts is not None
        ):
            raise ValueError("trace blocks need a trace's lengths and no other prefix")
        if prompts is not None and (not prompts or input_dist is not None or prefix is not None):
            raise ValueError("real prompts need at least one prompt, no input lengths, no prefix")
        self.name = name
        self.api = api
        self.vocab_size = vocab_size
        self.seed = seed
        self.arrival = arrival
        self.input_dist = input_dist
        self.output_dist = output_dist
        self.rows = rows
        self.context_tokens = context_tokens
        self.prefix = prefix
        self.trace_block_tokens = trace_block_tokens
        self.prompts = prompts
        self.sessions = sessions
        self._orders: dict[int, list[int]] = {}  # stream -> its order of the prompts
        self._id_low, self._id_high = token_id_range(vocab_size)

    @property
    def shares_prefixes(self) -> bool:
        """Whether prompts repeat tokens (a shared prefix, or a trace's repeated blocks)."""
        return self.prefix is not None or self.trace_block_tokens is not None

    @property
    def varies_content(self) -> bool:
        """Whether a stream can be sent again as another content variant (module docstring)."""
        return self.prompts is None and self.sessions is None

    def _variant_offsets(self, variant: int) -> tuple[int, int]:
        """(token id offset, word offset) of content variant ``variant``: non-zero for v > 0.

        Raises:
            ValueError: a negative variant, or v > 0 for a workload without variants.
        """
        if variant < 0:
            raise ValueError("content variant must be non-negative")
        if variant == 0:
            return 0, 0
        if not self.varies_content:
            raise ValueError("this workload has no content variants (real prompts or sessions)")
        rng = np.random.Generator(
            np.random.PCG64(np.random.SeedSequence([self.seed, variant, _VARIANT_KEY]))
        )
        span = self._id_high - self._id_low
        if span < 2:
            raise ValueError("a vocabulary this small has no content variants")
        return int(rng.integers(1, span)), int(rng.integers(1, len(_WORDS)))

    @property
    def trace_times_s(self) -> list[float] | None:
        """The trace's timestamps, when it has one for every row."""
        if self.rows is None or any(r.t_s is None for r in self.rows):
            return None
        return [r.t_s for r in self.rows if r.t_s is not None]

    def _rng(self, index: int, stream: int) -> np.random.Generator:
        return np.random.Generator(
            np.random.PCG64(np.random.SeedSequence([self.seed, stream, index, _REQUEST_KEY]))
        )

    def _prompt_text(self, index: int, stream: int) -> str | None:
        """Request ``index``'s real prompt: stream ``stream``'s own order of the file."""
        if self.prompts is None:
            return None
        order = self._orders.get(stream)
        if order is None:
            rng = np.random.Generator(
                np.random.PCG64(np.random.SeedSequence([self.seed, stream, _PROMPT_KEY]))
            )
            order = rng.permutation(len(self.prompts)).tolist()
            self._orders[stream] = order
        return self.prompts[order[index % len(order)]]

    def _lengths(
        self, index: int, rng: np.random.Generator, text: str | None = None
    ) -> tuple[int, int]:
        row = self.rows[index % len(self.rows)] if self.rows else None
        if text is None:
            n_in = _draw_or_row(self.input_dist, rng, row.input_tokens if row else None)
        else:
            n_in = text_prompt_tokens(text)
        n_out = _draw_or_row(self.output_dist, rng, row.output_tokens if row else None)
        shared_tokens = self.prefix.shared_tokens if self.prefix is not None else 0
        n_in = shared_tokens + max(n_in, 1)  # the own part follows the shared prefix
        if self.context_tokens is not None:
            context = self.context_tokens
            if self.api == "chat":
                context -= CHAT_TEMPLATE_MARGIN_TOKENS
            context = max(context, shared_tokens + 2)  # build_workload refuses less
            n_in = min(n_in, context - 1)
            n_out = min(max(n_out, 1), context - n_in)
        return n_in, max(n_out, 1)

    def _prompt_ids(
        self, index: int, stream: int, n_in: int, rng: np.random.Generator
    ) -> list[int]:
        id_range = (self._id_low, self._id_high)
        if self.trace_block_tokens is not None:
            assert self.rows is not None
            row = self.rows[index % len(self.rows)]
            assert row.hash_ids is not None
            size = self.trace_block_tokens
            parts = [
                shared.block_tokens(
                    seed=self.seed, stream=stream, hash_id=h, count=size, id_range=id_range
                )
                for h in row.hash_ids[: -(-n_in // size)]
            ]
            ids: list[int] = np.concatenate(parts)[:n_in].tolist()
            return ids
        head: list[int] = []
        if self.prefix is not None:
            group = int(rng.integers(0, self.prefix.groups))
            count = self.prefix.shared_tokens
            head = shared.prefix_tokens(
                seed=self.seed, stream=stream, group=group, count=count, id_range=id_range
            ).tolist()
        own: list[int] = rng.integers(self._id_low, self._id_high, size=n_in - len(head)).tolist()
        return head + own

    def expected_hit_rate(self, block_tokens: int) -> float | None:
        """The prefix-cache hit rate of this workload's construction; None: no shared prefixes.

        For a cache of ``block_tokens``-token blocks (:mod:`tokenwatt.load.prefix`).
        ``workload.prefix``: steady state, every prefix cached. A trace's hash ids: one pass
        over the trace in its order from a cold cache, as a sweep sends it (request ``i`` is
        row ``i mod rows``).
        """
        if self.prefix is not None:
            if self.input_dist is not None:
                own = mean_tokens(self.input_dist)
            elif self.rows:
                own = math.fsum(r.input_tokens or 0 for r in self.rows) / len(self.rows)
            else:
                return None
            return shared.expected_hit_rate(
                groups=self.prefix.groups,
                shared_tokens=self.prefix.shared_tokens,
                own_tokens_mean=max(1.0, own),
                block_tokens=block_tokens,
            )
        if self.trace_block_tokens is not None and self.rows:
            lengths = [r.input_tokens or 0 for r in self.rows]
            if self.context_tokens is not None:
                lengths = [min(n, self.context_tokens) for n in lengths]
            return shared.trace_hit_rate(
                [r.hash_ids or () for r in self.rows],
                lengths,
                trace_block_tokens=self.trace_block_tokens,
                cache_block_tokens=block_tokens,
            )
        return None

    @property
    def mean_turns(self) -> float:
        """Mean requests per arrival: the mean turns of a session, 1 without sessions."""
        return 1.0 if self.sessions is None else max(1.0, mean_tokens(self.sessions.turns))

    def turn_lengths(self, key: int, rng: np.random.Generator) -> tuple[int, int]:
        """(new message tokens, output tokens) of a session's later turn (:mod:`.session`).

        ``sessions.new_tokens``, else the input lengths, else trace row ``key``'s input; the
        output from the output lengths, else that row's.
        """
        row = self.rows[key % len(self.rows)] if self.rows else None
        dist = self.sessions.new_tokens if self.sessions is not None else None
        n_new = _draw_or_row(
            dist if dist is not None else self.input_dist, rng, row.input_tokens if row else None
        )
        n_out = _draw_or_row(self.output_dist, rng, row.output_tokens if row else None)
        return max(n_new, 1), max(n_out, 1)

    def turn_room(self, prompt_tokens: int) -> int | None:
        """Output tokens the context leaves after a prompt of ``prompt_tokens``; None = unknown."""
        if self.context_tokens is None:
            return None
        context = self.context_tokens
        if self.api == "chat":
            context -= CHAT_TEMPLATE_MARGIN_TOKENS
        return context - prompt_tokens

    def new_ids(self, count: int, rng: np.random.Generator) -> list[int]:
        """``count`` token ids of a new message (the completions API's prompts' range)."""
        ids: list[int] = rng.integers(self._id_low, self._id_high, size=count).tolist()
        return ids

    def new_text(self, count: int, rng: np.random.Generator) -> str:
        """``count`` words of a new chat message (about one token each)."""
        return " ".join(_WORDS[w] for w in rng.integers(0, len(_WORDS), size=count).tolist())

    def mean_output_tokens(self, sample: int = 256) -> float:
        """The mean output length of the first ``sample`` requests of stream 0 (as sent)."""
        return math.fsum(self.lengths(i, stream=0)[1] for i in range(sample)) / sample

    def lengths(self, index: int, *, stream: int = 0) -> tuple[int, int]:
        """(input tokens, output tokens) of request ``index`` of ``stream``.

        With real prompts the input is the estimate (the server's count is known after sending).
        """
        return self._lengths(index, self._rng(index, stream), self._prompt_text(index, stream))

    def request(self, index: int, *, stream: int = 0, variant: int = 0) -> GenerationRequest:
        """Request ``index`` of ``stream``, with its prompt (content ``variant``: see above).

        Raises:
            ValueError: a negative index, or a variant this workload does not have.
        """
        if index < 0:
            raise ValueError("request index must be non-negative")
        id_offset, word_offset = self._variant_offsets(variant)
        rng = self._rng(index, stream)
        text = self._prompt_text(index, stream)
        n_in, n_out = self._lengths(index, rng, text)
        if text is not None:
            return GenerationRequest(
                index=index, max_tokens=n_out, input_tokens=n_in, prompt_text=text
            )
        if self.api == "chat":
            if self.shares_prefixes:
                # One word per token id: the text repeats exactly where the ids do.
                words = [i % len(_WORDS) for i in self._prompt_ids(index, stream, n_in, rng)]
            else:
                words = rng.integers(0, len(_WORDS), size=n_in).tolist()
            if word_offset:
                words = [(w + word_offset) % len(_WORDS) for w in words]
            text = " ".join(_WORDS[w] for w in words)
            return GenerationRequest(
                index=index, max_tokens=n_out, input_tokens=n_in, prompt_text=text
            )
        ids = self._prompt_ids(index, stream, n_in, rng)
        if id_offset:
            low, span = self._id_low, self._id_high - self._id_low
            ids = [low + (i - low + id_offset) % span for i in ids]
        return GenerationRequest(index=index, max_tokens=n_out, input_tokens=n_in, prompt_ids=ids)

    def requests(
        self, *, stream: int = 0, start: int = 0, step: int = 1, variant: int = 0
    ) -> Iterator[GenerationRequest]:
        """Requests ``start``, ``start + step``, ... of ``stream``, without end."""
        index = start
        while True:
            yield self.request(index, stream=stream, variant=variant)
            index += step

    def arrivals(self, rate_rps: float, *, stream: int = 0) -> Iterator[float]:
        """Arrival offsets (s from the probe start) of ``stream`` at ``rate_rps``.

        Raises:
            ValueError: process ``trace`` without trace timestamps.
        """
        return arrival_offsets(
            self.arrival,
            rate_rps=rate_rps,
            seed=self.seed,
            stream=stream,
            trace_times_s=self.trace_times_s,
        )

    def describe(self) -> str:
        """One line for logs: the lengths and the context clip."""
        source = self.name if self.rows is None else f"{self.name} ({len(self.rows)} rows)"
        if self.prompts is not None:
            source = f"{len(self.prompts)} real prompts, output lengths from {source}"
        clip = f", clipped to {self.context_tokens} tokens" if self.context_tokens else ""
        reuse = ""
        if self.prefix is not None:
            reuse = f", {self.prefix.groups} shared prefixes of {self.prefix.shared_tokens} tokens"
        elif self.trace_block_tokens is not None:
            reuse = f", the trace's hash_ids as {self.trace_block_tokens}-token blocks"
        if self.sessions is not None:
            reuse += f", sessions of {self.mean_turns:g} turns on average"
        return f"{source}, {self.api} API, arrivals {self.arrival.process}{reuse}{clip}"


def build_workload(
    spec: Spec,
    *,
    trace_file: Path | None = None,
    prompts_file: Path | None = None,
    context_tokens: int | None = None,
) -> Workload:
    """The request stream a spec describes.

    Args:
        spec: the spec.
        trace_file: ``workload.trace`` resolved (:class:`~tokenwatt.schema.spec.LoadedSpec`);
            None = the trace path as written.
        prompts_file: ``workload.prompts`` resolved; None = the path as written.
        context_tokens: the context length requests are clipped to: the server's own (e.g.
            :meth:`tokenwatt.client.openai.OpenAIClient.max_model_len`), else the model's
            (:attr:`tokenwatt.geometry.ModelGeometry.max_position_embeddings`); None = no clip.

    Raises:
        SpecError: an unreadable trace or prompts file, a trace without timestamps for
            ``trace`` arrivals, or no prompt that fits the context.
    """
    work = spec.workload
    rows: list[TraceRow] | None = None
    input_dist: TokenCount | None = work.input_tokens
    output_dist: TokenCount | None = work.output_tokens
    prompts: list[str] | None = None
    if work.prompts is not None:
        prompts = _fitting_prompts(
            read_prompts(prompts_file if prompts_file is not None else Path(work.prompts)),
            spec=spec,
            context_tokens=context_tokens,
        )
    if work.trace in BUILTIN_WORKLOADS:  # chat-mix-v1, the only one
        if prompts is None:
            input_dist = input_dist if input_dist is not None else CHAT_MIX_V1[0]
        output_dist = output_dist if output_dist is not None else CHAT_MIX_V1[1]
    else:
        rows = read_trace(trace_file if trace_file is not None else Path(work.trace))
    if work.arrival.process == "trace":
        if rows is None or any(r.t_s is None for r in rows):
            raise SpecError(
                "workload.arrival.process is 'trace' but the workload has no timestamps for"
                " every request: use a trace file with timestamps, or another arrival process"
            )
        try:
            trace_offsets([r.t_s for r in rows if r.t_s is not None])
        except ValueError as exc:
            raise SpecError(f"workload.trace: {work.trace}: {exc}") from exc
    block = _trace_blocks(spec, rows)
    if work.sessions is not None and block is not None:
        raise SpecError(
            "workload.sessions with a trace whose hash_ids shape the prompts: a session's later"
            " turns are its own history, not the trace's blocks; set workload.trace_prefix:"
            " false to take only the trace's lengths"
        )
    if work.prefix is not None and context_tokens is not None:
        room = context_tokens - (CHAT_TEMPLATE_MARGIN_TOKENS if spec.engine.api == "chat" else 0)
        if work.prefix.shared_tokens > room - 2:
            raise SpecError(
                f"workload.prefix.shared_tokens ({work.prefix.shared_tokens}) leaves no room in"
                f" the model's context of {context_tokens} tokens for a request's own input and"
                " output (at least one token each): shorten the prefix"
            )
    if context_tokens is None:
        logger.warning(
            "model context length unknown (not in model.config, no geometry override, no server"
            " value): request lengths are not clipped"
        )
    return Workload(
        name=work.trace,
        api=spec.engine.api,
        vocab_size=spec.model.vocab_size,
        seed=work.seed,
        arrival=work.arrival,
        input_dist=input_dist,
        output_dist=output_dist,
        rows=rows,
        context_tokens=context_tokens,
        prefix=work.prefix,
        trace_block_tokens=block,
        prompts=prompts,
        sessions=work.sessions,
    )


def _fitting_prompts(prompts: list[str], *, spec: Spec, context_tokens: int | None) -> list[str]:
    """The prompts whose estimated length leaves room for one output token in the context.

    Raises:
        SpecError: none does.
    """
    if context_tokens is None:
        return prompts
    room = context_tokens - (CHAT_TEMPLATE_MARGIN_TOKENS if spec.engine.api == "chat" else 0)
    kept = [p for p in prompts if text_prompt_tokens(p) <= room - 1]
    if not kept:
        raise SpecError(
            f"workload.prompts: {spec.workload.prompts}: no prompt fits the model's context of"
            f" {context_tokens} tokens with one output token (estimated at 4 characters a token)"
        )
    if len(kept) < len(prompts):
        logger.warning(
            "workload.prompts: %d of %d prompts are too long for the context of %d tokens"
            " and are left out",
            len(prompts) - len(kept),
            len(prompts),
            context_tokens,
        )
    return kept


def _trace_blocks(spec: Spec, rows: list[TraceRow] | None) -> int | None:
    """``workload.trace_block_tokens`` when the trace's hash_ids shape the prompts, else None.

    Raises:
        SpecError: hash_ids that do not fit the block size, or options that contradict them.
    """
    work = spec.workload
    if rows is None or not work.trace_prefix or all(r.hash_ids is None for r in rows):
        return None
    if work.prompts is not None:
        raise SpecError(
            "workload.prompts and the trace's hash_ids both shape the prompts: set"
            " workload.trace_prefix: false to take only the trace's output lengths"
        )
    size = work.trace_block_tokens
    for line, row in enumerate(rows, start=1):
        if row.hash_ids is None:
            raise SpecError(
                f"workload.trace: {work.trace}: request {line} has no hash_ids while others do;"
                " set workload.trace_prefix: false to send unique prompts of the trace's lengths"
            )
        need = shared.blocks_needed(row.input_tokens, size)
        if len(row.hash_ids) != need:
            raise SpecError(
                f"workload.trace: {work.trace}: request {line} has {len(row.hash_ids)} hash_ids"
                f" for {row.input_tokens} input tokens, but workload.trace_block_tokens"
                f" {size} needs {need}: set trace_block_tokens to the trace's block size"
            )
    if work.input_tokens is not None:
        raise SpecError(
            "workload.input_tokens would replace the lengths that the trace's hash_ids describe:"
            " remove it, or set workload.trace_prefix: false"
        )
    if work.prefix is not None:
        raise SpecError(
            "workload.prefix and the trace's hash_ids both shape the prompts: use one (set"
            " workload.trace_prefix: false to keep the synthetic prefix)"
        )
    return size

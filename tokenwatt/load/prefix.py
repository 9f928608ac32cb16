"""Shared prefixes: prompts whose leading tokens repeat, so that a prefix cache can reuse them.

Random prompts never repeat, so an engine's prefix cache finds nothing in them. Real traffic
repeats system prompts and conversation history; two spec options say how much.

- **Synthetic prefixes** (``workload.prefix: {groups, shared_tokens}``): ``groups`` "system
  prompts" of ``shared_tokens`` token ids each. Every request draws one group uniformly and sends
  that group's prefix followed by its own prompt of ``input_tokens`` (or the trace's length):
  ``input_tokens`` counts the request's own part, and the prompt is
  ``shared_tokens + input_tokens`` long. Where the model's context must clip a prompt, the own
  part is cut (to at least one token); a prefix that leaves no room for one is refused.
- **Trace prefixes** (a trace whose rows carry ``hash_ids``, as the Mooncake trace does): each
  hash id stands for one block of ``workload.trace_block_tokens`` tokens (Mooncake: 512), the
  same tokens wherever that id appears; a request's prompt is the blocks of its ids in order,
  cut to its ``input_length``. Two prompts are identical exactly where their ids are, so the
  engine's cache sees the trace's own reuse (``workload.trace_prefix: false`` sends unique
  prompts of the trace's lengths instead). Each row must have ``ceil(input_length /
  trace_block_tokens)`` ids, which catches a wrong block size.

The tokens of group ``g`` (or hash id ``h``) come from a random generator seeded with
(``workload.seed``, stream, ``g`` or ``h``): deterministic, and the same in every request of a
probe, but **different in every probe** (each probe has its own stream). So a probe never starts
with its prefixes cached by the probe before it: probes stay independent of the order a sweep
runs them in (two configurations of a comparison run different sequences of rates), and each
starts cold as a virtual-time probe does. The warm-up fills the cache, so the measurement window
sees the steady-state reuse. The chat API, which takes text, gets one word per token id (a
fixed word list indexed by the id), so its prompts repeat where the ids do; the simulator caches
token-id prompts only.

**Expected hit rate** (:func:`expected_hit_rate`): the fraction of prompt tokens served from the
cache over a window, as the engine's counters measure it (vLLM: ``prefix_cache_hits`` over
``prefix_cache_queries``, both in tokens, between the window's first and last scrape; SGLang,
which has no such counters: its ``cache_hit_rate`` gauge, averaged over the window's scrapes).
Every probe records the measured rate; the run file records the expected one
(``prefix_reuse``: steady state for ``workload.prefix``, one cold pass in order for a trace) at
the engine's block size as its ``/metrics`` states it (``vllm:cache_config_info``), else the
simulator's ``engine.sim.block_size``, else 16; the page shows each probe's rate and the
expected one beside the confirmed rate's, and ``tokenwatt validate`` states it for a spec.

A cache stores whole blocks of ``B`` tokens (vLLM's default 16), and the block that straddles
the prefix's end also holds the request's own (unique) tokens, so a request whose group is
cached reuses ``B * floor(S / B)`` of its ``S + own`` prompt tokens. A group's first request in
the probe misses. With ``G`` groups, ``M`` requests before the window (the warm-up) and ``N`` in
it, the expected number of first uses inside the window is ``F = G * q^M * (1 - q^N)``,
``q = 1 - 1/G``, and

    hit rate = B * floor(S / B) * (1 - F / N) / (S + mean own tokens)

(the ratio of the expected token sums, which the counters' ratio approaches over many
requests). It assumes the cache holds all ``G`` prefixes at once (``G * S`` tokens well inside
the KV cache; otherwise least-recently-used eviction lowers it). Worked example: ``G = 4``,
``S = 1000``, ``B = 16``, 200 own tokens, ``M = 0``, ``N = 8``: ``floor(1000 / 16) = 62``
blocks = 992 tokens; ``q = 0.75``, ``F = 4 * (1 - 0.75^8) = 3.5995``; hit rate
``= 992 * (1 - 3.5995 / 8) / 1200 = 0.4547``; in steady state (``M`` large) ``992 / 1200 =
0.8267``.

**A trace's hit rate** (:func:`trace_hit_rate`): the same fraction for requests whose prompts
are a trace's blocks, sent in order. Two prompts share their first ``T * c`` tokens when their
first ``c`` hash ids are equal (``T`` = ``trace_block_tokens``; a shorter prompt shares at most
its own length), and request ``j`` finds in the cache the longest prefix it shares with any
request before it, in whole cache blocks of ``B`` tokens and never its whole prompt (an engine
computes at least its last token: vLLM then recomputes the last block). Assumes nothing is
evicted. Worked example, ``T = 4``, ``B = 2``: requests with ids ``[0, 1]`` (8 tokens),
``[0, 2]`` (7), ``[0, 1]`` (6): the first hits nothing; the second shares 4 tokens (id 0) with
the first: 4 hit; the third shares min(6, 8) = 6 with the first, at most 5 = 6 - 1 computed,
in whole blocks: 4 hit. Over the last two, (4 + 4) / (7 + 6) = 0.6154.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from tokenwatt.schema.engine import InfoGauge

__all__ = [
    "DEFAULT_CACHE_BLOCK_TOKENS",
    "block_tokens",
    "blocks_needed",
    "cache_block_tokens",
    "expected_hit_rate",
    "prefix_tokens",
    "trace_hit_rate",
]

DEFAULT_CACHE_BLOCK_TOKENS = 16
"""The cache block size assumed when the engine does not say its own (vLLM's default on GPUs)."""

_PREFIX_KEY = 0x50524658  # separates prefix draws from request and arrival draws
_BLOCK_KEY = 0x424C4B53  # and trace-block draws from both


@functools.lru_cache(maxsize=2048)
def _tokens(
    seed: int, stream: int, key: int, kind: int, count: int, low: int, high: int
) -> npt.NDArray[np.int64]:
    rng = np.random.Generator(np.random.PCG64(np.random.SeedSequence([seed, stream, key, kind])))
    tokens = rng.integers(low, high, size=count)
    tokens.setflags(write=False)  # shared by every request that uses it
    return tokens


def prefix_tokens(
    *, seed: int, stream: int, group: int, count: int, id_range: tuple[int, int]
) -> npt.NDArray[np.int64]:
    """The token ids of synthetic prefix ``group`` of ``stream`` (read-only)."""
    return _tokens(seed, stream, group, _PREFIX_KEY, count, *id_range)


def block_tokens(
    *, seed: int, stream: int, hash_id: int, count: int, id_range: tuple[int, int]
) -> npt.NDArray[np.int64]:
    """The token ids of trace block ``hash_id`` of ``stream`` (read-only)."""
    return _tokens(seed, stream, hash_id, _BLOCK_KEY, count, *id_range)


def expected_hit_rate(
    *,
    groups: int,
    shared_tokens: int,
    own_tokens_mean: float,
    block_tokens: int,
    warmup_requests: float | None = None,
    window_requests: float | None = None,
) -> float:
    """Expected fraction of prompt tokens served from the prefix cache (module docstring).

    Args:
        groups: distinct prefixes ``G``.
        shared_tokens: tokens of each prefix ``S``.
        own_tokens_mean: mean of the requests' own tokens (at least 1 each).
        block_tokens: the cache's block size ``B``.
        warmup_requests: requests of the probe before the window ``M``; None = steady state
            (every group already cached).
        window_requests: requests in the window ``N``; needed when ``warmup_requests`` is given.

    Raises:
        ValueError: a count out of range.
    """
    if groups < 1 or shared_tokens < 1 or block_tokens < 1 or own_tokens_mean < 1:
        raise ValueError("groups, shared tokens, block size and own tokens must be at least 1")
    cached = block_tokens * (shared_tokens // block_tokens)
    seen = 1.0
    if warmup_requests is not None:
        if window_requests is None or window_requests <= 0 or warmup_requests < 0:
            raise ValueError("give a positive window_requests with warmup_requests >= 0")
        q = 1.0 - 1.0 / groups
        first_uses = groups * q**warmup_requests * (1.0 - q**window_requests)
        seen = 1.0 - first_uses / window_requests
    return cached * seen / (shared_tokens + own_tokens_mean)


def blocks_needed(input_tokens: int, block: int) -> int:
    """Hash ids a trace row of ``input_tokens`` must carry with ``block``-token blocks."""
    return math.ceil(input_tokens / block)


def trace_hit_rate(
    hash_ids: Sequence[Sequence[int]],
    input_tokens: Sequence[int],
    *,
    trace_block_tokens: int,
    cache_block_tokens: int,
    counted_from: int = 0,
) -> float:
    """Fraction of prompt tokens a cache serves to trace-shaped prompts (module docstring).

    Args:
        hash_ids: each request's hash ids, in the order the requests are sent.
        input_tokens: each request's prompt length (at most its ids' blocks).
        trace_block_tokens: tokens per hash id ``T``.
        cache_block_tokens: the cache's block size ``B``.
        counted_from: the requests before this one (a warm-up) fill the cache but are not
            counted.

    Raises:
        ValueError: lengths that disagree, a block size under 1, or nothing counted.
    """
    if len(hash_ids) != len(input_tokens):
        raise ValueError("one list of hash ids per request")
    if trace_block_tokens < 1 or cache_block_tokens < 1:
        raise ValueError("block sizes must be at least 1")
    if not 0 <= counted_from < len(hash_ids):
        raise ValueError("counted_from must leave at least one request to count")
    longest: dict[tuple[int, ...], int] = {}
    """Per leading run of ids, the longest prompt sent so far that starts with it."""
    hit = total = 0
    for j, (ids, n) in enumerate(zip(hash_ids, input_tokens, strict=True)):
        shared_tokens = 0
        for c in range(1, len(ids) + 1):
            before = longest.get(tuple(ids[:c]))
            if before is None:
                break
            shared_tokens = max(shared_tokens, min(before, n, trace_block_tokens * c))
        if j >= counted_from:
            usable = min(shared_tokens, n - 1)
            hit += cache_block_tokens * (usable // cache_block_tokens)
            total += n
        for c in range(1, len(ids) + 1):
            key = tuple(ids[:c])
            longest[key] = max(longest.get(key, 0), n)
    return hit / total


def cache_block_tokens(
    info: Sequence[InfoGauge], *, sim_block_size: int | None = None
) -> tuple[int, str]:
    """The engine's prefix-cache block size and where it came from.

    Args:
        info: the engine's ``*_info`` gauges (its configuration as read in pre-flight): vLLM's
            ``vllm:cache_config_info`` carries ``block_size``.
        sim_block_size: the embedded simulator's ``engine.sim.block_size``, when it serves.
    """
    for gauge in info:
        raw = gauge.labels.get("block_size") if gauge.name == "vllm:cache_config_info" else None
        if raw is not None and raw.isdigit() and int(raw) > 0:
            return int(raw), f"{gauge.name} block_size on the engine's /metrics"
    if sim_block_size is not None:
        return sim_block_size, "the simulator's engine.sim.block_size"
    return DEFAULT_CACHE_BLOCK_TOKENS, f"assumed {DEFAULT_CACHE_BLOCK_TOKENS} (vLLM's GPU default)"

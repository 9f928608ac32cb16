"""The simulated engine's prefix cache: KV blocks found by the hash of the tokens before them.

As in vLLM's V1 KV-cache manager: a prompt is cut into blocks of ``block_size`` tokens, and each
*full* block gets a hash of its tokens and of the hash of the block before it, so equal hashes
mean equal prefixes up to and including that block (a partial last block is never shared). When
a request is admitted, the leading run of its block hashes that the cache holds is its hit: those
tokens are not computed again (prefill costs only the rest; attention still reads them), and
vLLM never serves the prompt's last token from the cache (its logits must be computed), so a
hit is at most ``prompt - 1`` tokens in whole blocks. Blocks become findable as soon as they are
scheduled for computing, so a request admitted a step later already reuses them.

Blocks held by no running request stay cached and evictable; when a request needs a block and
no block is free, the least recently released cached block is evicted. The cache is therefore
bounded by the KV cache itself: a cached block is a KV block nobody else needs yet.
``vllm:prefix_cache_queries_total`` counts prompt tokens looked up at admission,
``vllm:prefix_cache_hits_total`` the tokens found (a request admitted again after a preemption
is looked up again, and usually finds its own blocks).

Hashes are Python's hash of (parent hash, token tuple): deterministic for integers, so two runs
of the same requests make the same hits.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence

__all__ = ["PrefixCache", "block_hashes"]

_ROOT_HASH = 0x7072656669785F30  # the "parent" of a prompt's first block


def block_hashes(token_ids: Sequence[int], block_size: int) -> list[int]:
    """The chained hashes of the full blocks of ``token_ids`` (a partial last block has none)."""
    hashes: list[int] = []
    parent = _ROOT_HASH
    ids = list(token_ids)
    for start in range(0, len(ids) - block_size + 1, block_size):
        parent = hash((parent, tuple(ids[start : start + block_size])))
        hashes.append(parent)
    return hashes


class PrefixCache:
    """Cached blocks by hash, each with the count of running requests that hold it.

    Blocks nobody holds are evictable, kept in the order they were released (oldest first).
    """

    __slots__ = ("_lru", "_refs")

    def __init__(self) -> None:
        self._refs: dict[int, int] = {}
        self._lru: OrderedDict[int, None] = OrderedDict()

    def __len__(self) -> int:
        """Cached blocks (held or evictable): KV blocks in use by the cache."""
        return len(self._refs)

    @property
    def evictable(self) -> int:
        """Cached blocks no request holds."""
        return len(self._lru)

    def lookup(self, hashes: Sequence[int], limit: int) -> tuple[int, int]:
        """(leading blocks of ``hashes`` cached, at most ``limit``; how many are evictable)."""
        found = 0
        idle = 0
        refs = self._refs
        for h in hashes[:limit]:
            count = refs.get(h)
            if count is None:
                break
            found += 1
            idle += count == 0
        return found, idle

    def acquire(self, hashes: Sequence[int]) -> None:
        """A request holds these cached blocks (taken out of the eviction order)."""
        refs = self._refs
        for h in hashes:
            count = refs[h]
            if count == 0:
                del self._lru[h]
            refs[h] = count + 1

    def insert(self, h: int) -> bool:
        """Cache a block a request has just filled and holds; False if ``h`` is cached already."""
        if h in self._refs:
            return False
        self._refs[h] = 1
        return True

    def release(self, hashes: Sequence[int]) -> None:
        """A request lets go of these blocks; the ones nobody holds become evictable."""
        refs = self._refs
        for h in hashes:
            count = refs[h] - 1
            refs[h] = count
            if count == 0:
                self._lru[h] = None

    def evict(self) -> bool:
        """Drop the least recently released block nobody holds; False if there is none."""
        if not self._lru:
            return False
        h, _ = self._lru.popitem(last=False)
        del self._refs[h]
        return True

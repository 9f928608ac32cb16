"""The simulator's prefix cache: block hashes, LRU eviction, and what the engine does with hits."""

from __future__ import annotations

from pathlib import Path

import pytest

from tokenwatt.geometry import load_geometry
from tokenwatt.gpus import preset
from tokenwatt.schema.spec import SimSpec
from tokenwatt.sim.engine import EngineConfig, EngineCore, SimRequest
from tokenwatt.sim.prefix_cache import PrefixCache, block_hashes


def config(shared: Path, **sim: object) -> EngineConfig:
    g = load_geometry(shared / "data" / "models" / "Qwen__Qwen3-8B" / "config.json")
    return EngineConfig.build(geometry=g, gpu=preset("h100-sxm"), sim=SimSpec.model_validate(sim))


def test_block_hashes_cover_full_blocks_and_chain_on_what_came_before():
    a = block_hashes(list(range(40)), 16)
    assert len(a) == 2  # 40 tokens: two full blocks, the last 8 tokens have no hash
    assert block_hashes(list(range(32)) + [7] * 20, 16)[:2] == a  # same first 32: same hashes
    assert block_hashes([99] + list(range(1, 40)), 16)[1] != a[1]  # a change earlier changes it
    # the same 16 tokens after a different block hash differently
    x = block_hashes([1] * 16 + [5] * 16, 16)
    y = block_hashes([2] * 16 + [5] * 16, 16)
    assert x[1] != y[1]
    assert block_hashes(list(range(40)), 16) == a  # deterministic


def test_cache_evicts_the_least_recently_released_block_nobody_holds():
    cache = PrefixCache()
    for h in (1, 2, 3):
        assert cache.insert(h)
    assert not cache.insert(2)  # cached already
    cache.release([2])
    cache.release([1, 3])
    assert (len(cache), cache.evictable) == (3, 3)
    assert cache.lookup([2, 1, 9, 3], limit=4) == (2, 2)  # stops at the first miss
    cache.acquire([2])  # held again: out of the eviction order
    assert cache.evict()  # 1 goes first (released before 3)
    assert cache.lookup([1], limit=1) == (0, 0)
    assert cache.evict()  # then 3
    assert not cache.evict()  # 2 is held
    assert (len(cache), cache.evictable) == (1, 0)


def run_until_done(core: EngineCore, t: float = 0.0) -> float:
    while core.has_work:
        plan = core.schedule(t)
        assert plan is not None
        core.finish(plan, plan.end_s)
        t = plan.end_s
    return t


def prompt(shared_ids: list[int], own: int, tag: int) -> list[int]:
    return shared_ids + [10_000 + 1000 * tag + i for i in range(own)]


def test_a_cached_prefix_is_not_prefilled_again_and_the_counters_say_so(shared: Path):
    cfg = config(shared)
    core = EngineCore(cfg)
    prefix = list(range(100, 200))  # 100 tokens: 6 full blocks (96 tokens) can be shared
    first = prompt(prefix, 28, 0)
    core.add(SimRequest(0, prompt_tokens=128, max_tokens=2, block_hashes=block_hashes(first, 16)))
    t = run_until_done(core)
    second = prompt(prefix, 28, 1)
    core.add(SimRequest(1, prompt_tokens=128, max_tokens=2, block_hashes=block_hashes(second, 16)))
    plan = core.schedule(t)
    assert plan is not None
    assert plan.tokens == 128 - 96  # only the uncached tokens are computed
    assert plan.entries[0][0].computed == 96
    st = core.stats
    assert (st.prefix_queried_tokens, st.prefix_hit_tokens) == (256, 96)
    # attention still reads the cached context: the step costs more than a 32-token prompt
    core.finish(plan, plan.end_s)
    run_until_done(core, plan.end_s)
    assert core.available_blocks == cfg.num_blocks


def test_an_identical_prompt_computes_its_last_token_again(shared: Path):
    cfg = config(shared)
    core = EngineCore(cfg)
    ids = list(range(64))  # exactly 4 blocks
    for rid in range(2):
        core.add(
            SimRequest(rid, prompt_tokens=64, max_tokens=1, block_hashes=block_hashes(ids, 16))
        )
        run_until_done(core)
    # the second finds 3 blocks: the 4th holds the last token, whose logits must be computed
    assert core.stats.prefix_hit_tokens == 48


def test_caching_off_finds_nothing_and_counts_nothing(shared: Path):
    core = EngineCore(config(shared, enable_prefix_caching=False))
    ids = list(range(64))
    for rid in range(2):
        core.add(
            SimRequest(rid, prompt_tokens=64, max_tokens=1, block_hashes=block_hashes(ids, 16))
        )
        run_until_done(core)
    assert (core.stats.prefix_queried_tokens, core.stats.prefix_hit_tokens) == (0, 0)


def test_a_prompt_without_hashes_is_looked_up_and_never_found(shared: Path):
    core = EngineCore(config(shared))
    for rid in range(2):
        core.add(SimRequest(rid, prompt_tokens=64, max_tokens=1))  # a text prompt
        run_until_done(core)
    assert (core.stats.prefix_queried_tokens, core.stats.prefix_hit_tokens) == (128, 0)


def test_blocks_nobody_holds_are_evicted_oldest_first_when_space_runs_out(shared: Path):
    # A KV cache of about 6,000 tokens (as in test_sim_engine's preemption test).
    g = config(shared).geometry
    util = (g.weight_bytes + 4e9 + 6000 * g.kv_bytes_per_token) / (80 * 2**30)
    cfg = config(
        shared, max_model_len=2048, gpu_memory_utilization=util, max_num_batched_tokens=8192
    )
    core = EngineCore(cfg)
    total = cfg.num_blocks
    a = list(range(1000, 1032)) + [1]  # two full blocks and one own token
    b = list(range(2000, 2032)) + [2]
    for rid, ids in enumerate((a, b)):
        core.add(
            SimRequest(rid, prompt_tokens=33, max_tokens=1, block_hashes=block_hashes(ids, 16))
        )
        run_until_done(core)
    assert (len(core.cache), core.cache.evictable) == (4, 4)  # cached, held by nobody
    assert core.kv_usage == 0.0  # evictable blocks count as free, as in vLLM
    assert core.free_blocks == total - 4
    # a request that needs all but three blocks evicts one: a's first, released first
    core.add(SimRequest(2, prompt_tokens=(total - 3) * 16, max_tokens=1))
    assert core.schedule(1.0) is not None
    assert core.cache.lookup(block_hashes(a, 16), limit=2) == (0, 0)  # its chain is broken
    assert core.cache.lookup(block_hashes(b, 16), limit=2) == (2, 2)


def test_a_preempted_request_finds_its_own_blocks_again(shared: Path):
    cfg = config(shared)
    core = EngineCore(cfg)
    ids = list(range(200))
    req = SimRequest(0, prompt_tokens=200, max_tokens=3, block_hashes=block_hashes(ids, 16))
    core.add(req)
    plan = core.schedule(0.0)
    assert plan is not None
    core.finish(plan, plan.end_s)
    core.running.remove(req)
    core._preempt(req)  # what a full KV cache does to the newest request
    assert req.computed == 0
    assert core.cache.evictable == 12  # its 12 full prompt blocks stay cached
    plan = core.schedule(plan.end_s)
    assert plan is not None
    assert req.computed == 192  # 12 blocks found again; 200 + 1 generated - 192 to compute
    assert plan.tokens == 9


@pytest.mark.parametrize("size", [8, 32])
def test_block_size_is_configurable(shared: Path, size: int):
    cfg = config(shared, block_size=size)
    core = EngineCore(cfg)
    ids = list(range(100))
    for rid in range(2):
        core.add(
            SimRequest(rid, prompt_tokens=100, max_tokens=1, block_hashes=block_hashes(ids, size))
        )
        run_until_done(core)
    assert core.stats.prefix_hit_tokens == (99 // size) * size

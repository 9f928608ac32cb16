"""The load generator on a two-node local Ray cluster against the local pool, on one box.

Against nginx-sse (a canned SSE server in C: 32-token streams, no delays), the same ladder of
open-loop probes as `loadgen_throughput.py` (rising rates until two probes in a row are
client-bound), with the same probe plan and workload:

1. the local pool (2 worker processes), before any Ray process runs;
2. a two-node local Ray cluster (`ray.cluster_utils.Cluster`, head + 1 node, 1 CPU each, as in
   tests/ray_cluster.py), 2 actors, one per node (`load.cluster` with `server_nodes: true`:
   nginx runs on the same host);
3. the local pool again, with the Ray cluster up but idle (what its daemons cost alone);
   2 and 3 alternate, ``--rounds`` times (default 2), so both see the box's same moments.

Also the cluster's start, the `ray.init` join (`ray_pool.connect`), a few `RayPool` starts
(placement group to every actor ready), and the clocks: on one host the actors share the
coordinator's clock, so the probe records offset 0 by design; the script also times raw round
trips to each pool actor's `clock_ns` (as `RayPool.audit_clocks` does) and runs
`ray_pool.clock_offset` on them, to show what a remote host's audit would record. The true offset
is 0 here, so every measured offset is the method's error. CPU seconds of the coordinator, the
load shards and Ray's own processes (GCS, raylets, agents) are counted over each ladder.

    .venv/bin/python benchmarks/ray_load.py                # ~4.5 min
    .venv/bin/python benchmarks/ray_load.py --json /tmp/ray_load.json
    .venv/bin/python benchmarks/ray_load.py --tables-from /tmp/ray_load.json   # tables only
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import math
import os
import resource
import statistics
import time
from pathlib import Path
from typing import Any

from loadgen_common import conditions, start_nginx
from loadgen_throughput import RATES, SLO, best, setup

from tests.ray_cluster import two_node_cluster
from tokenwatt.load import ray_pool
from tokenwatt.load._shard import DEFAULT_SPIN_S
from tokenwatt.load._workers import WorkerInit
from tokenwatt.load.probe import LoadGenerator
from tokenwatt.load.ray_pool import RayPool
from tokenwatt.schema.spec import LoadClusterSpec
from tokenwatt.sweep import ProbePlan

_CLK_TCK = os.sysconf("SC_CLK_TCK")


# --- CPU accounting ---------------------------------------------------------------------------


def ray_processes() -> dict[int, float]:
    """CPU seconds so far of every Ray process on the box (daemons, agents, workers, actors)."""
    out: dict[int, float] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmd = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            stat = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if "/ray/" in cmd or cmd.startswith("ray::"):
            out[int(entry.name)] = (int(stat[11]) + int(stat[12])) / _CLK_TCK  # utime + stime
    return out


def self_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


# --- the ladder -------------------------------------------------------------------------------


async def ladder(
    base_url: str, *, label: str, tokens: int, warmup_s: float, window_s: float, **gen: Any
) -> dict[str, Any]:
    """The rising-rate ladder with one generator (its pool kept between probes)."""
    spec, work = setup(base_url, tokens)
    rows: list[dict[str, Any]] = []
    actors: list[dict[str, Any]] = []
    misses = 0
    ray_before = ray_processes()
    self_before = self_cpu_s()
    t0 = time.perf_counter()
    async with LoadGenerator(spec.engine, work, request_timeout_s=30, **gen) as g:
        for index, rate in enumerate(RATES):
            r = await g.probe(
                ProbePlan(phase="rates", rate_rps=rate, warmup_s=warmup_s, window_s=window_s),
                index=index,
                slo=SLO,
            )
            lags = sorted(r.requests.send_lag_ms)
            row = {
                "rate": rate,
                "achieved": r.achieved_rate_rps,
                "lag_p50": lags[len(lags) // 2],
                "lag_p99": r.send_lag_p99_ms,
                "events_s": r.output_tokens / window_s,
                "failed": r.failed,
                "client_bound": r.client_bound,
                "reasons": r.client_bound_reasons,
                "shard_cpu_s": r.client_cpu_s or 0.0,
                "cpu_util": (r.client_cpu_s or 0) / (warmup_s + window_s),
                "preemptions": r.client_preemptions,
            }
            rows.append(row)
            if r.load_actors is not None:
                actors.extend(
                    {"rate": rate, **a.model_dump(include=_ACTOR_FIELDS)} for a in r.load_actors
                )
            print(
                f"  {label} {rate:5d} req/s: achieved {row['achieved']:7.1f}, send lag p50"
                f" {row['lag_p50']:.3f} p99 {row['lag_p99']:.3f} ms,"
                f" {row['events_s']:8.0f} events/s, failed {r.failed},"
                f" CPU {row['cpu_util']:.0%}, preempted {r.client_preemptions}x"
                + (
                    f"  CLIENT-BOUND: {'; '.join(r.client_bound_reasons)}" if r.client_bound else ""
                ),
                flush=True,
            )
            misses = misses + 1 if r.client_bound else 0
            if misses >= 2:
                break
        # Before the generator closes: its actors are still alive to be counted.
        wall_s = time.perf_counter() - t0
        ray_after = ray_processes()
    actor_pids = {a["pid"] for a in actors}
    ray_cpu = {
        pid: cpu - ray_before.get(pid, 0.0)
        for pid, cpu in ray_after.items()
        if cpu - ray_before.get(pid, 0.0) > 0
    }
    return {
        "label": label,
        "rows": rows,
        "actors": actors,
        "wall_s": wall_s,
        "coordinator_cpu_s": self_cpu_s() - self_before,
        "shard_cpu_s": sum(r["shard_cpu_s"] for r in rows),
        "ray_daemons_cpu_s": sum(v for p, v in ray_cpu.items() if p not in actor_pids),
    }


_ACTOR_FIELDS = {
    "shard",
    "node_id",
    "node_ip",
    "pid",
    "same_clock",
    "clock_offset_ns",
    "clock_uncertainty_ns",
    "round_trips",
    "window_requests",
}


def nearest_rank(values: list[float], q: float) -> float:
    """The q-th percentile of sorted ``values`` by nearest rank (as tokenwatt.metrics)."""
    return values[max(0, math.ceil(len(values) * q / 100) - 1)]


# --- start-up and clocks ----------------------------------------------------------------------


def pool_inits(base_url: str, tokens: int, n: int) -> list[WorkerInit]:
    spec, work = setup(base_url, tokens)
    return [
        WorkerInit(
            engine=spec.engine,
            workload=work,
            base_url=None,
            env={},
            headers={},
            request_timeout_s=30,
            transport="fast",
            spin_s=DEFAULT_SPIN_S,
            log_level=logging.WARNING,
        )
        for _ in range(n)
    ]


async def pool_starts(
    base_url: str, cluster: LoadClusterSpec, *, tokens: int, starts: int, trips: int
) -> tuple[list[float], list[dict[str, Any]]]:
    """Seconds of each RayPool start; the clock round trips on the first pool's actors."""
    slots, _ = ray_pool.plan_slots(
        ray_pool.alive_nodes(),
        actors=2,
        actors_per_node=None,
        server_ips=ray_pool.server_ips(base_url),
        server_nodes=True,
    )
    times: list[float] = []
    clocks: list[dict[str, Any]] = []
    for i in range(starts):
        pool = RayPool(pool_inits(base_url, tokens, len(slots)), slots, cluster)
        try:
            await pool.start()
            assert pool.start_s is not None
            times.append(pool.start_s)
            print(f"  pool start {i + 1}: {pool.start_s:.2f} s", flush=True)
            if i == 0:
                # The pool's own actors (private to RayPool: this is a benchmark of it).
                for actor in pool._actors:
                    clocks.append(await round_trips(actor, trips))
        finally:
            await pool.close()
        await asyncio.sleep(1.0)  # let Ray free the placement group's CPUs before the next
    return times, clocks


async def round_trips(actor: Any, trips: int) -> dict[str, Any]:
    """``trips`` timed calls to the actor's clock, and what clock_offset makes of them."""
    samples = []
    for _ in range(trips):
        sent = time.monotonic_ns()
        remote = await actor.handle.clock_ns.remote()
        samples.append((sent, remote, time.monotonic_ns()))
    rtt_us = sorted((r - s) / 1e3 for s, _, r in samples)
    single = [ray_pool.clock_offset([s]) for s in samples]
    audit = 16  # RayPool's round trips per audit
    audits = [
        ray_pool.clock_offset(samples[k : k + audit])
        for k in range(0, len(samples) - audit + 1, audit)
    ]
    best_offset, best_unc = ray_pool.clock_offset(samples)
    return {
        "node_ip": actor.where["node_ip"],
        "node_id": actor.slot.node_id,
        "same_clock": actor.same_clock,
        "trips": trips,
        "rtt_p50_us": nearest_rank(rtt_us, 50),
        "rtt_p99_us": nearest_rank(rtt_us, 99),
        "rtt_min_us": rtt_us[0],
        "single_offset_median_us": statistics.median(o / 1e3 for o, _ in single),
        "single_offset_max_abs_us": max(abs(o) / 1e3 for o, _ in single),
        "single_uncertainty_median_us": statistics.median(u / 1e3 for _, u in single),
        "single_uncertainty_max_us": max(u / 1e3 for _, u in single),
        "audits": len(audits),
        "audit_offset_median_us": statistics.median(o / 1e3 for o, _ in audits),
        "audit_offset_max_abs_us": max(abs(o) / 1e3 for o, _ in audits),
        "audit_uncertainty_median_us": statistics.median(u / 1e3 for _, u in audits),
        "audit_uncertainty_max_us": max(u / 1e3 for _, u in audits),
        "all_offset_us": best_offset / 1e3,
        "all_uncertainty_us": best_unc / 1e3,
    }


# --- tables -----------------------------------------------------------------------------------


def ceiling(rows: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The last rate before the first client-bound probe (every rate below it held)."""
    held = None
    for row in rows:
        if row["client_bound"] or row["failed"]:
            break
        held = row
    return held


def ceiling_table(ladders: list[dict[str, Any]]) -> None:
    # CPU and preemptions compared at one rate that every ladder held: per request figures mix
    # in the pacer's spin, which dominates at low rates.
    helds = [ceiling(lad["rows"]) for lad in ladders]
    common = min((h["rate"] for h in helds if h is not None), default=None)
    print(
        "\n| load generator | highest not client-bound (achieved) | p99 send lag there |"
        " events/s there | every rate up to it held | first client-bound (p99 send lag) |"
        f" shards' CPU / preemptions at {common or 0:,} req/s |"
        " CPU over the ladder (cores): coordinator / shards / Ray's processes |"
    )
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |")
    for lad, held in zip(ladders, helds, strict=True):
        top = best(lad["rows"])
        wall = lad["wall_s"]
        cores = (
            f"{lad['coordinator_cpu_s'] / wall:.2f} / {lad['shard_cpu_s'] / wall:.2f} /"
            f" {lad['ray_daemons_cpu_s'] / wall:.2f}"
        )
        up_to = f"{held['rate']:,} req/s" if held is not None else "none"
        bound = next((r for r in lad["rows"] if r["client_bound"]), None)
        first = f"{bound['rate']:,} req/s ({bound['lag_p99']:.1f} ms)" if bound else "none"
        at = next((r for r in lad["rows"] if r["rate"] == common), None)
        cpu = f"{at['cpu_util']:.0%} / {at['preemptions']:,}" if at else ""
        head = (
            f"{top['rate']:,} req/s ({top['achieved']:,.0f}) | {top['lag_p99']:.2f} ms |"
            f" {top['events_s']:,.0f}"
            if top
            else "none | |"
        )
        print(f"| {lad['label']} | {head} | {up_to} | {first} | {cpu} | {cores} |")


def startup_table(cluster_s: float, join_s: float, starts: list[float]) -> None:
    print("\n| step | seconds |")
    print("| --- | ---: |")
    print(
        f"| two-node cluster start (`Cluster` head, `add_node`, `wait_for_nodes`) |"
        f" {cluster_s:.2f} |"
    )
    print(f"| `ray.init` join (`ray_pool.connect`) | {join_s:.2f} |")
    print(
        f"| `RayPool.start`, 2 actors (placement group to every actor ready), median of"
        f" {len(starts)} | {statistics.median(starts):.2f} (each: "
        + ", ".join(f"{s:.2f}" for s in starts)
        + ") |"
    )


def clock_tables(actors: list[dict[str, Any]], clocks: list[dict[str, Any]]) -> None:
    print(
        "\n| shard (probes' `load_actors`) | node | probes | same clock | offsets recorded (ns) |"
        " uncertainties recorded (ns) | round trips per audit |"
    )
    print("| ---: | --- | ---: | --- | --- | --- | ---: |")
    for shard in sorted({a["shard"] for a in actors}):
        mine = [a for a in actors if a["shard"] == shard]
        nodes = ", ".join(sorted({f"{a['node_ip']} ({a['node_id'][:8]})" for a in mine}))
        print(
            f"| {shard} | {nodes} | {len(mine)} | {all(a['same_clock'] for a in mine)} |"
            f" {sorted({a['clock_offset_ns'] for a in mine})} |"
            f" {sorted({a['clock_uncertainty_ns'] for a in mine})} |"
            f" {sorted({a['round_trips'] for a in mine})} |"
        )
    print(
        "\n| actor | round trips | RTT p50 / p99 / min | one trip: offset median / max abs |"
        " one trip: ± median / max | audit of 16 (as RayPool): offset median / max abs |"
        " audit of 16: ± median / max | all trips (the shortest): offset, ± |"
    )
    print("| --- | ---: | --- | --- | --- | --- | --- | --- |")
    for i, c in enumerate(clocks):
        print(
            f"| {i} ({c['node_ip']}, {c['node_id'][:8]}) | {c['trips']} |"
            f" {c['rtt_p50_us']:.0f} / {c['rtt_p99_us']:.0f} / {c['rtt_min_us']:.0f} µs |"
            f" {c['single_offset_median_us']:+.1f} / {c['single_offset_max_abs_us']:.1f} µs |"
            f" {c['single_uncertainty_median_us']:.0f} / {c['single_uncertainty_max_us']:.0f} µs |"
            f" {c['audit_offset_median_us']:+.1f} / {c['audit_offset_max_abs_us']:.1f} µs |"
            f" {c['audit_uncertainty_median_us']:.0f} / {c['audit_uncertainty_max_us']:.0f} µs |"
            f" {c['all_offset_us']:+.1f}, {c['all_uncertainty_us']:.0f} µs |"
        )


def tables(out: dict[str, Any]) -> None:
    ladders = out["ladders"]
    ceiling_table(ladders)
    startup_table(out["cluster_start_s"], out["ray_init_s"], out["pool_start_s"])
    clock_tables([a for lad in ladders for a in lad["actors"]], out["clocks"])
    print()


# --- main -------------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--tokens", type=int, default=32)
    parser.add_argument("--warmup", type=float, default=0.5)
    parser.add_argument("--window", type=float, default=3.0)
    parser.add_argument("--rounds", type=int, default=2, help="Ray / local ladder pairs")
    parser.add_argument("--starts", type=int, default=5, help="RayPool starts to time")
    parser.add_argument("--trips", type=int, default=208, help="clock round trips per actor")
    parser.add_argument("--json", type=Path, help="also write every figure here")
    parser.add_argument("--tables-from", type=Path, help="only print the tables of a --json file")
    args = parser.parse_args()
    if args.tables_from:
        tables(json.loads(args.tables_from.read_text()))
        return
    probe = {"tokens": args.tokens, "warmup_s": args.warmup, "window_s": args.window}

    out: dict[str, Any] = {"conditions_start": conditions(), "probe": probe}
    print(f"conditions at start: {out['conditions_start']}")
    nginx = start_nginx()
    cluster = None
    ladders: list[dict[str, Any]] = []
    try:
        base = nginx.base_url
        print("local pool, 2 worker processes, no Ray running:")
        ladders.append(
            asyncio.run(ladder(base, label="local pool, 2 workers, no Ray", workers=2, **probe))
        )

        t0 = time.perf_counter()
        cluster, _ = two_node_cluster()
        out["cluster_start_s"] = time.perf_counter() - t0
        spec = LoadClusterSpec(address=cluster.address, server_nodes=True)
        t0 = time.perf_counter()
        ray_pool.connect(spec)  # joined once here: the generators below reuse it
        out["ray_init_s"] = time.perf_counter() - t0
        print(f"cluster start {out['cluster_start_s']:.2f} s, join {out['ray_init_s']:.2f} s")
        out["conditions_ray_idle"] = conditions()

        print(f"{args.starts} RayPool starts, {args.trips} clock round trips per actor:")
        starts, clocks = asyncio.run(
            pool_starts(base, spec, tokens=args.tokens, starts=args.starts, trips=args.trips)
        )
        out["pool_start_s"] = starts
        out["clocks"] = clocks

        for k in range(1, args.rounds + 1):
            print(f"round {k}: two-node Ray cluster, 2 actors (one per node):")
            label = f"Ray, 2 actors on 2 nodes (round {k})"
            ladders.append(asyncio.run(ladder(base, label=label, workers=2, cluster=spec, **probe)))
            print(f"round {k}: local pool, 2 worker processes, the Ray cluster up and idle:")
            label = f"local pool, 2 workers, Ray idle (round {k})"
            ladders.append(asyncio.run(ladder(base, label=label, workers=2, **probe)))
        out["ladders"] = ladders
        out["conditions_end"] = conditions()
    finally:
        ray_pool.disconnect()
        if cluster is not None:
            cluster.shutdown()
        nginx.stop()

    print(f"conditions at end: {out['conditions_end']}")
    tables(out)
    print(json.dumps(out))
    if args.json:
        args.json.write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()

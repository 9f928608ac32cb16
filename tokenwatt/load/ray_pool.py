"""The load generator's workers as Ray actors on a cluster's nodes (``load.cluster``, ``--ray``).

One client host runs out of CPU, sockets or NIC long before a multi-node deployment does. With a
Ray cluster over the client hosts, each probe's shards run in Ray actors instead of local worker
processes, and the rest of the probe is unchanged:

* **Placement.** The pool takes the cluster's alive nodes, leaves out those that run the server
  under test (the endpoint's host; ``server_nodes: true`` keeps them) and gives each node at most
  ``actors_per_node`` actors (default its CPUs). One placement group holds a one-CPU bundle per
  actor, each pinned to its node by the node-id label, so the actors go where the plan says.
  Every eligible node gets at least one actor.
* **The same shard code.** An actor starts the local pool's worker process on its node
  (:mod:`tokenwatt.load._workers`: :class:`~tokenwatt.load._shard.Shard` on its own precise
  event loop and interpreter) and relays its messages: shard *i* of *W* of the one seeded
  schedule, so the shards' superposition is exactly the probe's Poisson schedule and no request
  crosses Ray.
* **Clocks.** Before each probe every actor's monotonic clock is compared with the coordinator's
  by timed round trips (:func:`clock_offset`); its offset is the midpoint estimate of the
  shortest round trip, its uncertainty half that round trip. An actor on the coordinator's own
  host (same boot id) shares its clock: offset exactly 0. A probe whose offsets are less certain
  than ``max_clock_uncertainty_ms``, or whose plan reached an actor after the common start, is
  refused (:class:`~tokenwatt.errors.ClusterError`). Each request is timed on one actor's clock
  (send and receive there), so an offset moves only the schedule and where a request falls
  relative to the window, never a latency; results are shifted back onto the coordinator's clock
  before they are merged.
* **Merging.** The shards' raw request records come back through Ray; the probe's record is built
  from all of them at once (percentiles from the merged requests, never averaged), and client-
  bound is judged for the whole as for local workers, with each actor's share in the record.
* **Loss.** An actor or node lost mid-probe ends the probe as client-side: the survivors are
  stopped, the record names the lost node and is client-bound (never server failures), and the
  pool is rebuilt on the nodes still alive for the next probe.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import ipaddress
import logging
import multiprocessing
import os
import socket
import tempfile
import time
import urllib.parse
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from tokenwatt import metrics
from tokenwatt.errors import ClusterError
from tokenwatt.load._shard import (
    ExceedTally,
    ShardPlan,
    ShardResult,
)
from tokenwatt.load._workers import WorkerInit, worker_logging, worker_main
from tokenwatt.load.record import send_lags_ms
from tokenwatt.schema.run import LoadActor, LoadCluster, LoadNode
from tokenwatt.schema.spec import LoadClusterSpec

__all__ = [
    "RAY_INSTALL_HINT",
    "ActorLost",
    "NodeInfo",
    "RayPool",
    "Slot",
    "clock_offset",
    "connect",
    "disconnect",
    "lagging_actors",
    "plan_slots",
    "server_ips",
    "shift_result",
]

logger = logging.getLogger(__name__)

RAY_INSTALL_HINT = "pip install 'tokenwatt[ray]' (on this host and on every client host)"
_ROUND_TRIPS = 16
_START_TIMEOUT_S = 120.0
_RECEIVE_POLL_S = 0.2
_STOP_TIMEOUT_S = 10.0
_NS = 1_000_000_000
_NODE_LABEL = "ray.io/node-id"


def _ray() -> Any:
    try:
        import ray
    except ImportError:
        raise ClusterError(
            f"the load generator on a Ray cluster needs Ray: {RAY_INSTALL_HINT}"
        ) from None
    return ray


def boot_id() -> str:
    """This host's boot id: two processes with the same one share CLOCK_MONOTONIC."""
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text(encoding="ascii").strip()
    except OSError:
        return f"host:{socket.gethostname()}"


# --- pure parts -------------------------------------------------------------------------------


def clock_offset(samples: Sequence[tuple[int, int, int]]) -> tuple[int, int]:
    """(offset, uncertainty) of a remote clock from timed round trips, ns (pure).

    Each sample is (local send, remote reading, local receive). The remote reading was taken
    somewhere inside the round trip, so remote - local is within half the round trip of
    remote - (send + receive) / 2. The shortest round trip bounds it best (queueing only ever
    lengthens a trip): its midpoint estimate and half its length.
    """
    if not samples:
        raise ValueError("no round trips")
    sent, remote, received = min(samples, key=lambda s: s[2] - s[0])
    if received < sent:
        raise ValueError("a round trip ended before it began")
    trip = received - sent
    return remote - (sent + trip // 2), (trip + 1) // 2


@dataclass(frozen=True)
class NodeInfo:
    """An alive node of the cluster, as Ray lists it."""

    node_id: str
    node_ip: str
    cpus: float


@dataclass(frozen=True)
class Slot:
    """Where actor ``shard`` goes."""

    shard: int
    node_id: str
    node_ip: str


def plan_slots(
    nodes: Sequence[NodeInfo],
    *,
    actors: int,
    actors_per_node: int | None,
    server_ips: frozenset[str],
    server_nodes: bool,
) -> tuple[list[Slot], list[LoadNode]]:
    """Which node each of ``actors`` actors goes to, and each node's part (pure).

    Nodes running the server (their IP in ``server_ips``) are left out unless ``server_nodes``;
    each node takes at most ``actors_per_node`` actors (default: its CPUs, at least 1). Actors
    are dealt round-robin over the eligible nodes in the order given, so every eligible node gets
    one before any gets two. More actors than the budget are capped at the budget.

    Raises:
        ClusterError: no node is eligible.
    """
    budget: dict[str, int] = {}
    why_not: dict[str, str] = {}
    for node in nodes:
        if not server_nodes and node.node_ip in server_ips:
            why_not[node.node_id] = "runs the server under test (load.cluster.server_nodes: false)"
            continue
        cap = actors_per_node if actors_per_node is not None else max(1, int(node.cpus))
        budget[node.node_id] = cap
    if not budget:
        raise ClusterError(
            f"no node of the Ray cluster can take load actors: {len(nodes)} alive, every one"
            " runs the server under test (its address is one of the nodes'); add client hosts"
            " to the cluster, or set load.cluster.server_nodes: true to share them"
            if nodes
            else "the Ray cluster has no alive node"
        )
    eligible = [n for n in nodes if n.node_id in budget]
    slots: list[Slot] = []
    placed = dict.fromkeys(budget, 0)
    while len(slots) < actors:
        progressed = False
        for node in eligible:
            if len(slots) >= actors:
                break
            if placed[node.node_id] < budget[node.node_id]:
                slots.append(Slot(len(slots), node.node_id, node.node_ip))
                placed[node.node_id] += 1
                progressed = True
        if not progressed:
            break  # every node is at its budget
    listed = [
        LoadNode(
            node_id=n.node_id,
            node_ip=n.node_ip,
            cpus=n.cpus,
            used=placed.get(n.node_id, 0) > 0,
            why_not=why_not.get(n.node_id)
            or (None if placed.get(n.node_id, 0) else "not needed for this probe's actors"),
        )
        for n in nodes
    ]
    return slots, listed


def shift_result(result: ShardResult, delta_ns: int) -> ShardResult:
    """The same result with every monotonic-clock time moved by ``delta_ns`` (pure)."""
    if delta_ns == 0:
        return result

    def moved(value: int | None) -> int | None:
        return None if value is None else value + delta_ns

    window = []
    for r in result.window:
        chunks = type(r.chunk_ns)("q", (t + delta_ns for t in r.chunk_ns))
        window.append(
            dataclasses.replace(
                r,
                t_send_ns=r.t_send_ns + delta_ns,
                t_end_ns=r.t_end_ns + delta_ns,
                t_first_ns=moved(r.t_first_ns),
                t_last_ns=moved(r.t_last_ns),
                t_first_answer_ns=moved(r.t_first_answer_ns),
                t_sched_ns=moved(r.t_sched_ns),
                chunk_ns=chunks,
            )
        )
    return dataclasses.replace(
        result,
        window=window,
        decode_intervals=[(a + delta_ns, b + delta_ns) for a, b in result.decode_intervals],
    )


# --- the actor --------------------------------------------------------------------------------


class ShardActor:
    """A Ray actor that runs one shard in a worker process of its own, on its node.

    The shard is the local pool's worker process (:func:`~tokenwatt.load._workers.worker_main`,
    the same messages over a pipe), started by the actor: a shard in a thread of the actor would
    share its interpreter lock with Ray's own threads, and wait for it up to the switch interval
    (5 ms) when a chunk arrives (measured: p99 TPOT 7 % over the local pool's). The actor only
    relays; Ray calls its methods from its own threads (a small ``max_concurrency``), so
    :meth:`receive` may wait while :meth:`send` delivers a stop. The worker exits when the
    actor's end of the pipe closes, so a killed actor takes its shard with it.
    """

    def __init__(self, init: WorkerInit) -> None:
        worker_logging(init.log_level, init.env)
        context = multiprocessing.get_context("spawn")
        self._conn, child = context.Pipe()
        self._process = context.Process(target=worker_main, args=(child, init), daemon=True)
        self._process.start()
        child.close()

    def where(self) -> dict[str, Any]:
        import ray

        from tokenwatt import __version__

        return {
            "node_id": ray.get_runtime_context().get_node_id(),
            "node_ip": ray.util.get_node_ip_address(),
            "hostname": socket.gethostname(),
            "pid": self._process.pid or 0,
            "actor_pid": os.getpid(),
            "boot_id": boot_id(),
            "version": __version__,
        }

    def clock_ns(self) -> int:
        return time.monotonic_ns()

    def send(self, message: tuple[Any, ...]) -> int:
        """Deliver one message to the shard; returns this actor's clock on receipt."""
        received = time.monotonic_ns()
        self._conn.send(message)
        return received

    def receive(self, timeout_s: float) -> list[tuple[Any, ...]]:
        """The shard's messages, waiting up to ``timeout_s`` for the first one."""
        out: list[tuple[Any, ...]] = []
        try:
            if self._conn.poll(timeout_s):
                while True:
                    out.append(self._conn.recv())
                    if not self._conn.poll(0):
                        break
        except (EOFError, OSError):
            out.append(("dead",))
        return out


# --- the coordinator's side -------------------------------------------------------------------


class ActorLost(ClusterError):
    """An actor, or its node, was lost mid-probe; the survivors' results come with it."""

    def __init__(self, message: str, *, lost: Sequence[int], survivors: dict[int, ShardResult]):
        super().__init__(message)
        self.lost = list(lost)
        self.survivors = survivors


def connect(cluster: LoadClusterSpec) -> bool:
    """Join the Ray cluster unless this process already has; True if this call joined it.

    Raises:
        ClusterError: Ray is not installed, or the cluster cannot be reached.
    """
    ray = _ray()
    if ray.is_initialized():
        return False
    address = _reachable(cluster.address)
    try:
        ray.init(
            address=address,
            namespace="tokenwatt",
            include_dashboard=False,
            log_to_driver=False,
            # Joined from a thread (the coordinator's loop keeps its own SIGTERM handling),
            # which Ray warns about at WARNING; tokenwatt reports what goes wrong itself.
            logging_level=logging.ERROR,
        )
    except (ConnectionError, RuntimeError, ValueError) as exc:
        raise ClusterError(
            f"cannot join the Ray cluster at {cluster.address!r} (load.cluster.address or"
            f" --ray): {exc}. Start one with `ray start --head` and `ray start --address"
            " HEAD:6379` on each client host"
        ) from None
    return True


_CONNECT_TIMEOUT_S = 5.0
_CURRENT_CLUSTER = Path(tempfile.gettempdir()) / "ray" / "ray_current_cluster"


def _reachable(address: str) -> str:
    """The address to join, once its head answers on TCP (ray.init would retry for minutes).

    ``auto`` is ``$RAY_ADDRESS``, else the cluster this host joined last (``ray start``).

    Raises:
        ClusterError: no cluster is known, or its head does not answer.
    """
    target = address
    if address == "auto":
        target = os.environ.get("RAY_ADDRESS", "")
        if not target:
            try:
                target = _CURRENT_CLUSTER.read_text(encoding="utf-8").split()[0]
            except (OSError, IndexError):
                raise ClusterError(
                    "no Ray cluster on this host (load.cluster.address or --ray 'auto'): start"
                    " one with `ray start --head`, join the client hosts with `ray start"
                    " --address HEAD:6379`, or give the head's address"
                ) from None
    hostport = target.removeprefix("ray://")
    host, _, port = hostport.rpartition(":")
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=_CONNECT_TIMEOUT_S).close()
    except (OSError, ValueError) as exc:
        raise ClusterError(
            f"cannot join the Ray cluster at {address!r} (load.cluster.address or --ray):"
            f" {hostport} does not answer ({exc}). Is `ray start --head` running there?"
        ) from None
    return target


def disconnect() -> None:
    """Leave the Ray cluster (the actors this process made go with it)."""
    ray = _ray()
    if ray.is_initialized():
        ray.shutdown()


def server_ips(url: str) -> frozenset[str]:
    """The IP addresses the server under test answers on (for :func:`plan_slots`).

    A loopback address means the server runs on this host: then this host's node IP too.
    An address that does not resolve gives none (nothing is left out).
    """
    ray = _ray()
    host = urllib.parse.urlsplit(url if "://" in url else f"http://{url}").hostname or ""
    try:
        infos = socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP)
    except (OSError, UnicodeError):
        return frozenset()
    ips = {str(info[4][0]) for info in infos}
    if any(ipaddress.ip_address(ip).is_loopback for ip in ips):
        ips.add(ray.util.get_node_ip_address())
    return frozenset(ips)


def alive_nodes(exclude: frozenset[str] = frozenset()) -> list[NodeInfo]:
    """The cluster's alive nodes, the coordinator's own first, less ``exclude`` (node ids).

    Ray takes seconds to mark a killed node dead: the nodes a probe lost are left out here.
    """
    ray = _ray()
    here = ray.get_runtime_context().get_node_id()
    nodes = [
        NodeInfo(
            str(n["NodeID"]), str(n["NodeManagerAddress"]), float(n["Resources"].get("CPU", 0))
        )
        for n in ray.nodes()
        if n.get("Alive") and str(n["NodeID"]) not in exclude
    ]
    nodes.sort(key=lambda n: (n.node_id != here, n.node_ip, n.node_id))
    return nodes


def cluster_record(cluster: LoadClusterSpec, nodes: Sequence[LoadNode]) -> LoadCluster:
    return LoadCluster(address=cluster.address, ray_version=_ray().__version__, nodes=list(nodes))


@dataclass
class _Actor:
    handle: Any
    slot: Slot
    where: dict[str, Any]
    same_clock: bool
    offset_ns: int = 0
    uncertainty_ns: int = 0
    round_trips: int = 0


class RayPool:
    """W Ray actors, each running one shard per probe: the same interface as ``WorkerPool``.

    Args:
        inits: one per actor (what each needs to build its client).
        slots: where each actor goes (:func:`plan_slots`).
        cluster: the spec's ``load.cluster``.
    """

    start_lead_s = 0.5
    """How long before the common start the plans are sent: Ray calls take milliseconds."""

    def __init__(
        self, inits: Sequence[WorkerInit], slots: Sequence[Slot], cluster: LoadClusterSpec
    ) -> None:
        if len(inits) != len(slots):
            raise ValueError("one init per slot")
        self._inits = list(inits)
        self._slots = list(slots)
        self._cluster = cluster
        self._actors: list[_Actor] = []
        self._group: Any = None
        self._boot = boot_id()
        self._audited = False
        self.start_s: float | None = None
        """Seconds from asking for the placement group to every actor ready."""

    def __len__(self) -> int:
        return len(self._inits)

    async def start(self) -> None:
        """Place the actors and wait until every one is ready (bounded).

        Raises:
            ClusterError: the cluster cannot grant them, or one did not start.
        """
        ray = _ray()
        from ray.util import placement_group
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        t0 = time.perf_counter()
        self._group = placement_group(
            [{"CPU": 1.0} for _ in self._slots],
            strategy="PACK",
            bundle_label_selector=[{_NODE_LABEL: s.node_id} for s in self._slots],
            name="tokenwatt-load",
        )
        try:
            async with asyncio.timeout(_START_TIMEOUT_S):
                await self._group.ready()
        except TimeoutError:
            raise ClusterError(
                f"the Ray cluster did not grant {len(self._slots)} one-CPU load actors in"
                f" {_START_TIMEOUT_S:.0f} s on the nodes planned"
                f" ({', '.join(sorted({s.node_ip for s in self._slots}))}); are its CPUs taken?"
            ) from None
        remote = ray.remote(num_cpus=1, max_concurrency=4, max_restarts=0)(ShardActor)
        handles = [
            remote.options(
                scheduling_strategy=PlacementGroupSchedulingStrategy(
                    self._group, placement_group_bundle_index=slot.shard
                ),
                name=None,
            ).remote(init)
            for slot, init in zip(self._slots, self._inits, strict=True)
        ]
        from tokenwatt import __version__

        try:
            async with asyncio.timeout(_START_TIMEOUT_S):
                wheres = await asyncio.gather(*(h.where.remote() for h in handles))
                readies = await asyncio.gather(
                    *(h.receive.remote(_START_TIMEOUT_S) for h in handles)
                )
        except (TimeoutError, ray.exceptions.RayError) as exc:
            for h in handles:
                with contextlib.suppress(Exception):
                    ray.kill(h, no_restart=True)
            raise ClusterError(f"the load actors did not start: {_short(exc)}") from None
        for slot, handle, where, ready in zip(self._slots, handles, wheres, readies, strict=True):
            if where["version"] != __version__:
                raise ClusterError(
                    f"node {where['node_ip']} runs tokenwatt {where['version']}, this host"
                    f" {__version__}: install the same version on every client host"
                )
            if not ready or ready[0][0] != "ready":
                raise ClusterError(f"load actor {slot.shard} did not start: {ready}")
            self._actors.append(
                _Actor(handle, slot, where, same_clock=where["boot_id"] == self._boot)
            )
        self.start_s = time.perf_counter() - t0
        logger.info(
            "started %d load actors on %d node(s) of the Ray cluster in %.1f s",
            len(self._actors),
            len({a.slot.node_id for a in self._actors}),
            self.start_s,
        )

    async def audit_clocks(self) -> None:
        """Measure every actor's clock offset; refuse when one is not known well enough.

        Raises:
            ClusterError: an offset's uncertainty is over ``max_clock_uncertainty_ms``.
        """
        limit_ns = round(self._cluster.max_clock_uncertainty_ms * 1e6)
        self._audited = False
        for actor in self._actors:
            samples = []
            for _ in range(_ROUND_TRIPS):
                sent = time.monotonic_ns()
                remote = await actor.handle.clock_ns.remote()
                samples.append((sent, remote, time.monotonic_ns()))
            offset, uncertainty = clock_offset(samples)
            actor.round_trips = len(samples)
            if actor.same_clock:
                offset, uncertainty = 0, 0
            actor.offset_ns, actor.uncertainty_ns = offset, uncertainty
            if uncertainty > limit_ns:
                raise ClusterError(
                    f"load actor {actor.slot.shard} on {actor.where['node_ip']}: its clock offset"
                    f" is known only to ±{uncertainty / 1e6:.2f} ms (shortest of {len(samples)}"
                    f" round trips), over load.cluster.max_clock_uncertainty_ms"
                    f" {self._cluster.max_clock_uncertainty_ms:g}: the probe is refused. A busy"
                    " or distant client host; raise the limit only if the schedule may be off"
                    " by that much"
                )
        self._audited = True

    def actors(
        self, results: Sequence[ShardResult | None], lost: Sequence[int] = ()
    ) -> list[LoadActor]:
        """What the run file records of each actor for the probe just run."""
        return [
            LoadActor(
                shard=a.slot.shard,
                node_id=a.slot.node_id,
                node_ip=a.where["node_ip"],
                hostname=a.where["hostname"],
                pid=a.where["pid"],
                same_clock=a.same_clock,
                clock_offset_ns=a.offset_ns,
                clock_uncertainty_ns=a.uncertainty_ns,
                round_trips=a.round_trips,
                window_requests=len(r.window) if r is not None else 0,
                send_lag_p99_ms=_lag_p99(r),
                lost=a.slot.shard in lost,
            )
            for a, r in zip(self._actors, results, strict=True)
        ]

    async def run(
        self, plans: Sequence[ShardPlan], *, tally: ExceedTally | None = None
    ) -> list[ShardResult]:
        """Run one probe on every actor (as ``WorkerPool.run``); results on this host's clock.

        The caller runs :meth:`audit_clocks` first, before it fixes the plans' common start:
        the audit's round trips take time (on a busy host 2026-12-04, enough with them inside
        the lead for a plan to arrive 408 ms after the start, and the probe was refused).

        Raises:
            ClusterError: a plan reached an actor after the common start.
            ActorLost: an actor or its node was lost; the survivors were stopped.
        """
        ray = _ray()
        if not self._audited:
            raise RuntimeError("audit_clocks() before run(): the offsets are this probe's")
        self._audited = False
        sends = [
            a.handle.send.remote(("probe", dataclasses.replace(p, t0_ns=p.t0_ns + a.offset_ns)))
            for a, p in zip(self._actors, plans, strict=True)
        ]
        lost: set[int] = set()
        results: dict[int, ShardResult] = {}
        pending: dict[int, asyncio.Future[Any]] = {}
        try:
            received = await asyncio.gather(*sends, return_exceptions=True)
            for w, (actor, got) in enumerate(zip(self._actors, received, strict=True)):
                if isinstance(got, BaseException):
                    lost.add(w)
                elif got > plans[w].t0_ns + actor.offset_ns:
                    self._send_all(("stop",))
                    raise ClusterError(
                        f"load actor {w} on {actor.where['node_ip']} got the probe's plan"
                        f" {(got - plans[w].t0_ns - actor.offset_ns) / 1e6:.1f} ms after its"
                        " common start: the actors disagree on the epoch, the probe is refused"
                    )
            if lost:
                raise self._lost(lost, results)
            window_open = set(range(len(plans)))
            stopping = False
            while len(results) + len(lost) < len(plans):
                if not window_open and not stopping:
                    self._send_all(("stop",))
                    stopping = True
                for w, actor in enumerate(self._actors):
                    if w not in pending and w not in results and w not in lost:
                        pending[w] = asyncio.ensure_future(
                            actor.handle.receive.remote(_RECEIVE_POLL_S)
                        )
                done, _ = await asyncio.wait(pending.values(), return_when=asyncio.FIRST_COMPLETED)
                for w in [w for w, f in pending.items() if f in done]:
                    future = pending.pop(w)
                    try:
                        messages = future.result()
                    except ray.exceptions.RayError as exc:
                        logger.warning("load actor %d: %s", w, _short(exc))
                        lost.add(w)
                        window_open.discard(w)
                        continue
                    for message in messages:
                        kind = message[0]
                        if kind == "dead":
                            lost.add(w)
                            window_open.discard(w)
                        elif kind == "error":
                            raise ClusterError(f"load actor failed: {message[1]}")
                        elif kind == "window_done":
                            window_open.discard(w)
                        elif kind == "exceed":
                            if tally is not None and tally.update(w, *message[1:4]):
                                window_open.clear()
                        elif kind == "result":
                            results[w] = shift_result(message[1], -self._actors[w].offset_ns)
                        else:
                            raise ClusterError(f"load actor {w}: unexpected message {kind}")
                if lost and not stopping:
                    window_open.clear()  # stop the survivors now; the probe is lost
            if lost:
                raise self._lost(lost, results)
            return [results[w] for w in range(len(plans))]
        except BaseException:
            self._send_all(("stop",))
            raise
        finally:
            for future in pending.values():  # an actor killed after this says so to no one
                if future.done():
                    if not future.cancelled():
                        future.exception()
                else:
                    future.cancel()

    def _lost(self, lost: set[int], results: dict[int, ShardResult]) -> ActorLost:
        names = ", ".join(
            f"actor {w} on node {self._actors[w].where['node_ip']}"
            f" ({self._actors[w].slot.node_id[:12]})"
            for w in sorted(lost)
        )
        return ActorLost(
            f"lost mid-probe (client side): {names}", lost=sorted(lost), survivors=dict(results)
        )

    def _send_all(self, message: tuple[Any, ...]) -> None:
        for actor in self._actors:
            with contextlib.suppress(Exception):
                actor.handle.send.remote(message)

    async def close(self) -> None:
        """Kill every actor and free the placement group (immediate; bounded)."""
        if not self._actors and self._group is None:
            return
        ray = _ray()
        from ray.util import remove_placement_group

        for actor in self._actors:
            with contextlib.suppress(Exception):
                ray.kill(actor.handle, no_restart=True)
        self._actors.clear()
        if self._group is not None:
            with contextlib.suppress(Exception):
                remove_placement_group(self._group)
            self._group = None


def _lag_p99(result: ShardResult | None) -> float | None:
    """One actor's p99 send lag, by the probe record's own definition of a send lag."""
    if result is None or not result.window:
        return None
    lags = np.sort(np.asarray(send_lags_ms(result.window), dtype=np.float64))
    return metrics.nearest_rank(lags, 99.0)


def lagging_actors(actors: Sequence[LoadActor]) -> list[str]:
    """Why the probe is client-bound per actor: each actor whose own p99 send lag is over it.

    The merged requests can hide one lagging actor that sent a small share of them.
    """
    return [
        f"load actor {a.shard} on node {a.node_ip} ({a.node_id[:12]}): p99 send lag"
        f" {a.send_lag_p99_ms:.1f} ms > {metrics.MAX_SEND_LAG_P99_MS:g} ms"
        for a in actors
        if a.send_lag_p99_ms is not None and a.send_lag_p99_ms > metrics.MAX_SEND_LAG_P99_MS
    ]


def _short(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"[:300]

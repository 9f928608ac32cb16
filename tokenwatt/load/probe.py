"""Run one probe and turn what it measured into a :class:`ProbeRecord`.

Timeline, on the monotonic clock (``time.monotonic_ns()``, the power sampler's clock too): the
probe starts at ``t0``; ``[0, warmup_s)`` is warm-up and ``[warmup_s, warmup_s + window_s)`` the
measurement window. Arrivals are open loop (a request is sent at its scheduled time whatever
happened to earlier ones) and continue until every window request has finished, so the load
stays steady while the window drains. Requests outside the window are then cancelled; they are
never measured.

Window requests are those *scheduled* inside the window. Every one of them is kept, failed or
not, and a failed one counts as +inf latency (:mod:`tokenwatt.metrics`). The probe is
client-bound (the harness, not the server, was the limit; such a probe never passes) when its
achieved arrival rate is under 97 % of the offered rate, its p99 send lag exceeds 10 ms, a
window request waited for a concurrency slot, or a request failed for a client-side reason.

Rates: ``offered_rate_rps`` is what the schedule put inside the window (window requests /
window_s); it differs from the target ``rate_rps`` only by the arrival process's randomness.
``achieved_rate_rps`` is the same requests divided by the time taken to send them: from the
window start to the last window request's actual send, never less than ``window_s``. The 97 %
rule compares achieved with *offered*: compared with the target, a Poisson window of 60 expected
arrivals would fall under 97 % by chance about one time in three.

Running batch (defined in :mod:`tokenwatt.metrics`): sampled from the engine's Prometheus
running-request gauge (:data:`~tokenwatt.load.engine_metrics.RUNNING_GAUGES`) during the window by
:func:`~tokenwatt.load.engine_metrics.sample_engine` when a ``/metrics`` URL is given and a
sample arrives, else by Little's law over the requests' decode intervals.

Early stop (``early_stop=True``, the spec's ``sweep.early_stop``): the window-request count N is
known from the schedule before the probe starts, and the nearest-rank p99 over N values exceeds a
bound as soon as N - ceil(0.99 N) + 1 of them do (:func:`tokenwatt.metrics.exceeding_to_fail`).
The workers count their window requests over the TTFT bound (finished over it, failed, or, with
``ignore_eos``, still without output text once the bound has passed) and over the TPOT bound
(finished over it, or failed); the parent sums them and stops every worker the moment either sum
reaches that number. Window requests in flight are cancelled (status ``cancelled``, +inf like any
failure) and those not yet due are never sent; the record says so in ``early_stop`` and never
passes. A probe whose window requests had all finished anyway is not marked.

Sharding: with several workers, request ``i`` goes to worker process ``i mod W``. ``workers=None``
picks W from the expected request and token rates (one event loop sustains about
:data:`REQUESTS_PER_WORKER` req/s or :data:`EVENTS_PER_WORKER` streamed events/s on one core, see
``benchmarks/README.md``), and doubles it (up to the CPUs available) to re-run a probe that came
out client-bound on pacing with too few workers. The record says how many were used.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import logging
import math
import os
import time
from collections.abc import Mapping
from types import TracebackType

from tokenwatt.client.openai import OpenAIClient, TransportName
from tokenwatt.errors import ClusterError
from tokenwatt.load import ray_pool
from tokenwatt.load._shard import (
    DEFAULT_SPIN_S,
    EarlyStopRule,
    ExceedTally,
    Shard,
    ShardPlan,
    ShardResult,
)
from tokenwatt.load._workers import WorkerInit, WorkerPool
from tokenwatt.load.engine_metrics import EngineReading, sample_engine
from tokenwatt.load.ray_pool import RayPool
from tokenwatt.load.record import StopNote, build_probe_record
from tokenwatt.load.workload import Workload
from tokenwatt.metrics import exceeding_to_fail
from tokenwatt.schema.run import (
    LoadActor,
    LoadCluster,
    LoadNode,
    ProbeRamp,
    ProbeRecord,
)
from tokenwatt.schema.spec import EngineSpec, LoadClusterSpec, SloSpec
from tokenwatt.sweep import RERUN_STREAM_STEP, ProbePlan, warmup_when

__all__ = [
    "EVENTS_PER_WORKER",
    "REQUESTS_PER_WORKER",
    "LoadGenerator",
    "build_probe_record",
    "plan_workers",
]

logger = logging.getLogger(__name__)

REQUESTS_PER_WORKER = 1000.0
"""Requests per second one worker is planned for (measured ceiling: benchmarks/README.md)."""

EVENTS_PER_WORKER = 30_000.0
"""Streamed events per second one worker is planned for."""

_START_LEAD_S = 0.2
_NS = 1e9


def available_cpus() -> int:
    """CPUs this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def plan_workers(
    *, rate_rps: float, mean_output_tokens: float, max_workers: int | None = None
) -> int:
    """Worker processes needed for a rate, from the per-worker capacities above."""
    limit = max_workers if max_workers is not None else available_cpus()
    by_requests = rate_rps / REQUESTS_PER_WORKER
    by_events = rate_rps * (mean_output_tokens + 2) / EVENTS_PER_WORKER
    return max(1, min(limit, math.ceil(max(by_requests, by_events))))


# ---------------------------------------------------------------------------------------------
# The load generator


def _share(total: int, parts: int, index: int) -> int:
    return total // parts + (1 if index < total % parts else 0)


class LoadGenerator:
    """Runs probes against one server with one workload; keeps clients and workers between them.

    Use as an async context manager, then call :meth:`probe` for each probe of a sweep::

        async with LoadGenerator(spec.engine, workload, request_timeout_s=300) as gen:
            record = await gen.probe(ProbePlan(phase="search", rate_rps=8.0, warmup_s=45,
                                               window_s=60), index=0, slo=spec.slo)

    Args:
        engine: the spec's engine section.
        workload: the request stream (:func:`tokenwatt.load.workload.build_workload`).
        base_url: replaces ``engine.endpoint`` (the simulator's URL when the endpoint is 'sim').
        env: where the API key variable is read (default ``os.environ``).
        request_timeout_s: a request not complete after this long has failed.
        max_concurrency: most requests in flight over all workers; a window request that waits
            for a slot makes the probe client-bound.
        workers: worker processes; None = choose per probe (see the module docstring).
        max_workers: upper bound for the automatic choice (default: CPUs available).
        metrics_url: the engine's Prometheus ``/metrics`` URL, to sample the running batch.
        transport: ``fast`` or ``httpx`` (see :mod:`tokenwatt.client.openai`).
        headers: extra HTTP headers for every request.
        spin_s: pacing precision window (see :mod:`tokenwatt.load._shard`).
        in_process: run the (single) shard on the caller's event loop instead of a worker
            process: no process start-up, but the caller's loop sets the timer precision
            (asyncio's default is 1 ms) and anything else it runs delays the sends.
        cluster: run the shards as Ray actors on this cluster's nodes instead of local worker
            processes (:mod:`tokenwatt.load.ray_pool`); ``max_workers`` then defaults to the
            cluster's actor budget.
        ramp: ``sweep.ramp``: leave the requests still in flight when a probe's window requests
            have all finished running, so that a next probe planned to ramp
            (:attr:`~tokenwatt.sweep.ProbePlan.ramp`) starts on them (:mod:`tokenwatt.sweep`,
            "Ramp"). A probe ramps only on the workers that ran the previous one: when it needs
            more, they are replaced and it starts from idle (its record says so).
        min_workers: fewest workers of the automatic choice, whatever the rate: the split that
            keeps each worker's share of ``max_concurrency`` under the open-file limit
            (:func:`tokenwatt.load.open_files.ensure_open_files`).
    """

    def __init__(
        self,
        engine: EngineSpec,
        workload: Workload,
        *,
        base_url: str | None = None,
        env: Mapping[str, str] | None = None,
        request_timeout_s: float = 300.0,
        max_concurrency: int = 8192,
        workers: int | None = None,
        max_workers: int | None = None,
        metrics_url: str | None = None,
        transport: TransportName = "fast",
        headers: Mapping[str, str] | None = None,
        spin_s: float = DEFAULT_SPIN_S,
        in_process: bool = False,
        cluster: LoadClusterSpec | None = None,
        ramp: bool = False,
        min_workers: int = 1,
    ) -> None:
        if max_concurrency < 1:
            raise ValueError("max_concurrency must be at least 1")
        if workers is not None and workers < 1:
            raise ValueError("workers must be at least 1")
        self.engine = engine
        self.workload = workload
        self.base_url = base_url
        environ = os.environ if env is None else env
        key_name = engine.api_key_env
        self._env = {key_name: environ.get(key_name, "")} if key_name else {}
        self.request_timeout_s = request_timeout_s
        self.max_concurrency = max_concurrency
        self.fixed_workers = workers
        self.max_workers = max(1, max_workers if max_workers is not None else available_cpus())
        self.min_workers = max(1, min(min_workers, self.max_workers))
        self.metrics_url = metrics_url
        self.transport: TransportName = transport
        self.headers = dict(headers or {})
        self.spin_s = spin_s
        self.in_process = in_process
        if in_process:
            self.fixed_workers = 1
            self.max_workers = 1
        self._client: OpenAIClient | None = None
        self._pool: WorkerPool | RayPool | None = None
        self._mean_output: float | None = None
        self.cluster = cluster
        self.cluster_info: LoadCluster | None = None
        """The Ray cluster as found when the generator opened (None without ``cluster``)."""
        self._joined_ray = False
        self._eligible_nodes = 1
        self.last_stream: int | None = None
        """The workload stream the last probe's record came from (a re-run takes another)."""
        self._lost_nodes: set[str] = set()
        self._explicit_max_workers = max_workers is not None
        self.ramp = ramp
        self._left_running: tuple[int, float] | None = None
        """(index, rate) of the last probe, when it left its requests in flight running."""
        self._shard: Shard | None = None
        """In process: one shard for every probe (a ramped probe takes over its requests)."""
        if cluster is not None and in_process:
            raise ValueError("in_process and cluster exclude each other")

    async def __aenter__(self) -> LoadGenerator:
        # Build one client now so a missing API key or bad URL fails before any probe.
        self._client = self._make_client()
        await self._client.__aenter__()
        if self.cluster is not None:
            try:
                await self._join_cluster(self.cluster)
            except BaseException:
                await self.aclose()
                raise
        return self

    async def _join_cluster(self, cluster: LoadClusterSpec) -> None:
        self._joined_ray = await asyncio.to_thread(ray_pool.connect, cluster)
        slots, nodes = await asyncio.to_thread(self._plan_slots, 1_000_000)
        self.cluster_info = ray_pool.cluster_record(cluster, nodes)
        budget = len(slots)
        self._eligible_nodes = len({s.node_id for s in slots})
        self.max_workers = min(self.max_workers, budget) if self._explicit_max_workers else budget
        logger.info(
            "load generator on the Ray cluster at %s: %d node(s) eligible, up to %d actors",
            cluster.address,
            self._eligible_nodes,
            budget,
        )

    async def _replan_cluster(self) -> None:
        """The actor budget again, on the nodes still alive (after a node was lost)."""
        try:
            slots, _ = await asyncio.to_thread(self._plan_slots, 1_000_000)
        except ClusterError as exc:
            logger.warning("no node left for the load actors: %s", exc)
            return  # the next probe's pool start says so, once
        self._eligible_nodes = len({s.node_id for s in slots})
        self.max_workers = min(self.max_workers, len(slots))

    def _plan_slots(self, actors: int) -> tuple[list[ray_pool.Slot], list[LoadNode]]:
        assert self.cluster is not None
        return ray_pool.plan_slots(
            ray_pool.alive_nodes(exclude=frozenset(self._lost_nodes)),
            actors=actors,
            actors_per_node=self.cluster.actors_per_node,
            server_ips=ray_pool.server_ips(self.base_url or self.engine.endpoint),
            server_nodes=self.cluster.server_nodes,
        )

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Stop workers and close connections."""
        if self._pool is not None:
            pool, self._pool = self._pool, None
            await pool.close()
        if self._client is not None:
            client, self._client = self._client, None
            await client.aclose()
        if self._joined_ray:
            self._joined_ray = False
            await asyncio.to_thread(ray_pool.disconnect)

    def _make_client(self) -> OpenAIClient:
        return OpenAIClient(
            self.engine,
            base_url=self.base_url,
            env=self._env,
            request_timeout_s=self.request_timeout_s,
            transport=self.transport,
            max_connections=self.max_concurrency,
            headers=self.headers,
        )

    @property
    def client(self) -> OpenAIClient:
        """The in-process client (for discovery calls: models, version)."""
        if self._client is None:
            raise RuntimeError("use LoadGenerator as an async context manager")
        return self._client

    def _expected_output_tokens(self) -> float:
        if self._mean_output is None:
            self._mean_output = self.workload.mean_output_tokens()
        return self._mean_output

    def workers_for(self, rate_rps: float) -> int:
        """Workers the next probe at ``rate_rps`` would use."""
        if self.fixed_workers is not None:
            if self.cluster is not None:
                return min(self.fixed_workers, self.max_workers, self.max_concurrency)
            return min(self.fixed_workers, self.max_concurrency)
        planned = plan_workers(
            rate_rps=rate_rps * self.workload.mean_turns,  # requests per second
            mean_output_tokens=self._expected_output_tokens(),
            max_workers=self.max_workers,
        )
        planned = max(planned, self.min_workers)
        if self.cluster is not None:  # one actor or more on every eligible node
            planned = min(self.max_workers, max(planned, self._eligible_nodes))
        return min(planned, self.max_concurrency)

    def window_requests(
        self, rate_rps: float, warmup_s: float, window_s: float, *, stream: int
    ) -> int:
        """Window requests of a probe: arrivals of ``stream`` scheduled inside the window."""
        warm_ns = round(warmup_s * _NS)
        end_ns = warm_ns + round(window_s * _NS)
        count = 0
        for offset in self.workload.arrivals(rate_rps, stream=stream):
            rel_ns = round(offset * _NS)  # as the shards round it
            if rel_ns >= end_ns:
                break
            if rel_ns >= warm_ns:
                count += 1
        return count

    async def _ensure_pool(self, workers: int) -> WorkerPool | RayPool | None:
        if self.in_process:
            return None
        if self._pool is not None and len(self._pool) == workers:
            return self._pool
        if self._pool is not None:
            old, self._pool = self._pool, None
            self._left_running = None  # closing the workers cancels what they left running
            await old.close()
        inits = [
            WorkerInit(
                engine=self.engine,
                workload=self.workload,
                base_url=self.base_url,
                env=self._env,
                headers=self.headers,
                request_timeout_s=self.request_timeout_s,
                transport=self.transport,
                spin_s=self.spin_s,
                log_level=logging.getLogger().getEffectiveLevel(),
            )
            for _ in range(workers)
        ]
        pool: WorkerPool | RayPool
        if self.cluster is not None:
            slots, _ = await asyncio.to_thread(self._plan_slots, workers)
            pool = RayPool(inits[: len(slots)], slots, self.cluster)
        else:
            pool = WorkerPool(inits)
        try:
            await pool.start()
        except BaseException:
            await pool.close()
            raise
        self._pool = pool
        return pool

    async def probe(
        self,
        plan: ProbePlan,
        *,
        index: int,
        slo: SloSpec,
        keep_requests: bool = True,
    ) -> ProbeRecord:
        """Run one probe and return its record.

        Args:
            plan: what to run (the sweep's :class:`~tokenwatt.sweep.ProbePlan`: phase, rate,
                warm-up, window, attempt, repeat; ``early_stop`` stops the probe as soon as it
                has provably failed the SLO, ``certify_pass`` as soon as it has provably met it,
                see the module docstring).
                Its ``stream`` (default: ``index``, so every probe sends prompts of its own) and
                ``variant`` say which workload stream it sends, and as which content variant.
            index: position of the probe in the run.
            slo: the latency objective.
            keep_requests: include the window requests table in the record.

        Raises:
            TokenwattError: a worker process failed.
            ValueError: a content variant the workload does not have.
        """
        rate_rps = plan.rate_rps
        if plan.variant and not self.workload.varies_content:
            raise ValueError("this workload has no content variants (real prompts or sessions)")
        base_stream = index if plan.stream is None else plan.stream
        workers = self.workers_for(rate_rps)
        if plan.ramp and self._pool is not None and len(self._pool) >= workers:
            workers = len(self._pool)  # the workers holding the previous probe's requests
        tries = 0
        while True:
            self.last_stream = base_stream + tries * RERUN_STREAM_STEP
            record = await self._probe_once(
                workers=workers,
                stream=self.last_stream,
                variant=plan.variant,
                index=index,
                plan=plan,
                slo=slo,
                keep_requests=keep_requests,
            )
            pacing_bound = record.client_bound and not (
                record.slot_wait_s > 0 and len(record.client_bound_reasons) == 1
            )
            if self.fixed_workers is not None or not pacing_bound or workers >= self.max_workers:
                return record
            more = min(self.max_workers, workers * 2, self.max_concurrency)
            if more <= workers:
                return record
            logger.warning(
                "probe %d at %.3f req/s was client-bound with %d worker(s) (%s): re-running"
                " it with %d",
                index,
                rate_rps,
                workers,
                "; ".join(record.client_bound_reasons),
                more,
            )
            workers = more
            tries += 1

    async def _probe_once(
        self,
        *,
        workers: int,
        stream: int,
        variant: int,
        index: int,
        plan: ProbePlan,
        slo: SloSpec,
        keep_requests: bool,
    ) -> ProbeRecord:
        phase, rate_rps, window_s = plan.phase, plan.rate_rps, plan.window_s
        early_stop, certify_pass = plan.early_stop, plan.certify_pass
        pool = await self._ensure_pool(workers)
        if pool is not None:
            workers = len(pool)  # a cluster short of nodes may grant fewer actors
        ramp = plan.ramp
        ramp_from = self._left_running if ramp else None
        self._left_running = None
        warmup_s = warmup_when(plan, carried=ramp_from is not None)
        rule: EarlyStopRule | None = None
        tally: ExceedTally | None = None
        lost_reasons: list[str] = []
        load_actors: list[LoadActor] | None = None
        planned = 0
        sessions = self.workload.sessions is not None
        if sessions and (early_stop or certify_pass):
            # The spec refuses these with sessions; this guards other callers.
            raise ValueError(
                "the early stop and the pass certification need the window's request count"
                " before the probe starts, unknown with multi-turn sessions"
            )
        if early_stop or certify_pass:
            planned = self.window_requests(rate_rps, warmup_s, window_s, stream=stream)
            if planned > 0:
                rule = EarlyStopRule.for_slo(
                    slo, count_waiting=self.engine.ignore_eos, report_finished=certify_pass
                )
                tally = ExceedTally(
                    workers,
                    exceeding_to_fail(planned),
                    planned=planned,
                    stop_on_fail=early_stop,
                    stop_on_pass=certify_pass,
                )
        if isinstance(pool, RayPool):
            await pool.audit_clocks()  # before the common start is fixed: it takes round trips
            lead_s = pool.start_lead_s
        else:
            lead_s = _START_LEAD_S
        started = dt.datetime.now(dt.UTC)
        t0_ns = time.monotonic_ns() + int(lead_s * _NS)
        window_start_ns = t0_ns + round(warmup_s * _NS)
        window_end_ns = window_start_ns + round(window_s * _NS)
        readings: list[EngineReading] = []
        errors: list[str] = []
        sampler: asyncio.Task[None] | None = None
        if self.metrics_url is not None:
            sampler = asyncio.get_running_loop().create_task(
                sample_engine(self.metrics_url, window_start_ns, window_end_ns, readings, errors)
            )
        # With sessions only the first turns are on the schedule: no count to audit against.
        scheduled = (
            None if sessions else self.window_requests(rate_rps, warmup_s, window_s, stream=stream)
        )
        logger.info(
            "probe %d (%s): %.3f req/s, warm-up %g s, window %g s, %d worker(s)",
            index,
            phase,
            rate_rps,
            warmup_s,
            window_s,
            workers,
        )
        try:
            plans = [
                ShardPlan(
                    rate_rps=rate_rps,
                    warmup_s=warmup_s,
                    window_s=window_s,
                    stream=stream,
                    variant=variant,
                    t0_ns=t0_ns,
                    shard=w,
                    shards=workers,
                    max_concurrency=_share(self.max_concurrency, workers, w),
                    early_stop=rule,
                    ramp=ramp_from is not None,
                    keep_running=self.ramp,
                )
                for w in range(workers)
            ]
            if pool is None:
                if self._shard is None:
                    self._shard = Shard(self.client, self.workload, spin_s=self.spin_s)
                shard = self._shard

                def exceed(ttft: int, tpot: int, finished: int) -> None:
                    if tally is not None and tally.update(0, ttft, tpot, finished):
                        shard.stop()

                results = [await shard.run(plans[0], on_window_done=shard.stop, on_exceed=exceed)]
            else:
                results = await pool.run(plans, tally=tally)
            if isinstance(pool, RayPool):
                load_actors = pool.actors(results)
                lost_reasons = ray_pool.lagging_actors(load_actors)
        except ray_pool.ActorLost as lost:
            # Client side: the survivors' requests are kept, the probe is client-bound and
            # names the node; the next probe gets a pool on the nodes still alive.
            assert isinstance(pool, RayPool)
            logger.warning("probe %d: %s", index, lost)
            lost_reasons = [str(lost)]
            results = [lost.survivors.get(w, ShardResult()) for w in range(len(plans))]
            load_actors = pool.actors(results, lost=lost.lost)
            if self._pool is pool:
                self._pool = None
            await pool.close()
            self._lost_nodes.update(a.node_id for a in load_actors if a.lost)
            await self._replan_cluster()
        except BaseException:
            if sampler is not None:
                sampler.cancel()
            if pool is not None and self._pool is pool:
                # Workers may be mid-probe: replace them rather than reuse them.
                self._pool = None
                await pool.close()
            raise
        if sampler is not None:
            if not sampler.done():
                sampler.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await sampler
            if errors and not readings:
                logger.warning(
                    "no running-batch samples from %s (%s): running batch from Little's law"
                    " instead",
                    self.metrics_url,
                    errors[0],
                )
        record = build_probe_record(
            index=index,
            phase=phase,
            rate_rps=rate_rps,
            attempt=plan.attempt,
            repeat=plan.repeat,
            warmup_s=warmup_s,
            window_s=window_s,
            started_utc=started,
            t0_ns=t0_ns,
            shards=results,
            slo=slo,
            max_concurrency=self.max_concurrency,
            engine_readings=readings if self.metrics_url is not None else None,
            scrape_errors=len(errors),
            scheduled=scheduled,
            mean_turns=self.workload.mean_turns,
            keep_requests=keep_requests,
            lost_reasons=lost_reasons,
            load_actors=load_actors,
            ramp=(
                ProbeRamp(
                    from_probe=ramp_from[0],
                    from_rate_rps=ramp_from[1],
                    carried_requests=sum(r.carried for r in results),
                )
                if ramp_from is not None
                else None
            ),
            stop=(
                StopNote(
                    stopped_ns=tally.stopped_ns,
                    planned_window_requests=planned,
                    exceeding_needed=tally.needed,
                    ttft_exceeding=tally.ttft_exceeding,
                    tpot_exceeding=tally.tpot_exceeding,
                    outcome=tally.outcome,
                )
                if tally is not None and tally.stopped_ns is not None
                else None
            ),
            stream=stream,
            variant=variant,
        )
        if self.ramp and record.early_stop is None and not lost_reasons:
            self._left_running = (index, rate_rps)
        if record.ramp is not None:
            logger.info(
                "probe %d started on %d request(s) probe %d left running",
                index,
                record.ramp.carried_requests,
                record.ramp.from_probe,
            )
        elif ramp:
            logger.info(
                "probe %d could not ramp (no requests left running by a previous probe on these"
                " workers): it started from an idle server",
                index,
            )
        if record.early_stop is not None:
            logger.info(
                "probe %d stopped early (certain %s): %d of %d window requests over the TTFT"
                " bound, %d over the TPOT bound (%d prove the p99 over it); %d cut, %d never sent",
                index,
                record.early_stop.outcome,
                record.early_stop.ttft_exceeding,
                planned,
                record.early_stop.tpot_exceeding,
                record.early_stop.exceeding_needed,
                record.early_stop.cut_window_requests,
                record.early_stop.unsent_window_requests,
            )
        logger.info(
            "probe %d: %d window requests, %d failed, p99 TTFT %s ms, p99 TPOT %s ms, send lag"
            " p99 %.3f ms%s",
            index,
            record.window_requests,
            record.failed,
            record.ttft_ms.p99,
            record.tpot_ms.p99,
            record.send_lag_p99_ms,
            ", CLIENT-BOUND" if record.client_bound else "",
        )
        return record

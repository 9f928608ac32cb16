"""Self-calibration: the load generator measured against a server whose answer is known.

Before the first probe of a run (``load.calibrate``, on by default), tokenwatt starts
:mod:`tokenwatt.load.calibration_server` in a process of its own on this host and runs short
probes against it through the same load generator the run will use (the same worker planning,
concurrency cap and timeouts). The server answers every request with ``output_tokens`` token
events, the first ``ttft_ms`` after it read the request and then one every ``itl_ms``, and keeps
its own stamps (read, and each write, on the shared monotonic clock).

**Rungs.** From the sweep's first rate (``start_rps``, or the lowest listed rate) the rate is
multiplied by :data:`RUNG_GROWTH` up to the sweep's highest (``max_rps``, or the highest listed
rate), which is always the last rung, at most :data:`MAX_RUNGS` in all; the calibration stops at
the first rung that comes out client-bound by the probe's own rule (achieved rate, p99 send lag,
a concurrency-slot wait, a client-side failure). The **ceiling** is the highest rung that was
not. Streams are the workload's mean output length (at most :data:`MAX_OUTPUT_TOKENS`) at an
inter-token gap short enough that a stream ends within about a second, so that each rung reaches
its steady event rate (rate x tokens) inside its window; the run's real streams are longer, so
it holds more connections open at once, which the open-file check covers apart.

**What is recorded** (the run file's ``calibration``): per rung the planned event rate, workers,
send lag p50/p99 (the pacing error), and against the server's stamps, per window request
matched by its body: TTFT error (client TTFT minus the server's read-to-first-write) and TPOT
error (client TPOT minus the server's own spacing of its writes), p50 and p99. These bound what
the client adds to every latency it reports at that load.

A quick run (``--quick``, never publishable) is not calibrated.

**What it decides.** A run whose first rate (or any listed rate) is above a ceiling that was
found is refused before any load (:class:`~tokenwatt.errors.CalibrationError`, exit 2). A
probe above a found ceiling makes the run unpublishable (:mod:`tokenwatt.policy`). Sessions
count in sessions per second: the rungs send ``rate x mean turns`` requests per second, and the
ceiling is given back in the sweep's unit. On a Ray cluster the load runs on other hosts, and
this host's calibration would say nothing of them: it is not run (recorded as absent).
"""

from __future__ import annotations

import asyncio
import logging
import os
import select
import subprocess
import sys
import time
from collections.abc import Callable
from types import TracebackType

import httpx
import numpy as np

from tokenwatt.client.openai import request_body
from tokenwatt.errors import CalibrationError
from tokenwatt.load.calibration_server import body_key
from tokenwatt.load.probe import LoadGenerator, available_cpus
from tokenwatt.load.workload import Workload
from tokenwatt.metrics import MAX_SEND_LAG_P99_MS, nearest_rank
from tokenwatt.schema.run import CalibrationRung, ClientCalibration, ProbeRecord
from tokenwatt.schema.spec import (
    ArrivalSpec,
    EngineSpec,
    SloSpec,
    SweepSpec,
)
from tokenwatt.sweep import ProbePlan

__all__ = [
    "MAX_OUTPUT_TOKENS",
    "MAX_RUNGS",
    "RUNG_GROWTH",
    "CalibrationServer",
    "calibrate",
    "calibration_text",
    "check_planned_rates",
    "rung_rates",
    "rung_warmup_s",
    "server_lateness_ms",
    "server_processes",
]

logger = logging.getLogger(__name__)

RUNG_GROWTH = 4.0
"""Factor from one rung's rate to the next."""
MAX_RUNGS = 5
"""Most rungs in one calibration (the sweep's highest rate is always the last)."""
MAX_OUTPUT_TOKENS = 1024
"""Longest calibration stream, tokens."""
TTFT_MS = 50.0
"""The calibration server's first-token delay."""
STREAM_S = 1.0
"""About how long a calibration stream lasts: its inter-token gap is this over its tokens."""
WARMUP_S, WINDOW_S = 0.5, 1.5
"""Each rung's shortest warm-up, and its window, s. The warm-up is at least one stream's length
(first token and every gap), so that the connections the rung needs are open before its window:
a new connection's set-up counts in the client's TTFT and not in the server's stamps."""
_START_TIMEOUT_S = 30.0
STAMPS_TIMEOUT_S = 30.0
"""How long the server may take to hand over its stamps, s."""
_PERMISSIVE = SloSpec(ttft_p99_ms=600_000.0, tpot_p99_ms=600_000.0)


def server_processes(cpus: int | None = None) -> int:
    """How many calibration-server processes this host gets: one per four CPUs, 1 to 8.

    One Python process writes some tens of thousands of events a second; a host with many
    cores runs more load workers than that, and the server must not be what a rung measures.
    ``cpus``: None for this process's (:func:`tokenwatt.load.probe.available_cpus`).
    """
    return max(1, min(8, (available_cpus() if cpus is None else cpus) // 4))


class CalibrationServer:
    """The calibration server in ``processes`` child processes on one port (a context manager).

    :mod:`tokenwatt.load.calibration_server`; each process hands over its own stamps.
    """

    def __init__(self, *, ttft_ms: float, itl_ms: float, processes: int = 1) -> None:
        if processes < 1:
            raise ValueError("processes must be at least 1")
        self.ttft_ms = ttft_ms
        self.itl_ms = itl_ms
        self.processes = processes
        self.port: int | None = None
        self.control_ports: list[int] = []
        self._procs: list[subprocess.Popen[bytes]] = []

    @property
    def url(self) -> str:
        """``http://127.0.0.1:PORT``."""
        if self.port is None:
            raise RuntimeError("the calibration server is not running")
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> CalibrationServer:
        for _ in range(self.processes):
            argv = [sys.executable, "-m", "tokenwatt.load.calibration_server"]
            argv += ["--ttft-ms", repr(float(self.ttft_ms)), "--itl-ms", repr(float(self.itl_ms))]
            argv += ["--port", str(self.port or 0), "--reuse-port"]
            proc = subprocess.Popen(
                argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE
            )
            self._procs.append(proc)
            assert proc.stdout is not None
            ready, _, _ = select.select([proc.stdout], [], [], _START_TIMEOUT_S)
            line = proc.stdout.readline() if ready else b""
            ports = line.split()
            if len(ports) != 2 or not all(p.isdigit() for p in ports):
                self.__exit__(None, None, None)
                raise CalibrationError(
                    "the load generator's calibration server did not start"
                    f" (python -m tokenwatt.load.calibration_server): {line!r}; set"
                    " load.calibrate: false to run without it"
                )
            self.port = int(ports[0])
            self.control_ports.append(int(ports[1]))
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        procs, self._procs = self._procs, []
        for proc in procs:
            if proc.stdin is not None:
                proc.stdin.close()  # the server exits when its stdin closes
        for proc in procs:
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            for pipe in (proc.stdout, proc.stderr):
                if pipe is not None:
                    pipe.close()

    def stamps(self) -> dict[str, list[int]]:
        """Every process's stamps since the last call (and forget them).

        Raises:
            CalibrationError: a process did not answer within :data:`STAMPS_TIMEOUT_S`.
        """
        merged: dict[str, list[int]] = {}
        for control in self.control_ports:
            try:
                answer = httpx.get(f"http://127.0.0.1:{control}/stamps", timeout=STAMPS_TIMEOUT_S)
                answer.raise_for_status()
            except httpx.HTTPError as e:
                raise CalibrationError(
                    "the load generator's calibration server did not give its stamps"
                    f" (control port {control}, {type(e).__name__}: {e}); set"
                    " load.calibrate: false to run without it"
                ) from e
            data = answer.json()
            assert isinstance(data, dict)
            merged.update(data)
        return merged


def rung_rates(sweep: SweepSpec, max_rungs: int = MAX_RUNGS) -> list[float]:
    """The rates of the calibration's rungs, lowest first (module docstring).

    ``max_rungs`` 1: the sweep's first rate only (quick mode).
    """
    if sweep.rates:
        low, high = float(min(sweep.rates)), float(max(sweep.rates))
    else:
        low, high = float(sweep.start_rps), float(sweep.max_rps)
    if max_rungs <= 1:
        return [low]
    rates: list[float] = []
    rate = low
    while rate < high and len(rates) < max_rungs - 1:
        rates.append(rate)
        rate *= RUNG_GROWTH
    rates.append(high)
    return rates


def _percentile(values: list[float], q: float) -> float | None:
    """The nearest-rank percentile (:func:`tokenwatt.metrics.nearest_rank`), None of nothing."""
    return round(nearest_rank(np.sort(np.asarray(values, dtype=float)), q), 4) if values else None


def rung_warmup_s(ttft_ms: float, itl_ms: float, tokens: int) -> float:
    """A rung's warm-up: :data:`WARMUP_S`, or one stream's length where that is longer, s."""
    return max(WARMUP_S, (ttft_ms + (tokens - 1) * itl_ms) / 1000.0)


def server_lateness_ms(
    stamps: dict[str, list[int]], *, ttft_ms: float, itl_ms: float
) -> list[float]:
    """How late the server wrote each event against its own schedule, ms.

    A request read at ``t`` has its k-th write (k = 0, 1, ...) due at ``t + ttft + k itl``
    (the server's schedule, :mod:`tokenwatt.load.calibration_server`); each stamps list is
    ``[t_read_ns, t_write_ns, ...]``.
    """
    ttft_ns, itl_ns = round(ttft_ms * 1e6), round(itl_ms * 1e6)
    late: list[float] = []
    for read, *writes in stamps.values():
        due = read + ttft_ns
        for written in writes:
            late.append(max(0.0, (written - due) / 1e6))
            due += itl_ns
    return late


def _errors(
    record: ProbeRecord, server: dict[str, list[int]], by_time: dict[float, str]
) -> tuple[list[float], list[float]]:
    """TTFT and TPOT errors, ms, of the window requests matched to the server's stamps.

    ``by_time``: each window request's scheduled send (s from the window start, rounded to the
    µs) to the key of its body.
    """
    table = record.requests
    if table is None:
        return [], []
    ttft: list[float] = []
    tpot: list[float] = []
    for t_s, client_ttft, client_tpot, status in zip(
        table.t_sched_s, table.ttft_ms, table.tpot_ms, table.status, strict=True
    ):
        key = by_time.get(round(t_s, 6))
        stamps = server.get(key) if key is not None else None
        if status != "ok" or stamps is None or len(stamps) < 2 or client_ttft is None:
            continue
        ttft.append(client_ttft - (stamps[1] - stamps[0]) / 1e6)
        if client_tpot is not None and len(stamps) > 2:
            tpot.append(client_tpot - (stamps[-1] - stamps[1]) / 1e6 / (len(stamps) - 2))
    return ttft, tpot


async def _rung(
    gen: LoadGenerator,
    server: CalibrationServer,
    index: int,
    request_rate: float,
    tokens: int,
    progress: Callable[[str], None] | None,
) -> CalibrationRung:
    if progress is not None:
        progress(f"rung {index + 1}: {request_rate:,.6g} req/s x {tokens} tokens")
    warmup_s = rung_warmup_s(server.ttft_ms, server.itl_ms, tokens)
    plan = ProbePlan(phase="search", rate_rps=request_rate, warmup_s=warmup_s, window_s=WINDOW_S)
    record = await gen.probe(plan, index=index, slo=_PERMISSIVE)
    stamps = await asyncio.to_thread(server.stamps)
    late = server_lateness_ms(stamps, ttft_ms=server.ttft_ms, itl_ms=server.itl_ms)
    late_p99 = _percentile(late, 99)
    work, engine, stream = gen.workload, gen.engine, gen.last_stream
    assert stream is not None  # set by the probe
    by_time: dict[float, str] = {}
    for i, offset in enumerate(work.arrivals(request_rate, stream=stream)):
        if offset >= warmup_s + WINDOW_S:
            break
        if offset >= warmup_s:
            key = body_key(request_body(engine, work.request(i, stream=stream)))
            if key in stamps:
                by_time[round(offset - warmup_s, 6)] = key
    ttft, tpot = _errors(record, stamps, by_time)
    table = record.requests
    lags = sorted(table.send_lag_ms) if table is not None else []
    return CalibrationRung(
        rate_rps=request_rate,
        events_per_s=round(request_rate * tokens, 1),
        workers=record.workers,
        window_requests=record.window_requests,
        client_bound=record.client_bound,
        client_bound_reasons=record.client_bound_reasons,
        send_lag_p50_ms=_percentile(lags, 50),
        send_lag_p99_ms=round(record.send_lag_p99_ms, 4),
        ttft_error_p50_ms=_percentile(ttft, 50),
        ttft_error_p99_ms=_percentile(ttft, 99),
        tpot_error_p50_ms=_percentile(tpot, 50),
        tpot_error_p99_ms=_percentile(tpot, 99),
        matched_requests=len(ttft),
        client_cpu_s=record.client_cpu_s,
        server_late_p99_ms=late_p99,
        server_bound=late_p99 is not None and late_p99 > MAX_SEND_LAG_P99_MS,
    )


async def calibrate(
    engine: EngineSpec,
    workload: Workload,
    sweep: SweepSpec,
    *,
    request_timeout_s: float,
    max_concurrency: int,
    min_workers: int = 1,
    max_rungs: int = MAX_RUNGS,
    progress: Callable[[str], None] | None = None,
    itl_ms: float | None = None,
) -> ClientCalibration:
    """Run the calibration (module docstring) and return what it measured.

    ``min_workers``: fewest load workers (the open-file split, :mod:`tokenwatt.load.open_files`).
    ``itl_ms``: the server's gap between tokens; None (runs): a stream lasts about
    :data:`STREAM_S`. A longer gap holds more streams open at once for the same event rate.

    Raises:
        CalibrationError: the calibration server did not start.
    """
    t0 = time.monotonic()
    tokens = max(1, min(MAX_OUTPUT_TOKENS, round(workload.mean_output_tokens())))
    if itl_ms is None:
        itl_ms = max(0.05, STREAM_S * 1000.0 / tokens)
    turns = workload.mean_turns
    cal_work = Workload(
        name="calibration",
        api="completions",
        vocab_size=workload.vocab_size,
        seed=workload.seed,
        arrival=ArrivalSpec(process="poisson"),
        input_dist=16,
        output_dist=tokens,
        rows=None,
        context_tokens=None,
    )
    rungs: list[CalibrationRung] = []
    ceiling: float | None = None
    server_bound_at: float | None = None
    found = False
    processes = server_processes()
    with CalibrationServer(ttft_ms=TTFT_MS, itl_ms=itl_ms, processes=processes) as server:
        cal_engine = engine.model_copy(
            update={
                "endpoint": f"{server.url}/v1",
                "model": "calibration",
                "api": "completions",
                "ignore_eos": True,
                "api_key_env": None,
                "extra_body": {},
            }
        )
        async with LoadGenerator(
            cal_engine,
            cal_work,
            env=os.environ,
            request_timeout_s=request_timeout_s,
            max_concurrency=max_concurrency,
            min_workers=min_workers,
        ) as gen:
            for index, rate in enumerate(rung_rates(sweep, max_rungs)):
                rung = await _rung(gen, server, index, rate * turns, tokens, progress)
                rungs.append(rung)
                if rung.client_bound:  # the client's own rule, whatever else was busy
                    found = True
                    break
                if rung.server_bound:  # it did not get the events it planned: not counted
                    server_bound_at = rate
                    break
                ceiling = rate
    calibration = ClientCalibration(
        server=(
            f"tokenwatt's calibration server on this host"
            f" ({processes} process{'es' if processes > 1 else ''}): {tokens} tokens per"
            f" stream, first after {TTFT_MS:g} ms, then every {itl_ms:.3g} ms"
        ),
        ttft_ms=TTFT_MS,
        itl_ms=round(itl_ms, 4),
        output_tokens=tokens,
        rungs=rungs,
        ceiling_rps=ceiling,
        ceiling_found=found,
        seconds=round(time.monotonic() - t0, 2),
        server_processes=processes,
        server_bound_rps=server_bound_at,
    )
    logger.info(
        "calibration: ceiling %s req/s%s in %.1f s",
        calibration.ceiling_rps,
        "" if found else " (at least: no rung was client-bound)",
        calibration.seconds,
    )
    return calibration


def calibration_text(calibration: ClientCalibration) -> str:
    """One line for the terminal and the page: the ceiling and the errors at it."""

    def ms(value: float | None) -> str:
        return "n/a" if value is None else f"{value:.2f} ms"

    passed = [r for r in calibration.rungs if not (r.client_bound or r.server_bound)]
    behind = next((r for r in calibration.rungs if r.server_bound), None)
    server_note = ""
    if behind is not None:
        server = (
            f"the calibration server ({calibration.server_processes} process"
            f"{'es' if calibration.server_processes > 1 else ''})"
        )
        late = f"p99 {ms(behind.server_late_p99_ms)} late"
        server_note = (
            f"; {server} was behind its own schedule there too ({late})"
            if behind.client_bound
            else f"; at {calibration.server_bound_rps or behind.rate_rps:,.6g} req/s {server}"
            " fell behind its own schedule"
            f" ({late}), so the client was not measured above"
        )
    if calibration.ceiling_rps is None or not passed:
        first = calibration.rungs[0] if calibration.rungs else None
        if first is not None and not first.client_bound:
            return f"not measured{server_note}"
        why = "; ".join(first.client_bound_reasons) if first is not None else "no rung ran"
        return f"client-bound already at the first rung ({why}){server_note}"
    top = passed[-1]
    if calibration.ceiling_found:
        ceiling = f"ceiling {calibration.ceiling_rps:,.6g} req/s"
    elif behind is not None:
        ceiling = f"not client-bound up to {calibration.ceiling_rps:,.6g} req/s"
    else:
        ceiling = f"not client-bound up to {calibration.ceiling_rps:,.6g} req/s (the highest tried)"

    return (
        f"{ceiling}, {top.events_per_s:,.0f} events/s; there p99 send lag"
        f" {ms(top.send_lag_p99_ms)}, TTFT error p50 {ms(top.ttft_error_p50_ms)} / p99"
        f" {ms(top.ttft_error_p99_ms)}, TPOT error p99 {ms(top.tpot_error_p99_ms)} against the"
        f" server's stamps{server_note} ({calibration.seconds:g} s)"
    )


def check_planned_rates(calibration: ClientCalibration, sweep: SweepSpec) -> None:
    """Refuse a run whose planned rates the calibration says the client cannot pace.

    Raises:
        CalibrationError: the first rate, or a listed rate, above a ceiling that was found.
    """
    if not calibration.ceiling_found:
        return
    ceiling = calibration.ceiling_rps or 0.0
    planned = [float(r) for r in sweep.rates] if sweep.rates else [float(sweep.start_rps)]
    over = [r for r in planned if r > ceiling]
    if not over:
        return
    bound = next(r for r in calibration.rungs if r.client_bound)
    field = "sweep.rates" if sweep.rates else "sweep.start_rps"
    raise CalibrationError(
        f"{field}: {over[0]:g} is above what this load generator can pace here: its"
        f" calibration was client-bound at {bound.rate_rps:,.6g} req/s"
        f" ({'; '.join(bound.client_bound_reasons)}), its ceiling"
        f" {'none' if calibration.ceiling_rps is None else f'{ceiling:,.6g}'}: lower the rate,"
        " give the load generator more CPUs (or a Ray cluster, load.cluster), or set"
        " load.calibrate: false to measure anyway"
    )

"""Measuring one configuration: pre-flight, accuracy, the sweep, power and MBU, the run file.

This module orchestrates; each concept lives in its own module (load generator, sweep, power,
energy, MBU, accuracy) and is only called from here. Order of work:

1. **Pre-flight**, before any load: the output path is writable; the simulator is started if
   the spec asks for it; the endpoint answers and serves ``engine.model``; its version is read
   and compared with ``engine.version``; the engine's own configuration is read
   (:mod:`tokenwatt.engine_config`); the GPU inventory is read; the power source opens.
   Each failure is one clear message and exit status 2, with nothing written.
2. **Accuracy** (unless skipped): a broken endpoint is found before the long sweep.
3. **Sweep** (:mod:`tokenwatt.sweep`): every probe is kept, with its window requests.
4. **Figures**: power and energy over the confirmed windows, MBU at the confirmed rate.

Ctrl-C stops the load, writes the run file marked incomplete with what was measured, and
raises :class:`~tokenwatt.errors.Interrupted` (exit 130). Any other failure after the first
probe also writes the partial run, marked incomplete with the cause, before re-raising.
``--resume`` continues such a run: its probes are replayed into the sweep, which then measures
only what is missing (:mod:`tokenwatt.resume`).
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import logging
import os
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from tokenwatt import audits, energy, provenance
from tokenwatt.accuracy import accuracy_evidence, load_suite, run_accuracy
from tokenwatt.client.openai import OpenAIClient
from tokenwatt.engine_config import read_engine_config
from tokenwatt.errors import EndpointError, InputError, Interrupted, SpecError, TokenwattError
from tokenwatt.figures import outcome_figures, search_phases
from tokenwatt.geometry import ModelGeometry, geometry_for_spec
from tokenwatt.gpus import preset
from tokenwatt.inventory import read_inventory
from tokenwatt.load.calibrate import (
    calibrate,
    calibration_text,
    check_planned_rates,
)
from tokenwatt.load.engine_metrics import find_running_gauge
from tokenwatt.load.open_files import ensure_open_files
from tokenwatt.load.prefix import cache_block_tokens
from tokenwatt.load.probe import LoadGenerator, available_cpus
from tokenwatt.load.workload import Workload, build_workload
from tokenwatt.mbu import RatedBandwidth, estimate_mbu_for_probes, impossible_because
from tokenwatt.power import Sampler, sampler_for_spec
from tokenwatt.resume import ResumeCheck, check_resumable, merge_power, probe_seconds, replay
from tokenwatt.schema.base import Role
from tokenwatt.schema.engine import EngineConfig
from tokenwatt.schema.run import (
    AccuracyEvidence,
    AccuracyItem,
    ClientCalibration,
    Environment,
    GpuInfo,
    LoadCluster,
    MbuEvidence,
    PowerEvidence,
    PrefixReuse,
    ProbeRecord,
    ResumeInfo,
    RunFile,
    RunOutcome,
)
from tokenwatt.schema.spec import (
    AccuracySpec,
    LoadClusterSpec,
    LoadedSpec,
    MeasurementSpec,
    Spec,
    SweepSpec,
)
from tokenwatt.store import check_output, filled, load_run, save_run
from tokenwatt.sweep import ProbePlan, Strategy, make_strategy, ramped

__all__ = [
    "QUICK",
    "TERMINATED",
    "MeasureOptions",
    "Progress",
    "QuickLimits",
    "check_spec_inputs",
    "effective_settings",
    "load_cluster",
    "measure",
    "prefix_reuse",
]

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class QuickLimits:
    """What ``--quick`` does to a spec (validation runs only: the figures are coarse).

    Durations and repeats are capped, the search grows by at least ``min_growth`` and bisects
    at most ``bisect_steps`` times, the adaptive sweep spends at most ``budget_s``
    probe-seconds (room for the search, two stream pairs and a confirmation on the demo's
    scenario: with 90 it had one pair, too few for the comparison to hold the streams fixed),
    and accuracy asks at most ``accuracy_limit`` questions. The workload is never
    changed: a probe still waits for every window request to finish.
    """

    warmup_s: float = 3.0
    search_window_s: float = 5.0
    window_s: float = 10.0
    repeats: int = 1
    bisect_steps: int = 1
    min_growth: float = 1.5
    budget_s: float = 150.0
    accuracy_limit: int = 10


QUICK = QuickLimits()

_NO_CLIP_TOKENS = 2**31
"""A context length no request reaches (for reading a workload without clipping it)."""

TERMINATED = "SIGTERM"
"""Cancel message of the measurement task when SIGTERM stops it (the CLI sends it)."""


class Progress(Protocol):
    """Where :func:`measure` reports what it is doing (the CLI draws it)."""

    def phase(self, name: str, detail: str = "") -> None:
        """A new phase starts (pre-flight, accuracy, sweep, figures, writing)."""

    def accuracy(self, done: int, total: int) -> None:
        """Accuracy answers received so far."""

    def probe_started(self, plan: ProbePlan, index: int, workers: int) -> None:
        """A probe starts."""

    def probe_finished(self, record: ProbeRecord) -> None:
        """A probe finished."""


@dataclass(frozen=True)
class MeasureOptions:
    """What ``tokenwatt measure`` was asked to do."""

    spec: LoadedSpec
    """The spec as loaded: as written, and the files it names resolved
    (:func:`tokenwatt.store.load_spec` of the file :func:`tokenwatt.store.resolve_spec_path`
    found)."""
    spec_arg: str
    """The spec path as given on the command line (for the reproduce line)."""
    label: str
    role: Role
    out: Path
    command: str
    """The command line, shell-quoted, for the reproduce block."""
    description: str | None = None
    quick: bool = False
    no_accuracy: bool = False
    force: bool = False
    """Replace an existing run file at ``out`` (never a file of another kind)."""
    resume: Path | None = None
    """An incomplete run file to continue (``--resume``); ``out`` may be the same file."""
    env: Mapping[str, str] = field(default_factory=lambda: dict(os.environ))
    ray_address: str | None = None
    """``--ray``: run the load workers on this Ray cluster (replaces ``load.cluster.address``)."""


def _spec_sha256(loaded: LoadedSpec) -> str:
    """The spec's SHA-256 as loaded (never the file as it is now: it may have changed since)."""
    if loaded.sha256 is None:
        raise SpecError(f"{loaded.path}: the spec was not loaded from its file (no SHA-256)")
    return loaded.sha256


def effective_settings(
    spec: Spec, *, quick: bool
) -> tuple[MeasurementSpec, SweepSpec, AccuracySpec | None]:
    """The durations, sweep and accuracy settings in force (``--quick`` shortens them)."""
    m, s, a = spec.measurement, spec.sweep, spec.accuracy
    if not quick:
        return m, s, a
    m = m.model_copy(
        update={
            "warmup_s": min(m.warmup_s, QUICK.warmup_s),
            "search_window_s": min(m.search_window_s, QUICK.search_window_s),
            "window_s": min(m.window_s, QUICK.window_s),
            "repeats": min(m.repeats, QUICK.repeats),
        }
    )
    s = s.model_copy(
        update={
            "bisect_steps": min(s.bisect_steps, QUICK.bisect_steps),
            "growth": max(s.growth, QUICK.min_growth),
            "budget_s": min(s.budget_s or QUICK.budget_s, QUICK.budget_s),
        }
    )
    if a is not None:
        a = a.model_copy(update={"limit": min(a.limit, QUICK.accuracy_limit)})
    return m, s, a


def _check_writable(out: Path, *, force: bool) -> None:
    """Fail before any load if the run file could not be written; leave nothing behind.

    An existing file is replaced only with ``force`` and only if it is a run file
    (:func:`~tokenwatt.store.check_output`). Folders missing on the way to ``out`` are created
    for the test and removed again (the run file's own write creates them at the end), so a
    failed pre-flight writes nothing.
    """
    check_output(out, kind="run", force=force)
    created: list[Path] = []
    try:
        missing = [p for p in [out.parent, *out.parent.parents] if not p.exists()]
        for folder in reversed(missing):
            folder.mkdir()
            created.append(folder)
        with tempfile.NamedTemporaryFile(dir=out.parent, prefix=f".{out.name}.", suffix=".probe"):
            pass
    except OSError as exc:
        raise InputError(f"{out}: cannot write here: {exc.strerror or exc}") from None
    finally:
        for folder in reversed(created):
            with contextlib.suppress(OSError):
                folder.rmdir()


def check_spec_inputs(loaded: LoadedSpec) -> Workload:
    """Read every file a spec names as a measurement will (config, trace, suite), bounded.

    Returns the workload they make (its context clip the model's, not yet the server's).

    ``tokenwatt validate`` and the pre-flight call it, so a bad trace (a NaN timestamp, a huge
    CSV field) or suite fails in a second, before any load, not inside a probe.

    Raises:
        InputError: naming the file, line and field.
    """
    geometry = geometry_for_spec(loaded)
    # Only reading here: the context requests are clipped to is the server's, learnt later.
    workload = build_workload(
        loaded.spec,
        trace_file=loaded.trace_file,
        prompts_file=loaded.prompts_file,
        context_tokens=geometry.max_position_embeddings or _NO_CLIP_TOKENS,
    )
    if loaded.suite_file is not None:
        load_suite(loaded.suite_file)
    return workload


_WARMUP_SAMPLE = 4096


def _warn_short_warmup(workload: Workload, spec: Spec, effective: MeasurementSpec) -> None:
    """Warn before any load when the warm-up cannot reach steady state (audits, "Steady state").

    The times in the system are foreseen from the workload's output lengths at the SLO's time
    per output token: an answer that long at that pace is what a probe near capacity sees.
    """
    if workload.sessions is not None:
        return  # a session's turns come after its replies: no length to foresee
    tpot_s = spec.slo.tpot_p99_ms / 1000.0
    foreseen = [workload.lengths(i, stream=0)[1] * tpot_s for i in range(_WARMUP_SAMPLE)]
    short = audits.shortfall(foreseen, float(effective.warmup_s)) * 100.0
    if short <= audits.STEADY_STATE_SHORTFALL_PCT:
        return
    logger.warning(
        "warm-up %g s is short for this workload: answers of up to %s tokens at the SLO's %g ms"
        " per token stay in the system up to %.0f s, so about %.0f %% of the steady-state load"
        " is still missing when a window opens (latencies read low, capacity high); a warm-up"
        " of about %.0f s reaches %g %% (measurement.warmup_s)",
        effective.warmup_s,
        f"{round(max(foreseen) / tpot_s):,}",
        spec.slo.tpot_p99_ms,
        max(foreseen),
        short,
        audits.steady_warmup_s(foreseen, audits.STEADY_STATE_SHORTFALL_PCT),
        audits.STEADY_STATE_SHORTFALL_PCT,
    )


def _sim_gpus(spec: Spec) -> list[GpuInfo]:
    gpu = preset(spec.engine.sim.gpu if spec.engine.sim else "h100-sxm")
    count = spec.model.tensor_parallel * spec.model.replicas
    return [
        GpuInfo(
            index=i,
            name=f"{gpu.name} (simulated)",
            memory_total_mib=gpu.memory_gb * 1e9 / 2**20,
            power_limit_w=(spec.engine.sim.power_limit_w if spec.engine.sim else None)
            or gpu.power_limit_w,
        )
        for i in range(count)
    ]


@dataclass
class _State:
    """What has been measured so far (written out even when the run is cut short)."""

    started: dt.datetime
    engine_version: str | None = None
    engine_version_source: str | None = None
    engine_config: EngineConfig | None = None
    simulated: bool = False
    """The server is a simulator: the spec's ``sim`` endpoint, or one that says so on /version."""
    driver: str | None = None
    gpus: list[GpuInfo] = field(default_factory=list)
    rated: RatedBandwidth | None = None
    geometry: ModelGeometry | None = None
    probes: list[ProbeRecord] = field(default_factory=list)
    probe_ns: list[int] = field(default_factory=list)
    accuracy: AccuracyEvidence | None = None
    accuracy_spec: AccuracySpec | None = None
    answers: list[AccuracyItem] = field(default_factory=list)
    """Accuracy answers as they come back (kept when the check is cut short)."""
    power: PowerEvidence | None = None
    mbu: MbuEvidence | None = None
    outcome: RunOutcome | None = None
    resumed: list[ResumeInfo] = field(default_factory=list)
    """Earlier resumptions and this one (``--resume``)."""
    resumed_power: PowerEvidence | None = None
    """The interrupted run's power evidence, joined to this process's samples at the end."""
    load_cluster: LoadCluster | None = None
    """The Ray cluster the load workers ran on (``load.cluster`` or ``--ray``)."""
    prefix_reuse: PrefixReuse | None = None
    """The workload's expected prefix-cache reuse (shared prefixes only)."""
    calibration: ClientCalibration | None = None
    """The load generator's self-calibration (``load.calibrate``)."""


def load_cluster(spec: Spec, ray_address: str | None) -> LoadClusterSpec | None:
    """Where the load workers run: the spec's ``load.cluster``, its address replaced by ``--ray``.

    ``--ray`` without ``load.cluster`` turns the cluster on with the defaults.
    """
    cluster = spec.load.cluster if spec.load is not None else None
    if ray_address is None:
        return cluster
    if cluster is None:
        return LoadClusterSpec(address=ray_address)
    return cluster.model_copy(update={"address": ray_address})


def _outcome(state: _State, sweep: Strategy, spec: Spec) -> RunOutcome:
    result = sweep.result
    figures = outcome_figures(
        state.probes,
        result.confirm_probes,
        result.confirmed_rate_rps,
        first_token=spec.slo.first_token,
    )
    seconds = [ns / 1e9 for ns in state.probe_ns]
    search = [s for s, p in zip(seconds, state.probes, strict=True) if p.phase in search_phases]
    return RunOutcome(
        confirmed_rate_rps=figures.confirmed_rate_rps,
        confirm_probes=list(result.confirm_probes),
        slo_pass_count=figures.slo_pass_count,
        goodput_tok_s=figures.goodput_tok_s,
        repeat_goodputs_tok_s=figures.repeat_goodputs_tok_s,
        ttft_p99_ms=figures.ttft_p99_ms,
        tpot_p99_ms=figures.tpot_p99_ms,
        ttfat_p99_ms=figures.ttfat_p99_ms,
        probe_seconds=sum(seconds),
        search_probe_seconds=sum(search),
    )


def _run_file(
    opts: MeasureOptions,
    state: _State,
    effective: MeasurementSpec,
    *,
    complete: bool,
    reason: str | None,
) -> RunFile:
    spec = filled(opts.spec.spec)
    geometry = state.geometry
    return RunFile(
        label=opts.label,
        description=opts.description,
        role=opts.role,
        quick=opts.quick,
        simulated=state.simulated or spec.engine.endpoint == "sim",
        complete=complete,
        incomplete_reason=reason,
        command=opts.command,
        spec_path=opts.spec_arg,
        spec=spec,
        effective=effective,
        model_shape=geometry.shape if geometry is not None else None,
        model_geometry_key=geometry.identity if geometry is not None else None,
        environment=Environment(
            tokenwatt_version=provenance.tokenwatt_version(),
            git_commit=provenance.git_commit(),
            host=provenance.host_name(),
            platform=provenance.platform_text(),
            python=provenance.python_version(),
            engine_version=state.engine_version,
            engine_version_source=state.engine_version_source,
            engine_config=state.engine_config,
            driver=state.driver,
            gpus=state.gpus,
            spec_sha256=_spec_sha256(opts.spec),
            started_utc=state.started,
            finished_utc=dt.datetime.now(dt.UTC),
            load_cluster=state.load_cluster,
        ),
        probes=state.probes,
        outcome=state.outcome,
        power=state.power,
        mbu=state.mbu,
        accuracy=state.accuracy,
        resumed=state.resumed,
        prefix_reuse=state.prefix_reuse,
        calibration=state.calibration,
    )


def prefix_reuse(
    workload: Workload, spec: Spec, engine_config: EngineConfig | None = None
) -> PrefixReuse | None:
    """What the workload's shared prefixes should give the engine's cache, at its block size.

    The block size: the engine's ``/metrics`` where read, else the simulator's, else vLLM's GPU
    default.
    """
    if not workload.shares_prefixes:
        return None
    info = engine_config.info if engine_config is not None else []
    sim = spec.engine.sim if spec.engine.endpoint == "sim" else None
    block, source = cache_block_tokens(info, sim_block_size=sim.block_size if sim else None)
    rate = workload.expected_hit_rate(block)
    if rate is None:
        return None
    return PrefixReuse(
        expected_hit_rate_pct=round(100 * rate, 2), block_tokens=block, block_source=source
    )


async def _preflight(client: OpenAIClient, spec: Spec, state: _State) -> int | None:
    """Check the endpoint and read its configuration; return its context length if told."""
    where = client.base_url
    try:
        models = await client.models()
    except TokenwattError:
        raise
    except Exception as exc:
        raise EndpointError(f"{where}: cannot list models: {exc}") from exc
    if spec.engine.model not in models:
        raise EndpointError(
            f"{where} serves {', '.join(repr(m) for m in models) or 'no model'},"
            f" not engine.model {spec.engine.model!r}"
        )
    version, source = await client.server_version()
    state.engine_version, state.engine_version_source = version, source
    state.simulated = spec.engine.endpoint == "sim" or await client.says_simulated()
    if state.simulated and spec.engine.endpoint != "sim":
        logger.warning(
            "%s says it is a simulator (GET /version): the run is marked simulated", where
        )
    expected = spec.engine.version
    if expected is not None and version is not None and version != expected:
        raise EndpointError(
            f"{where} runs {spec.engine.name} {version} ({source}), but the spec"
            f" says engine.version {expected!r}: fix the spec or the server"
        )
    if expected is not None and version is None:
        logger.warning("engine version not reported (%s); the spec says %s", source, expected)
    max_model_len = await client.max_model_len(spec.engine.model)
    state.engine_config = await read_engine_config(client, max_model_len=max_model_len)
    return max_model_len


async def _engine_metrics(client: OpenAIClient) -> str | None:
    """The engine's ``/metrics`` URL when it has a running-request gauge, else None.

    The running batch B of the MBU estimate then comes from the engine's own gauge,
    else from Little's law; each probe records which (``batch_source``).
    """
    url = f"{client.root_url}/metrics"
    why_not = await find_running_gauge(url)
    if why_not is None:
        logger.info("running batch: sampling the engine's gauge at %s", url)
        return url
    logger.info("running batch from Little's law: %s", why_not)
    return None


async def measure(opts: MeasureOptions, progress: Progress) -> RunFile:
    """Measure one configuration and write its run file (see the module docstring).

    Raises:
        InputError: bad spec content found during pre-flight (exit 2).
        EndpointError: the endpoint cannot be used (exit 2).
        PowerError: the power source cannot be opened (exit 2).
        Interrupted: Ctrl-C; the partial run was written (exit 130).
    """
    loaded = opts.spec
    spec = loaded.spec
    eff_m, eff_s, eff_a = effective_settings(spec, quick=opts.quick)
    if opts.no_accuracy:
        eff_a = None
    state = _State(started=dt.datetime.now(dt.UTC))
    progress.phase("pre-flight", "checking the output path, endpoint, GPUs and power source")
    previous = _load_resumable(opts, eff_m, accuracy=eff_a is not None)
    same_file = opts.resume is not None and opts.resume.resolve() == opts.out.resolve()
    _check_writable(opts.out, force=opts.force or same_file)
    check_spec_inputs(loaded)
    # Ray actors hold their streams on their own hosts; here, a cap one process may not hold is
    # split over local workers (up to one per CPU).
    cluster = load_cluster(spec, opts.ray_address)
    min_workers = ensure_open_files(
        eff_m.max_concurrency, max_workers=available_cpus() if cluster is None else 1
    )
    if min_workers > 1:
        progress.phase(
            "pre-flight",
            f"measurement.max_concurrency {eff_m.max_concurrency:,} is more streams than one"
            f" process may hold open: every probe runs on at least {min_workers} load workers",
        )
    if previous is not None:
        state.started = previous.environment.started_utc
    sim = None
    sampler: Sampler | None = None
    sweep = make_strategy(eff_s, eff_m, spec.slo, workload=spec.workload)
    started_load = False
    try:
        if spec.engine.endpoint == "sim":
            from tokenwatt.sim.launch import launch_for_spec

            progress.phase("pre-flight", "starting the embedded simulator")
            sim = await asyncio.to_thread(launch_for_spec, loaded)
        state.geometry = geometry = geometry_for_spec(loaded)
        base_url = sim.base_url if sim is not None else None
        async with OpenAIClient(
            spec.engine, base_url=base_url, env=opts.env, request_timeout_s=30.0
        ) as client:
            context_tokens = await _preflight(client, spec, state)
            metrics_url = sim.metrics_url if sim is not None else await _engine_metrics(client)
        workload = build_workload(
            spec,
            trace_file=loaded.trace_file,
            prompts_file=loaded.prompts_file,
            context_tokens=(
                context_tokens if context_tokens is not None else geometry.max_position_embeddings
            ),
        )
        _warn_short_warmup(workload, spec, eff_m)
        state.prefix_reuse = prefix_reuse(workload, spec, state.engine_config)
        if (spec.load is None or spec.load.calibrate) and cluster is None and not opts.quick:
            progress.phase("calibration", "the load generator against a local server")
            state.calibration = await calibrate(
                spec.engine,
                workload,
                eff_s,
                request_timeout_s=float(eff_m.request_timeout_s),
                max_concurrency=eff_m.max_concurrency,
                min_workers=min_workers,
                progress=lambda text: progress.phase("calibration", text),
            )
            progress.phase("calibration", calibration_text(state.calibration))
            check_planned_rates(state.calibration, eff_s)
        generator = LoadGenerator(
            spec.engine,
            workload,
            base_url=base_url,
            env=opts.env,
            request_timeout_s=float(eff_m.request_timeout_s),
            max_concurrency=eff_m.max_concurrency,
            metrics_url=metrics_url,
            cluster=cluster,
            ramp=eff_s.ramp,
            min_workers=min_workers,
        )
        if generator.cluster is not None:
            progress.phase("pre-flight", f"joining the Ray cluster at {generator.cluster.address}")
        async with generator as gen:
            state.load_cluster = gen.cluster_info
            if sim is not None:
                state.gpus = _sim_gpus(spec)
                state.rated = RatedBandwidth(
                    preset(spec.engine.sim.gpu if spec.engine.sim else "h100-sxm").mem_bw_tbs,
                    len(state.gpus),
                    "GPU-name table (simulated GPU)",
                )
            elif state.simulated:
                # A simulator reached through a URL: this host's GPUs are not what it simulates.
                logger.warning("no GPU inventory: the server is a simulator started elsewhere")
            else:
                count = spec.model.tensor_parallel * spec.model.replicas
                inventory = read_inventory(spec.hardware, gpus_in_use=count)
                state.driver, state.gpus = inventory.driver, inventory.gpus
                if inventory.rated_bw_tbs_per_gpu is not None:
                    state.rated = RatedBandwidth(
                        inventory.rated_bw_tbs_per_gpu,
                        count,
                        inventory.rated_bw_source or "inventory",
                    )
            sampler = sampler_for_spec(
                spec,
                default_metrics_url=sim.metrics_url if sim is not None else None,
                env=opts.env,
            )
            sampler.start()
            if previous is not None and previous.probes:
                state.accuracy = previous.accuracy  # the interrupted run got past the check
            elif eff_a is not None:
                progress.phase("accuracy", f"{eff_a.name}: {eff_a.limit} questions x {eff_a.seeds}")
                assert loaded.suite_file is not None  # resolved with the accuracy section
                state.accuracy_spec = eff_a
                state.accuracy = await run_accuracy(
                    gen.client,
                    eff_a,
                    load_suite(loaded.suite_file),
                    suite_path=eff_a.suite,
                    meaningful=not state.simulated,
                    progress=progress.accuracy,
                    answers=state.answers,
                )
            progress.phase("sweep", "searching the SLO boundary")
            started_load = True
            if previous is not None:
                _replay(
                    opts,
                    previous,
                    sweep,
                    state,
                    progress,
                    reused_accuracy=eff_a is not None,
                    ramp_warmup_s=eff_s.ramp_warmup_s,
                )
            while (plan := sweep.next()) is not None:
                plan = ramped(plan, state.probes[-1] if state.probes else None, eff_s, spec.slo)
                index = len(state.probes)
                progress.probe_started(plan, index, gen.workers_for(plan.rate_rps))
                t0 = time.monotonic_ns()
                record = await gen.probe(plan, index=index, slo=spec.slo)
                state.probe_ns.append(time.monotonic_ns() - t0)
                record = record.model_copy(update={"probe_s": state.probe_ns[-1] / 1e9})
                state.probes.append(record)
                sweep.observe(record, state.probe_ns[-1] / 1e9)
                progress.probe_finished(record)
        progress.phase("figures", "power, energy and MBU over the confirmed windows")
        _figures(state, sweep, sampler, spec)
        sampler = None
        run = _run_file(opts, state, eff_m, complete=True, reason=None)
        progress.phase("writing", str(opts.out))
        save_run(run, opts.out)
        return run
    except (KeyboardInterrupt, asyncio.CancelledError) as exc:
        cause = (
            "terminated (SIGTERM)" if TERMINATED in exc.args else "interrupted by the user (Ctrl-C)"
        )
        if not started_load and not state.probes and not state.answers:
            raise Interrupted(f"{cause} during pre-flight; nothing was written") from None
        _finish_partial(opts, state, sweep, sampler, spec, eff_m, cause)
        raise Interrupted(
            f"{cause}: {len(state.probes)} probe(s) and {len(state.answers)} accuracy answer(s)"
            f" measured; {opts.out} written, marked incomplete"
        ) from None
    except TokenwattError as exc:
        if state.probes or state.answers:
            _finish_partial(opts, state, sweep, sampler, spec, eff_m, f"aborted: {exc}")
            raise type(exc)(
                f"{exc} ({opts.out} written with the probes so far, marked incomplete)"
            ) from exc
        raise
    finally:
        if sampler is not None:
            with contextlib.suppress(TokenwattError):
                sampler.stop()
        if sim is not None:
            sim.stop()


def _load_resumable(
    opts: MeasureOptions, effective: MeasurementSpec, *, accuracy: bool
) -> RunFile | None:
    """The run ``--resume`` names, once it is known to continue with this command."""
    if opts.resume is None:
        return None
    previous = load_run(opts.resume)
    check_resumable(
        previous,
        opts.resume,
        ResumeCheck(
            spec=filled(opts.spec.spec),
            spec_sha256=_spec_sha256(opts.spec),
            label=opts.label,
            role=opts.role,
            quick=opts.quick,
            effective=effective,
            accuracy=accuracy,
        ),
    )
    return previous


def _replay(
    opts: MeasureOptions,
    previous: RunFile,
    sweep: Strategy,
    state: _State,
    progress: Progress,
    *,
    reused_accuracy: bool,
    ramp_warmup_s: float | None,
) -> None:
    """Put the interrupted run's probes into the sweep and the state (see tokenwatt.resume)."""
    assert opts.resume is not None
    saved_s = replay(sweep, previous.probes, opts.resume, ramp_warmup_s=ramp_warmup_s)
    state.probes = list(previous.probes)
    state.probe_ns = [round(probe_seconds(p) * 1e9) for p in previous.probes]
    state.resumed_power = previous.power
    state.resumed = [
        *previous.resumed,
        ResumeInfo(
            resumed_from=str(opts.resume),
            reused_probes=len(previous.probes),
            saved_probe_seconds=saved_s,
            reused_accuracy=reused_accuracy and bool(previous.probes),
            interrupted_reason=previous.incomplete_reason,
        ),
    ]
    progress.phase(
        "resume",
        f"{len(previous.probes)} recorded probe(s) replayed from {opts.resume},"
        f" {saved_s:,.0f} probe-seconds saved",
    )


def _figures(state: _State, sweep: Strategy, sampler: Sampler | None, spec: Spec) -> None:
    """Outcome, power/energy and MBU from what was measured (stops the sampler)."""
    state.outcome = _outcome(state, sweep, spec)
    confirm = [state.probes[i] for i in state.outcome.confirm_probes]
    accepted = confirm if state.outcome.confirmed_rate_rps is not None else []
    if sampler is not None:
        evidence = sampler.stop()
        if state.resumed:
            evidence = merge_power(state.resumed_power, evidence)
        windows, tokens = energy.confirmed_windows(accepted)
        state.power = energy.apply_window_figures(evidence, windows, output_tokens=tokens)
    if accepted and state.geometry is not None and state.rated is not None:
        state.mbu = estimate_mbu_for_probes(
            accepted,
            geometry=state.geometry,
            bandwidth=state.rated,
            replicas=spec.model.replicas,
            tensor_parallel=spec.model.tensor_parallel,
        )
        if state.mbu is not None and (why := impossible_because(state.mbu)) is not None:
            logger.warning("MBU will not be stated: %s", why)


def _finish_partial(
    opts: MeasureOptions,
    state: _State,
    sweep: Strategy,
    sampler: Sampler | None,
    spec: Spec,
    effective: MeasurementSpec,
    reason: str,
) -> None:
    """Write what was measured, marked incomplete (atomic: the old file or the new one)."""
    if state.accuracy is None and state.answers and state.accuracy_spec is not None:
        state.accuracy = accuracy_evidence(
            state.accuracy_spec,
            state.answers,
            suite_path=state.accuracy_spec.suite,
            meaningful=not state.simulated,
        )
    try:
        _figures(state, sweep, sampler, spec)
    except TokenwattError as exc:
        logger.warning("figures of the partial run could not be computed: %s", exc)
    run = _run_file(opts, state, effective, complete=False, reason=reason)
    save_run(run, opts.out)

"""``tokenwatt sim``: serve the embedded engine simulator."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import sys
import threading
from pathlib import Path
from typing import Any, get_args

from pydantic import ValidationError

from tokenwatt.cli._common import err_console
from tokenwatt.errors import InputError
from tokenwatt.gpus import GPU_PRESETS
from tokenwatt.schema.base import KvDtype, WeightDtype
from tokenwatt.schema.spec import GeometryOverrides, SimSpec
from tokenwatt.sim.engine import EngineConfig
from tokenwatt.sim.launch import SimSettings, settings_from_spec
from tokenwatt.sim.server import SimApp, serve

__all__ = ["register", "run"]


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the sub-command."""
    p = sub.add_parser(
        "sim",
        help="serve the embedded engine simulator (OpenAI API)",
        description=(
            "Serve a simulated vLLM-like engine for a GPU and model: the OpenAI API, /metrics with"
            " vLLM's names and dcgm-exporter power lines, and /version saying it is simulated."
        ),
    )
    p.add_argument("--spec", type=Path, help="take GPU, model and engine settings from a spec")
    p.add_argument(
        "--gpu",
        choices=[g.key for g in GPU_PRESETS],
        help="GPU preset (default: the spec's engine.sim.gpu, else h100-sxm)",
    )
    p.add_argument("--model", type=Path, help="the model's Hugging Face config.json")
    p.add_argument("--weight-dtype", choices=get_args(WeightDtype), help="weight storage type")
    p.add_argument("--kv-dtype", choices=get_args(KvDtype), help="KV-cache storage type")
    p.add_argument("--served-model-name", help="model name in the API (default: config folder)")
    p.add_argument("--tensor-parallel", type=int, help="GPUs serving the model")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on")
    p.add_argument("--port", type=int, default=8000, help="port (0 = any free port)")
    p.add_argument("--max-num-seqs", type=int, help="most sequences running at once")
    p.add_argument("--max-num-batched-tokens", type=int, help="token budget of a step")
    p.add_argument("--max-model-len", type=int, help="longest prompt + output")
    p.add_argument("--step-overhead-ms", type=float, help="fixed time added to every step")
    p.add_argument("--gpu-memory-utilization", type=float, help="fraction of memory to use")
    p.add_argument("--power-limit-w", type=float, help="board power limit per GPU, W")
    p.add_argument("--bandwidth-efficiency", type=float, help="fraction of rated bandwidth")
    p.add_argument("--compute-efficiency", type=float, help="fraction of peak FLOP/s")
    p.add_argument("--sim-json", help=argparse.SUPPRESS)
    p.add_argument("--geometry-json", help=argparse.SUPPRESS)
    p.add_argument("--ready-fd", type=int, help=argparse.SUPPRESS)
    p.add_argument("--exit-with-stdin", action="store_true", help=argparse.SUPPRESS)
    p.set_defaults(handler=run)


def _json_arg(raw: str | None, name: str) -> dict[str, Any]:
    if raw is None:
        return {}
    try:
        data = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise InputError(f"{name}: not JSON: {exc}") from None
    if not isinstance(data, dict):
        raise InputError(f"{name}: must be a JSON object")
    return data


def settings_from_args(args: argparse.Namespace) -> SimSettings:
    """Settings from a spec (if given), then the command-line options on top."""
    from tokenwatt.store import load_spec

    base = SimSettings()
    if args.spec is not None:
        loaded = load_spec(args.spec)
        if loaded.spec.engine.endpoint != "sim":
            raise InputError(f"{args.spec}: engine.endpoint is not 'sim'")
        base = settings_from_spec(loaded)
    sim_fields = base.sim.model_dump(exclude_none=True)
    sim_fields.update(_json_arg(args.sim_json, "--sim-json"))
    for name in (
        "max_num_seqs",
        "max_num_batched_tokens",
        "max_model_len",
        "step_overhead_ms",
        "gpu_memory_utilization",
        "power_limit_w",
        "bandwidth_efficiency",
        "compute_efficiency",
    ):
        value = getattr(args, name)
        if value is not None:
            sim_fields[name] = value
    if args.gpu is not None:
        sim_fields["gpu"] = args.gpu
    geometry_fields = base.geometry.model_dump(exclude_none=True)
    geometry_fields.update(_json_arg(args.geometry_json, "--geometry-json"))
    try:
        sim = SimSpec.model_validate(sim_fields)
        geometry = GeometryOverrides.model_validate(geometry_fields)
    except ValidationError as exc:
        first = exc.errors(include_url=False)[0]
        where = ".".join(str(p) for p in first["loc"])
        raise InputError(f"simulator option {where}: {first['msg']}") from None
    tp = args.tensor_parallel if args.tensor_parallel is not None else base.tensor_parallel
    if tp < 1:
        raise InputError("--tensor-parallel must be at least 1")
    model = args.model if args.model is not None else base.model_config
    if model is None and not geometry_fields:
        raise InputError("give the model: --model PATH/config.json (or --spec with model.config)")
    return SimSettings(
        gpu=sim.gpu,
        model_config=model,
        weight_dtype=args.weight_dtype or base.weight_dtype,
        kv_dtype=args.kv_dtype or base.kv_dtype,
        served_model_name=args.served_model_name or base.served_model_name,
        tensor_parallel=tp,
        sim=sim,
        geometry=geometry,
    )


def _exit_with_stdin() -> None:
    """Terminate this process when stdin closes (the parent that launched it went away)."""

    def watch() -> None:
        try:
            while sys.stdin.buffer.read(4096):
                pass
        except OSError:
            pass
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=watch, name="stdin-watch", daemon=True).start()


class _Stop(Exception):
    """SIGTERM arrived: leave quietly."""


def _on_sigterm(signum: int, frame: object) -> None:
    raise _Stop


def run(args: argparse.Namespace) -> int:
    """Serve until Ctrl-C or SIGTERM (both a normal way to stop: exit 0)."""
    settings = settings_from_args(args)
    config = settings.build()
    root = str(settings.model_config) if settings.model_config else settings.model_name
    app = SimApp(config, served_model_name=settings.model_name, model_root=root)
    if args.exit_with_stdin:
        _exit_with_stdin()
    # uvicorn shuts down gracefully on SIGINT/SIGTERM, then re-raises the signal with the
    # previous handlers back in place: these make that a clean exit instead of a kill.
    signal.signal(signal.SIGTERM, _on_sigterm)
    with contextlib.suppress(KeyboardInterrupt, _Stop):
        _serve(args, app, config)
    return 0


def _serve(args: argparse.Namespace, app: SimApp, config: EngineConfig) -> None:
    if args.ready_fd is None:
        err = err_console()
        err.print(
            f"[bold]tokenwatt sim[/bold]: SIMULATED {config.tensor_parallel} x {config.gpu.name},"
            f" {config.geometry.describe()}"
        )
        err.print(f"  {config.describe()}")

        def ready(port: int) -> None:
            err.print(
                f"  OpenAI API: http://{args.host}:{port}/v1  metrics:"
                f" http://{args.host}:{port}/metrics  (Ctrl-C to stop)"
            )

        asyncio.run(serve(app, host=args.host, port=args.port, on_ready=ready))
    else:
        asyncio.run(serve(app, host=args.host, port=args.port, ready_fd=args.ready_fd))

"""``tokenwatt sim``: serve the embedded engine simulator."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
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
from tokenwatt.schema.spec import SimSpec
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
    source = p.add_mutually_exclusive_group()
    source.add_argument("--spec", type=Path, help="take GPU, model and engine settings from a spec")
    # The whole SimSettings as one JSON document: how tokenwatt starts its simulator child.
    source.add_argument("--settings-json", help=argparse.SUPPRESS)
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
    p.add_argument("--block-size", type=int, help="tokens per KV-cache block (default 16)")
    p.add_argument(
        "--enable-prefix-caching",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="reuse the KV blocks of identical token-id prefixes (default: on, as vLLM)",
    )
    p.add_argument(
        "--reasoning-fraction",
        type=float,
        help="chat: share of each answer's tokens streamed first as reasoning_content (default 0)",
    )
    p.add_argument("--ready-fd", type=int, help=argparse.SUPPRESS)
    p.add_argument("--exit-with-stdin", action="store_true", help=argparse.SUPPRESS)
    p.set_defaults(handler=run)


_SIM_OPTIONS = (
    "max_num_seqs",
    "max_num_batched_tokens",
    "max_model_len",
    "step_overhead_ms",
    "gpu_memory_utilization",
    "power_limit_w",
    "bandwidth_efficiency",
    "compute_efficiency",
    "block_size",
    "enable_prefix_caching",
    "reasoning_fraction",
)
"""Options that set a field of ``engine.sim`` (:class:`~tokenwatt.schema.spec.SimSpec`)."""

_SETTINGS_OPTIONS = ("weight_dtype", "kv_dtype", "served_model_name", "tensor_parallel")
"""Options that set a field of :class:`~tokenwatt.sim.launch.SimSettings` of the same name."""


def _invalid(exc: ValidationError, what: str) -> InputError:
    first = exc.errors(include_url=False)[0]
    where = ".".join(str(p) for p in first["loc"])
    return InputError(f"{what} {where}: {first['msg']}")


def settings_from_args(args: argparse.Namespace) -> SimSettings:
    """Settings from ``--settings-json`` or a spec (if given), then the other options on top.

    ``--settings-json`` is how :class:`~tokenwatt.sim.launch.SimProcess` starts its child: the
    whole :class:`~tokenwatt.sim.launch.SimSettings` as one JSON document, validated here.
    """
    from tokenwatt.store import load_spec

    base = SimSettings()
    if args.settings_json is not None:
        try:
            base = SimSettings.model_validate_json(args.settings_json)
        except ValidationError as exc:
            raise _invalid(exc, "--settings-json:") from None
    elif args.spec is not None:
        loaded = load_spec(args.spec)
        if loaded.spec.engine.endpoint != "sim":
            raise InputError(f"{args.spec}: engine.endpoint is not 'sim'")
        base = settings_from_spec(loaded)
    sim_fields = base.sim.model_dump(exclude_none=True)
    sim_fields.update(
        {name: getattr(args, name) for name in _SIM_OPTIONS if getattr(args, name) is not None}
    )
    if args.gpu is not None:
        sim_fields["gpu"] = args.gpu
    updates: dict[str, Any] = {
        name: getattr(args, name) for name in _SETTINGS_OPTIONS if getattr(args, name) is not None
    }
    if args.model is not None:
        updates["config_file"] = args.model
    try:
        sim = SimSpec.model_validate(sim_fields)
        settings = SimSettings.model_validate({**dict(base), "sim": sim, **updates})
    except ValidationError as exc:
        raise _invalid(exc, "simulator option") from None
    if settings.config_file is None and not settings.geometry.model_dump(exclude_none=True):
        raise InputError("give the model: --model PATH/config.json (or --spec with model.config)")
    return settings


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
    root = str(settings.config_file) if settings.config_file else settings.model_name
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

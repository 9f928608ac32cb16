"""Start and stop the simulator in its own process (for ``tokenwatt measure`` and tests).

The simulator runs as ``python -m tokenwatt sim --settings-json ...`` in a child process, so the
load generator and the simulated engine do not share a GIL; its settings travel as one JSON
document of :class:`SimSettings`, which the child validates with the same model. The child binds
an ephemeral port itself (no race for a "free" port), reports it through a pipe, and exits when
the parent closes its stdin, so a crashed parent never leaves a simulator behind.

```python
with launch(SimSettings(sim=SimSpec(gpu="h100-sxm"), config_file=Path("config.json"))) as sim:
    httpx.get(sim.base_url + "/models")
```
"""

from __future__ import annotations

import contextlib
import logging
import os
import select
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import TracebackType
from typing import Annotated

import httpx
from pydantic import ConfigDict, Field

from tokenwatt.errors import EndpointError, InputError
from tokenwatt.geometry import load_geometry
from tokenwatt.gpus import preset
from tokenwatt.schema.base import KvDtype, StrictModel, WeightDtype
from tokenwatt.schema.spec import GeometryOverrides, LoadedSpec, SimSpec
from tokenwatt.sim.engine import EngineConfig

__all__ = ["SimProcess", "SimSettings", "launch", "launch_for_spec", "settings_from_spec"]

logger = logging.getLogger(__name__)


class SimSettings(StrictModel):
    """What to simulate: GPU, model and engine settings.

    The one document a simulator child is started with: :class:`SimProcess` passes it as JSON
    (``tokenwatt sim --settings-json``) and the child validates it with this same model.
    """

    model_config = ConfigDict(frozen=True)

    config_file: Path | None = Field(
        default=None, description="The model's config.json; null = geometry from 'geometry'"
    )
    weight_dtype: WeightDtype | None = Field(
        default=None, description="null = the config's quantization_config, else torch_dtype"
    )
    kv_dtype: KvDtype | None = Field(default=None, description="null = the config's torch_dtype")
    served_model_name: str | None = Field(
        default=None,
        min_length=1,
        description="Model name in the API; null = the config folder's (org__name: org/name)",
    )
    tensor_parallel: Annotated[int, Field(ge=1, le=1024)] = Field(
        default=1, description="GPUs serving the model"
    )
    sim: SimSpec = Field(default_factory=SimSpec, description="GPU preset and engine settings")
    geometry: GeometryOverrides = Field(
        default_factory=GeometryOverrides, description="Values that override config.json"
    )

    @property
    def gpu(self) -> str:
        """The GPU preset (``sim.gpu``)."""
        return self.sim.gpu

    @property
    def model_name(self) -> str:
        """The name the simulator serves the model under."""
        if self.served_model_name:
            return self.served_model_name
        if self.config_file is not None:
            return self.config_file.resolve().parent.name.replace("__", "/")
        return "sim-model"

    def build(self) -> EngineConfig:
        """Read the geometry and build the engine configuration.

        Raises:
            InputError: unknown GPU, unreadable config, or a model that does not fit.
        """
        try:
            gpu = preset(self.gpu)
        except KeyError as exc:
            raise InputError(str(exc.args[0])) from None
        geometry = load_geometry(
            self.config_file,
            overrides=self.geometry,
            weight_dtype=self.weight_dtype,
            kv_dtype=self.kv_dtype,
            name=self.model_name,
        )
        return EngineConfig.build(
            geometry=geometry,
            gpu=gpu,
            sim=self.sim,
            tensor_parallel=self.tensor_parallel,
            max_model_len=self.sim.max_model_len,
        )

    def for_child(self) -> SimSettings:
        """The same settings with nothing left to the child's current folder to decide."""
        config = self.config_file.resolve() if self.config_file is not None else None
        return self.model_copy(update={"config_file": config, "served_model_name": self.model_name})


def settings_from_spec(loaded: LoadedSpec) -> SimSettings:
    """Simulator settings for a spec whose ``engine.endpoint`` is ``sim``.

    The GPU comes from ``engine.sim.gpu``, the model from ``model.config``, its geometry
    overrides and the storage types the spec sets from ``model``; the served name is
    ``engine.model``, so the load generator's requests name the right model.
    """
    spec = loaded.spec
    model = spec.model
    weight_dtype, kv_dtype = model.storage_types_set()
    return SimSettings(
        config_file=loaded.config_file,
        weight_dtype=weight_dtype,
        kv_dtype=kv_dtype,
        served_model_name=spec.engine.model,
        tensor_parallel=model.tensor_parallel,
        sim=spec.engine.sim or SimSpec(),
        geometry=model.geometry,
    )


class SimProcess:
    """A simulator running in a child process; a context manager."""

    def __init__(
        self,
        settings: SimSettings,
        *,
        host: str = "127.0.0.1",
        startup_timeout_s: float = 60.0,
        log_path: Path | None = None,
    ) -> None:
        self.settings = settings
        self.host = host
        self.startup_timeout_s = startup_timeout_s
        self.port: int | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        self._log_path = log_path
        self._own_log = log_path is None

    @property
    def url(self) -> str:
        """Root URL, e.g. ``http://127.0.0.1:PORT``."""
        if self.port is None:
            raise EndpointError("the simulator is not running")
        return f"http://{self.host}:{self.port}"

    @property
    def base_url(self) -> str:
        """OpenAI base URL (``…/v1``)."""
        return self.url + "/v1"

    @property
    def metrics_url(self) -> str:
        """Prometheus ``/metrics`` URL (vLLM metrics and dcgm-exporter power lines)."""
        return self.url + "/metrics"

    @property
    def pid(self) -> int | None:
        """The child's process id."""
        return self._proc.pid if self._proc else None

    @property
    def log_path(self) -> Path | None:
        """Where the child's log goes."""
        return self._log_path

    def _log_tail(self, limit: int = 3000) -> str:
        if self._log_path is None or not self._log_path.exists():
            return ""
        return self._log_path.read_text(encoding="utf-8", errors="replace")[-limit:]

    def start(self) -> SimProcess:
        """Start the child and wait until ``/health`` answers.

        Raises:
            InputError: the settings are invalid (checked here before starting anything).
            EndpointError: the child did not come up, with the end of its log.
        """
        self.settings.build()  # bad input fails here, with the parent's clear message
        if self._log_path is None:
            fd, name = tempfile.mkstemp(prefix="tokenwatt-sim-", suffix=".log")
            os.close(fd)
            self._log_path = Path(name)
        read_fd, write_fd = os.pipe()
        cmd = [
            sys.executable,
            "-m",
            "tokenwatt",
            "-q",
            "sim",
            "--settings-json",
            self.settings.for_child().model_dump_json(),
            "--host",
            self.host,
            "--port",
            "0",
            "--ready-fd",
            str(write_fd),
            "--exit-with-stdin",
        ]
        logger.info("starting the simulator: %s", " ".join(cmd[2:]))
        with self._log_path.open("ab") as log:
            self._proc = subprocess.Popen(
                cmd, stdin=subprocess.PIPE, stdout=log, stderr=log, pass_fds=(write_fd,)
            )
        os.close(write_fd)
        try:
            self.port = self._read_port(read_fd)
        finally:
            os.close(read_fd)
        self._wait_healthy()
        logger.info("simulator ready at %s (pid %d)", self.base_url, self._proc.pid)
        return self

    def _read_port(self, fd: int) -> int:
        deadline = time.monotonic() + self.startup_timeout_s
        data = b""
        while time.monotonic() < deadline:
            ready, _, _ = select.select([fd], [], [], 0.2)
            if ready:
                chunk = os.read(fd, 64)
                if not chunk:
                    break
                data += chunk
                if data.endswith(b"\n"):
                    return int(data.strip())
            elif self._proc is not None and self._proc.poll() is not None:
                break
        code = self._proc.poll() if self._proc is not None else None
        message = (
            f"the simulator did not start (exit {code}); its log ({self._log_path}) ends:\n"
            f"{self._log_tail()}"
        )
        self.stop()
        raise EndpointError(message)

    def _wait_healthy(self) -> None:
        deadline = time.monotonic() + self.startup_timeout_s
        last = ""
        while time.monotonic() < deadline:
            try:
                if httpx.get(self.url + "/health", timeout=2.0).status_code == 200:
                    return
            except httpx.HTTPError as exc:
                last = str(exc)
            if self._proc is not None and self._proc.poll() is not None:
                break
            time.sleep(0.05)
        message = (
            f"the simulator at {self.url} did not become healthy ({last}); its log"
            f" ({self._log_path}) ends:\n{self._log_tail()}"
        )
        self.stop()
        raise EndpointError(message)

    def stop(self, *, timeout_s: float = 10.0) -> None:
        """Stop the child (SIGTERM, then SIGKILL) and remove its log if it was a temp file."""
        proc = self._proc
        if proc is not None and proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                logger.warning("the simulator (pid %d) ignored SIGTERM; killing it", proc.pid)
                proc.kill()
                proc.wait(timeout=timeout_s)
        if proc is not None and proc.stdin is not None:
            with contextlib.suppress(OSError):
                proc.stdin.close()
        self._proc = None
        if self._own_log and self._log_path is not None:
            with contextlib.suppress(OSError):
                self._log_path.unlink()
            self._log_path = None

    def __enter__(self) -> SimProcess:
        if self._proc is None:
            self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


def launch(
    settings: SimSettings,
    *,
    host: str = "127.0.0.1",
    startup_timeout_s: float = 60.0,
    log_path: Path | None = None,
) -> SimProcess:
    """Start a simulator and return it running (use it as a context manager to stop it)."""
    proc = SimProcess(settings, host=host, startup_timeout_s=startup_timeout_s, log_path=log_path)
    return proc.start()


def launch_for_spec(
    loaded: LoadedSpec,
    *,
    host: str = "127.0.0.1",
    startup_timeout_s: float = 60.0,
    log_path: Path | None = None,
) -> SimProcess:
    """Start the simulator a spec asks for (``engine.endpoint: sim``)."""
    if loaded.spec.engine.endpoint != "sim":
        raise InputError(f"{loaded.path}: engine.endpoint is not 'sim'")
    return launch(
        settings_from_spec(loaded),
        host=host,
        startup_timeout_s=startup_timeout_s,
        log_path=log_path,
    )

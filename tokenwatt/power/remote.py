"""A node's meter read on that node, by a Ray actor there (``power.nodes[].ray_node``).

NVML reads the GPUs of the machine it runs on, and a BMC or exporter may only answer inside its
node's network. A node of ``power.nodes`` with ``ray_node`` set is read by a small actor placed on
that node of the load generator's Ray cluster (:mod:`tokenwatt.load.ray_pool`; ``load.cluster`` or
``--ray``): the actor builds the node's source there, from the same spec fields, with the
password variable read from that node's environment (the environment ``ray start`` ran in: a
secret never crosses the cluster, nor lands in its object store), opens it, and reads it once per
sampler tick. The sampler on this machine stamps each reading when it arrives, on the load
generator's clock, like any other source's; a read that fails there, or an actor or node that is
lost, is a gap on that node.
"""

from __future__ import annotations

import logging
from typing import Any

from tokenwatt.errors import ClusterError, PowerError
from tokenwatt.power.base import PowerSource, Reading, build_source
from tokenwatt.schema.spec import PowerNodeSpec

__all__ = ["PowerReader", "RemoteSource", "remote_source"]

logger = logging.getLogger(__name__)

_OPEN_TIMEOUT_S = 60.0


class PowerReader:
    """The actor: one source, built and opened on the node it runs on."""

    def __init__(self, spec: PowerNodeSpec) -> None:
        self._source = build_source(spec.model_copy(update={"ray_node": None}))
        self._source.open()

    def info(self) -> dict[str, Any]:
        """What the opened source says of itself, and the node it runs on."""
        import ray

        s = self._source
        return {
            "description": s.description,
            "power_limit_w": s.power_limit_w,
            "throttle_monitored": s.throttle_monitored,
            "has_energy_counter": s.has_energy_counter,
            "scope": s.scope,
            "node_id": ray.get_runtime_context().get_node_id(),
        }

    def read(self) -> Reading:
        """One reading of the source (its PowerError reaches the caller wrapped by Ray)."""
        return self._source.read()

    def close(self) -> None:
        """Close the source."""
        self._source.close()


class RemoteSource(PowerSource):
    """A node's source read by a :class:`PowerReader` on the Ray node ``spec.ray_node``."""

    def __init__(self, spec: PowerNodeSpec, *, read_timeout_s: float) -> None:
        super().__init__()
        if spec.ray_node is None:
            raise ValueError("a remote source needs ray_node")
        self._spec = spec
        self.name = spec.source
        scope = spec.reading_scope
        self.scope = "node" if scope == "none" else scope
        self._read_timeout_s = read_timeout_s
        self._actor: Any = None
        self.node_id: str | None = None
        """The Ray node the actor runs on (after :meth:`open`)."""

    @classmethod
    def from_spec(cls, spec: Any, context: Any) -> PowerSource:  # pragma: no cover
        """Not registered under a source name: :func:`remote_source` builds it."""
        raise NotImplementedError("built by tokenwatt.power.sampler.sampler_for_spec")

    def _node_id(self, ray: Any) -> str:
        wanted = self._spec.ray_node
        alive = [n for n in ray.nodes() if n.get("Alive")]
        for n in alive:
            if wanted in (n["NodeID"], n["NodeManagerAddress"]):
                return str(n["NodeID"])
        listed = ", ".join(f"{n['NodeManagerAddress']} ({n['NodeID'][:12]})" for n in alive)
        raise PowerError(
            f"power node {self._spec.name!r}: ray_node {wanted!r} is not a node of the Ray"
            f" cluster (alive: {listed or 'none'})"
        )

    def open(self) -> None:
        """Start the reader on its node and open the meter there.

        Raises:
            PowerError: no Ray cluster joined, no such node, or the meter cannot be opened there.
        """
        try:
            import ray
            from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy
        except ImportError:
            raise PowerError(
                f"power node {self._spec.name!r} is read on a Ray node (ray_node), which needs"
                " Ray: pip install 'tokenwatt[ray]'"
            ) from None
        if not ray.is_initialized():
            raise PowerError(
                f"power node {self._spec.name!r} is read on Ray node {self._spec.ray_node!r}:"
                " that needs the load generator on the Ray cluster (load.cluster or --ray)"
            )
        node_id = self._node_id(ray)
        remote = ray.remote(num_cpus=0, max_restarts=0)(PowerReader)
        self._actor = remote.options(
            scheduling_strategy=NodeAffinitySchedulingStrategy(node_id, soft=False)
        ).remote(self._spec)
        try:
            info = ray.get(self._actor.info.remote(), timeout=_OPEN_TIMEOUT_S)
        except (ray.exceptions.RayError, TimeoutError) as exc:  # its PowerError, wrapped
            self.close()
            cause = exc.cause if isinstance(exc, ray.exceptions.RayTaskError) else exc
            if isinstance(cause, ray.exceptions.RayTaskError) and cause.cause is not None:
                cause = cause.cause
            raise PowerError(
                f"power node {self._spec.name!r} on Ray node {self._spec.ray_node}: {cause}"
            ) from None
        self.node_id = str(info["node_id"])
        self.description = f"{info['description']}, read on Ray node {self._spec.ray_node}"
        self.power_limit_w = info["power_limit_w"]
        self.throttle_monitored = bool(info["throttle_monitored"])
        self.has_energy_counter = bool(info["has_energy_counter"])
        logger.info(
            "power node %s: %s read on Ray node %s", self._spec.name, self.name, node_id[:12]
        )

    def read(self) -> Reading:
        """One reading from the node (a gap when it fails there, or the node is lost)."""
        import ray

        if self._actor is None:
            raise PowerError(f"power node {self._spec.name!r}: not open")
        try:
            reading = ray.get(self._actor.read.remote(), timeout=self._read_timeout_s)
        except ray.exceptions.GetTimeoutError:
            raise PowerError(
                f"no reading from Ray node {self._spec.ray_node} in {self._read_timeout_s:g} s"
            ) from None
        except ray.exceptions.RayTaskError as exc:
            raise PowerError(f"read on Ray node {self._spec.ray_node}: {exc.cause}") from None
        except ray.exceptions.RayError as exc:
            first = str(exc).strip().splitlines()
            raise PowerError(
                f"the reader on Ray node {self._spec.ray_node} is gone:"
                f" {type(exc).__name__}: {first[0] if first else ''}"[:300]
            ) from None
        if not isinstance(reading, Reading):
            raise PowerError(f"Ray node {self._spec.ray_node} answered {type(reading).__name__}")
        return reading

    def close(self) -> None:
        """Close the meter there and stop the reader; safe to call twice."""
        if self._actor is None:
            return
        import ray

        actor, self._actor = self._actor, None
        try:
            ray.get(actor.close.remote(), timeout=5.0)
        except Exception:  # noqa: BLE001 - closing: a lost node has nothing left to close
            logger.debug("power node %s: closing on its Ray node failed", self._spec.name)
        try:
            ray.kill(actor, no_restart=True)
        except Exception:  # noqa: BLE001 - already gone
            logger.debug("power node %s: its reader was already gone", self._spec.name)


def remote_source(spec: PowerNodeSpec, *, sampling_hz: float) -> RemoteSource:
    """The source of a node read on its Ray node; a read waits at most two periods (>= 1 s)."""
    if spec.ray_node is None:
        raise ClusterError(f"power node {spec.name!r} names no ray_node")
    return RemoteSource(spec, read_timeout_s=max(1.0, 2.0 / sampling_hz))

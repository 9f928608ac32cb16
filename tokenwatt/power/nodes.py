"""Power of a server that spans nodes: one meter per node, read on one tick, summed.

``power.nodes`` names one meter per node, each with the fields of a single source and a unique
name: its BMC (``redfish``, ``ipmi``; the password from the environment variable the node
names), its exporter (``prometheus``), a ``command``, or NVML (``board``) for the one node
tokenwatt runs on; a node with ``ray_node`` is read on that node of the load generator's Ray
cluster, by an actor there (:mod:`tokenwatt.power.remote`: NVML on every GPU node). Every
node covers the same thing, the GPU boards or the whole node, or the spec is refused (a sum of
the two would be neither); so are a second ``board`` node read from this machine (NVML reads
this machine only) and two nodes that read the same meter (it would count twice).

:class:`NodesSampler` reads each node in a thread of its own, all on one tick grid
(``start + k / sampling_hz``): a node whose read is slow or fails never delays or drops another
node's reading. A failed read is a gap on that node, with its cause, as with one source; a read
slower than the period skips that node's missed ticks.

The run's power readings are the sum over the nodes (:func:`sum_nodes`):

- **A total reading** exists at a tick only where every node read on that tick: the sum of their
  watts, stamped with the latest of their times (the sum is complete once its last reading is
  in; so no total reading falls inside a node's gap, which ends at that node's next reading).
  GPU readings are the nodes' in node order, throttle reasons their union. Where any node has no
  reading on a tick, the total has none: a partial sum is never presented as the total.
- **A gap on any node is a gap on the total**: the total's gaps are the nodes' gaps, overlapping
  ones merged into one whose cause names each node and its cause.
- **Energy** of the total over the confirmed windows is the sum of the nodes' energies, each
  from its own readings by the rules of one source (counter difference, else the integral with
  gaps bridged): a node that kept reading while another was in a gap counts with its real
  readings. It is unknown if any node's is. Mean power, coverage and throttle counts are those
  of the total readings (:mod:`tokenwatt.energy`).
- Each node's readings and gaps, and its mean power and energy over the confirmed windows, are
  kept in the run file (``power.nodes``) and listed on the result page.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Mapping, Sequence
from types import TracebackType
from typing import Literal

from tokenwatt.errors import PowerError
from tokenwatt.power.base import PowerSource
from tokenwatt.power.sampler import Clock, PowerSampler
from tokenwatt.schema.run import NodePowerEvidence, PowerEvidence, PowerGap, PowerSample

__all__ = ["NodeTrace", "NodesSampler", "Sampler", "sum_nodes", "total_gaps", "total_samples"]

logger = logging.getLogger(__name__)

NodeTrace = tuple[NodePowerEvidence, Sequence[int]]
"""One node's evidence as its sampler recorded it, and the grid tick of each of its samples."""


def total_samples(traces: Sequence[NodeTrace]) -> list[PowerSample]:
    """The total readings: one per tick on which every node read (see the module docstring).

    Example: node a read 300 W on ticks 0, 1, 2 and node b 450 W on ticks 0 and 2 (its read on
    tick 1 failed): the total is 750 W on ticks 0 and 2, and nothing on tick 1.
    """
    by_tick = [dict(zip(ticks, node.samples, strict=True)) for node, ticks in traces]
    if not by_tick:
        return []
    common = set(by_tick[0]).intersection(*by_tick[1:])
    totals: list[PowerSample] = []
    for tick in sorted(common):
        parts = [readings[tick] for readings in by_tick]
        gpus = [p.gpu_watts for p in parts]
        totals.append(
            PowerSample(
                t_ns=max(p.t_ns for p in parts),
                watts=math.fsum(p.watts for p in parts),
                gpu_watts=(
                    [w for g in gpus if g is not None for w in g]
                    if all(g is not None for g in gpus)
                    else None
                ),
                # A sum of counters would turn one node's counter reset into a drop of the whole
                # sum; the total's energy is the sum of the nodes' energies instead.
                energy_j=None,
                throttle_reasons=sorted({r for p in parts for r in p.throttle_reasons}),
            )
        )
    return totals


def total_gaps(nodes: Sequence[NodePowerEvidence]) -> list[PowerGap]:
    """The nodes' gaps as gaps of the total, each cause prefixed with its node's name.

    Overlapping (or touching) gaps are merged into one. Example: a's gap 1-3 s and b's gap 2-5 s
    make one gap 1-5 s, "a: ...; b: ..."; b's gap 7-8 s stays a gap of its own.
    """
    named = sorted(
        (g.start_ns, g.end_ns, f"{node.name}: {g.cause}") for node in nodes for g in node.gaps
    )
    merged: list[tuple[int, int, list[str]]] = []
    for start_ns, end_ns, cause in named:
        if merged and start_ns <= merged[-1][1]:
            last_start, last_end, causes = merged[-1]
            if cause not in causes:
                causes.append(cause)
            merged[-1] = (last_start, max(last_end, end_ns), causes)
        else:
            merged.append((start_ns, end_ns, [cause]))
    return [PowerGap(start_ns=a, end_ns=b, cause="; ".join(c)) for a, b, c in merged]


def sum_nodes(traces: Sequence[NodeTrace], *, sampling_hz: float) -> PowerEvidence:
    """The run's power evidence for a server spanning nodes: the total and every node's own.

    Raises:
        ValueError: fewer than two nodes, or nodes that cover different things.
    """
    nodes = [node for node, _ in traces]
    if len(nodes) < 2:
        raise ValueError("a sum over nodes needs at least two nodes")
    scopes = {node.scope for node in nodes}
    if len(scopes) != 1:
        raise ValueError(f"nodes cover different things: {', '.join(sorted(scopes))}")
    limits = [node.power_limit_w for node in nodes]
    return PowerEvidence(
        source="nodes",
        description=f"Sum over {len(nodes)} nodes: "
        + ", ".join(f"{node.name} ({node.source})" for node in nodes),
        scope=nodes[0].scope,
        sampling_hz=sampling_hz,
        samples=total_samples(traces),
        gaps=total_gaps(nodes),
        power_limit_w=(
            math.fsum(w for w in limits if w is not None)
            if all(w is not None for w in limits)
            else None
        ),
        # An empty list of reasons means "none active" only where every node reports them.
        throttle_monitored=all(node.throttle_monitored for node in nodes),
        nodes=nodes,
    )


def _node_scope(name: str, source: PowerSource) -> Literal["board", "node"]:
    if source.scope == "none":
        raise ValueError(f"power node {name!r} has source 'none': there is nothing to sum")
    return source.scope


class NodesSampler:
    """Samples every node of a server spanning nodes; :meth:`stop` returns their sum.

    Used like :class:`~tokenwatt.power.sampler.PowerSampler` (``start``, ``stop``, or ``with``):
    one :class:`~tokenwatt.power.sampler.PowerSampler` per node, all on one tick grid.
    """

    def __init__(
        self,
        nodes: Sequence[tuple[str, PowerSource]],
        *,
        sampling_hz: float,
        clock_ns: Clock = time.monotonic_ns,
    ) -> None:
        """Prepare, without opening any source.

        Args:
            nodes: (name, source) per node, in the spec's order.
            sampling_hz: ticks per second (> 0), the same for every node.
            clock_ns: the clock samples are stamped with; must be the load generator's.

        Raises:
            ValueError: fewer than two nodes, a name twice, or nodes that cover different things.
        """
        names = [name for name, _ in nodes]
        if len(names) < 2 or len(set(names)) != len(names):
            raise ValueError(f"nodes need at least two distinct names, not {names}")
        scopes = {_node_scope(name, source) for name, source in nodes}
        if len(scopes) != 1:
            raise ValueError(f"nodes cover different things: {', '.join(sorted(scopes))}")
        self.sampling_hz = sampling_hz
        self._clock_ns = clock_ns
        self._samplers = {
            name: PowerSampler(source, sampling_hz=sampling_hz, clock_ns=clock_ns, label=name)
            for name, source in nodes
        }

    @property
    def samplers(self) -> Mapping[str, PowerSampler]:
        """Each node's sampler, by name."""
        return dict(self._samplers)

    def start(self) -> None:
        """Open every node's source and start sampling them on one grid.

        Raises:
            PowerError: a node's source cannot be opened (named); nothing is left running.
        """
        grid_start_ns = self._clock_ns()
        started: list[PowerSampler] = []
        for name, sampler in self._samplers.items():
            try:
                sampler.start(grid_start_ns=grid_start_ns)
            except PowerError as exc:
                for other in started:
                    other.request_stop()
                for other in started:
                    try:
                        other.stop()
                    except PowerError:
                        logger.exception("power node sampler failed while stopping")
                raise PowerError(f"power node {name!r}: {exc}") from exc
            started.append(sampler)
        logger.info("sampling %d power nodes on one grid at %s Hz", len(started), self.sampling_hz)

    def stop(self) -> PowerEvidence:
        """Stop every node's thread, close the sources and return the sum with every node.

        Raises:
            PowerError: a node's sampling thread died of an unexpected error (named); the other
                nodes are stopped and closed first.
        """
        for sampler in self._samplers.values():
            sampler.request_stop()
        failures: list[tuple[str, PowerError]] = []
        for name, sampler in self._samplers.items():
            try:
                sampler.stop()
            except PowerError as exc:
                failures.append((name, exc))
        if failures:
            raise PowerError(
                "; ".join(f"power node {name!r}: {exc}" for name, exc in failures)
            ) from failures[0][1]
        return self.evidence()

    def __enter__(self) -> NodesSampler:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc is None:
            self.stop()
        else:
            # Already failing: stop quietly so the original error is the one reported.
            try:
                self.stop()
            except PowerError:
                logger.exception("power node sampler failed while another error was raised")

    def evidence(self) -> PowerEvidence:
        """The sum and every node's readings so far (a snapshot; safe while running)."""
        traces: list[NodeTrace] = []
        for name, sampler in self._samplers.items():
            recorded, ticks = sampler.evidence_with_ticks()
            node = NodePowerEvidence(
                name=name,
                source=sampler.source.name,
                description=recorded.description,
                scope=_node_scope(name, sampler.source),
                samples=recorded.samples,
                gaps=recorded.gaps,
                power_limit_w=recorded.power_limit_w,
                throttle_monitored=recorded.throttle_monitored,
            )
            traces.append((node, ticks))
        return sum_nodes(traces, sampling_hz=self.sampling_hz)

    @property
    def sample_count(self) -> int:
        """Total readings so far: ticks on which every node read."""
        ticks = [set(sampler.ticks) for sampler in self._samplers.values()]
        return len(ticks[0].intersection(*ticks[1:]))


Sampler = PowerSampler | NodesSampler
"""What :func:`~tokenwatt.power.sampler.sampler_for_spec` returns: one source's, or every node's."""

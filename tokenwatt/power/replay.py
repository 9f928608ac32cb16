"""``ReplaySource``: plays back a list of readings and failures (tests, re-analysis, demos).

Not a spec source (a spec cannot name it): tests and tools build it directly, and the sampler
treats it like any meter. Each :meth:`~ReplaySource.read` returns the next item; an item that
is a :class:`~tokenwatt.errors.PowerError` is raised instead, so a test can script a source
that fails mid-run and comes back.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from typing import Literal

from tokenwatt.errors import PowerError
from tokenwatt.power.base import BuildContext, PowerScope, PowerSource, Reading
from tokenwatt.schema.run import PowerSample
from tokenwatt.schema.spec import PowerSourceSpec

__all__ = ["ReplaySource"]


class ReplaySource(PowerSource):
    """Readings (or failures) from a list, in order."""

    def __init__(
        self,
        items: Iterable[Reading | PowerError],
        *,
        scope: PowerScope = "board",
        description: str = "replayed readings",
        when_exhausted: Literal["repeat", "fail"] = "repeat",
        power_limit_w: float | None = None,
        throttle_monitored: bool = False,
        replays: Literal["board", "redfish", "ipmi", "command", "prometheus"] = "board",
    ) -> None:
        """Prepare the playlist.

        Args:
            items: readings, or errors to raise, in order.
            scope: what the readings cover.
            description: in words, for the evidence.
            when_exhausted: after the last item, repeat it or fail every read.
            power_limit_w: the limit to report.
            throttle_monitored: whether the readings carry reasons.
            replays: the source kind the evidence names.
        """
        super().__init__()
        self._items = list(items)
        if not self._items:
            raise ValueError("ReplaySource needs at least one item")
        self.scope = scope
        self.description = description
        self._when_exhausted = when_exhausted
        self.power_limit_w = power_limit_w
        self.throttle_monitored = throttle_monitored
        self.has_energy_counter = any(
            isinstance(i, Reading) and i.energy_j is not None for i in self._items
        )
        self.name = replays
        self._position = 0
        self._lock = threading.Lock()
        self.reads = 0

    @classmethod
    def from_samples(cls, samples: Iterable[PowerSample], **kwargs: object) -> ReplaySource:
        """Replay recorded samples (their times are not kept: the sampler stamps anew)."""
        readings = [
            Reading(
                watts=s.watts,
                gpu_watts=tuple(s.gpu_watts) if s.gpu_watts is not None else None,
                energy_j=s.energy_j,
                throttle_reasons=tuple(s.throttle_reasons),
            )
            for s in samples
        ]
        return cls(readings, **kwargs)  # type: ignore[arg-type]

    @classmethod
    def from_spec(cls, spec: PowerSourceSpec, context: BuildContext) -> ReplaySource:
        """Not available: a spec cannot name a replay.

        Raises:
            PowerError: always.
        """
        raise PowerError("a replay source is built from recorded readings, not from a spec")

    def read(self) -> Reading:
        """The next item (raised if it is an error)."""
        with self._lock:
            self.reads += 1
            if self._position >= len(self._items):
                if self._when_exhausted == "fail":
                    raise PowerError("replay exhausted")
                item = self._items[-1]
            else:
                item = self._items[self._position]
                self._position += 1
        if isinstance(item, PowerError):
            raise item
        return item

"""The power-source protocol, its reading type and the registry keyed by ``power.source``.

A source knows how to talk to one kind of meter (NVML, a BMC, a command, an exporter). It is
opened once (where set-up errors such as wrong credentials surface as
:class:`~tokenwatt.errors.PowerError`), then read many times from the sampler's thread, then
closed. A read that fails raises ``PowerError`` too; the sampler turns that into a recorded gap,
never into a zero.

Sources never timestamp their readings: :class:`~tokenwatt.power.sampler.PowerSampler` does, on
the load generator's monotonic clock.
"""

from __future__ import annotations

import abc
import importlib
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import Literal, Self, TypeVar, get_args

from tokenwatt.errors import PowerError
from tokenwatt.schema.base import PowerSourceName
from tokenwatt.schema.spec import PowerSourceSpec

__all__ = [
    "POWER_NOT_MEASURED",
    "SOURCES",
    "BuildContext",
    "PowerScope",
    "PowerSource",
    "Reading",
    "build_source",
    "register_source",
    "secret_from_env",
]

PowerScope = Literal["board", "node", "none"]
"""What a reading covers: the GPU boards in use, the whole node, or nothing (no source)."""

POWER_NOT_MEASURED = "power not measured"
"""The words a run and its result carry when ``power.source`` is ``none``."""


@dataclass(frozen=True)
class Reading:
    """One reading of a source, before the sampler stamps it with a time."""

    watts: float
    """Power now: the sum over the GPUs in use (board) or the whole node, W."""
    gpu_watts: tuple[float, ...] | None = None
    """Per GPU in use, W, where the source reads GPUs one by one."""
    energy_j: float | None = None
    """Energy counter summed over the GPUs in use, J (since driver load), where there is one."""
    throttle_reasons: tuple[str, ...] = ()
    """Clock-event (throttle) reasons active on any GPU in use, snake_case names."""


@dataclass(frozen=True)
class BuildContext:
    """What a source may need beyond its spec section; passed by :func:`build_source`."""

    gpu_indices: tuple[int, ...] | None = None
    """GPUs in use (NVML order); None = all visible."""
    default_metrics_url: str | None = None
    """The simulator's ``/metrics`` URL, used by ``prometheus`` when the spec gives no url."""
    env: Mapping[str, str] = field(default_factory=dict)
    """Environment to read secrets (and the CA bundle ``SSL_CERT_FILE``) from."""


class PowerSource(abc.ABC):
    """One power meter behind the common protocol: open, read (many times), close.

    Subclasses set :attr:`name` and :attr:`scope`, fill :attr:`description` and, where the
    meter says so, :attr:`power_limit_w` and :attr:`throttle_monitored` in :meth:`open`.
    """

    name: PowerSourceName = "none"
    """The ``power.source`` value this class serves (set by :func:`register_source`)."""
    scope: PowerScope = "node"
    """What a reading covers."""

    def __init__(self) -> None:
        self.description: str = ""
        """In words, for the page, e.g. 'GPU board power sum (NVIDIA)'."""
        self.power_limit_w: float | None = None
        """Enforced power limit over what the source covers, W, where known (after open)."""
        self.throttle_monitored: bool = False
        """The source reports clock-event reasons (an empty list then means none active)."""
        self.has_energy_counter: bool = False
        """Readings carry an energy counter (after open)."""

    @classmethod
    @abc.abstractmethod
    def from_spec(cls, spec: PowerSourceSpec, context: BuildContext) -> PowerSource:
        """Build the source from the spec's ``power`` section.

        Raises:
            PowerError: if the spec lacks something this source needs (e.g. the password
                variable is not set).
        """

    def open(self) -> None:  # noqa: B027 - most sources need no set-up; the default is a no-op
        """Connect and check the meter answers, before the run starts.

        Raises:
            PowerError: the meter cannot be used (unreachable, wrong credentials, unsupported).
        """

    @abc.abstractmethod
    def read(self) -> Reading:
        """Read the meter now (called from the sampler's thread).

        Raises:
            PowerError: this reading failed; the sampler records a gap and tries again.
        """

    def close(self) -> None:  # noqa: B027 - nothing to release by default
        """Release connections and libraries; safe to call twice."""

    def __enter__(self) -> Self:
        self.open()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


SourceClass = TypeVar("SourceClass", bound=type[PowerSource])

SOURCES: dict[str, type[PowerSource]] = {}
"""Source classes by ``power.source`` name, filled by :func:`register_source`."""

# One module per source name, named after it.
_BUILTIN_MODULES: tuple[PowerSourceName, ...] = get_args(PowerSourceName)


def register_source(name: PowerSourceName) -> Callable[[SourceClass], SourceClass]:
    """Class decorator: serve ``power.source: <name>`` with this class."""

    def decorate(cls: SourceClass) -> SourceClass:
        if name in SOURCES and SOURCES[name] is not cls:
            raise ValueError(f"power source {name!r} is registered twice")
        cls.name = name
        SOURCES[name] = cls
        return cls

    return decorate


def _load_builtin_sources() -> None:
    for module in _BUILTIN_MODULES:
        importlib.import_module(f"tokenwatt.power.{module}")


def build_source(
    spec: PowerSourceSpec,
    *,
    gpu_indices: Sequence[int] | None = None,
    default_metrics_url: str | None = None,
    env: Mapping[str, str] | None = None,
) -> PowerSource:
    """The power source the spec's ``power`` section names, not yet opened.

    Args:
        spec: the spec's ``power`` section, or one of its ``nodes``.
        gpu_indices: GPUs in use (``spec.hardware.gpus``); None = all visible.
        default_metrics_url: for ``prometheus`` without ``url``: the simulator's ``/metrics``.
        env: where secrets are read from (the variable named by ``password_env``); default
            ``os.environ``.

    Raises:
        PowerError: the section cannot be served (unknown source, password variable unset, ...).
    """
    _load_builtin_sources()
    cls = SOURCES.get(spec.source)
    if cls is None:
        known = ", ".join(sorted(SOURCES))
        raise PowerError(f"power.source {spec.source!r} is not known; known: {known}")
    context = BuildContext(
        gpu_indices=tuple(gpu_indices) if gpu_indices is not None else None,
        default_metrics_url=default_metrics_url,
        env=dict(os.environ if env is None else env),
    )
    return cls.from_spec(spec, context)


def secret_from_env(spec: PowerSourceSpec, env: Mapping[str, str]) -> str | None:
    """The password named by ``power.password_env``, or None when the spec names none.

    The value is returned to the caller only; it is never logged or put in a message.

    Raises:
        PowerError: the named variable is not set (the message names the variable only).
    """
    if spec.password_env is None:
        return None
    value = env.get(spec.password_env)
    if value is None:
        raise PowerError(
            f"power.password_env names ${spec.password_env}, which is not set: export it with"
            f" the {spec.source} password before running"
        )
    return value

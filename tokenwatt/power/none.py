"""``none``: power is not measured; every power figure stays null.

The run and its result then say "power not measured" (:data:`~tokenwatt.power.base.
POWER_NOT_MEASURED`), and the report adds that to what the measurement does not cover.
"""

from __future__ import annotations

from tokenwatt.errors import PowerError
from tokenwatt.power.base import (
    POWER_NOT_MEASURED,
    BuildContext,
    PowerSource,
    Reading,
    register_source,
)
from tokenwatt.schema.spec import PowerSourceSpec

__all__ = ["NoneSource"]


@register_source("none")
class NoneSource(PowerSource):
    """No meter: the sampler starts no thread and records nothing."""

    scope = "none"

    def __init__(self) -> None:
        """A source that never reads."""
        super().__init__()
        self.description = POWER_NOT_MEASURED

    @classmethod
    def from_spec(cls, spec: PowerSourceSpec, context: BuildContext) -> NoneSource:
        """The spec says ``power.source: none``."""
        return cls()

    def read(self) -> Reading:
        """Never called by the sampler.

        Raises:
            PowerError: always: there is nothing to read.
        """
        raise PowerError("power.source is 'none': there is no power reading")

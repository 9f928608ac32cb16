"""The one exception tree of tokenwatt.

Library code raises these; only ``tokenwatt.cli`` turns them into one line on the terminal and an
exit status. Every message says what went wrong and, where it can, what to do about it.

```
* TokenwattError                 exit 1 unless a subclass says otherwise
  x InputError                   bad input from the user: exit 2, nothing written
    - SpecError                  a spec file (YAML) that does not load or does not make sense
    - RunFileError               a run file that does not load
    - ResultError                a result file that does not load, or runs that cannot be compared
    - WriteError                 an output file cannot be written (folder, full disk, read-only)
  x EndpointError                the server under test is unreachable or wrong (exit 2)
  x ClusterError                 the Ray cluster of the load generator cannot be used (exit 2)
  x CalibrationError             the load generator cannot pace what the run plans (exit 2)
  x PowerError                   a power source cannot be set up or read
  x PolicyError                  a file breaks the publishing policy (exit 1)
  x Interrupted                  Ctrl-C: partial results were saved (exit 130)
```
"""

from __future__ import annotations

from typing import ClassVar

__all__ = [
    "CalibrationError",
    "ClusterError",
    "EndpointError",
    "InputError",
    "Interrupted",
    "PolicyError",
    "PowerError",
    "ResultError",
    "RunFileError",
    "SpecError",
    "TokenwattError",
    "WriteError",
]


class TokenwattError(Exception):
    """Root of every error tokenwatt raises on purpose."""

    exit_code: ClassVar[int] = 1


class InputError(TokenwattError):
    """A file or argument given by the user is malformed or meaningless."""

    exit_code: ClassVar[int] = 2


class SpecError(InputError):
    """A spec file does not parse or does not validate."""


class RunFileError(InputError):
    """A run file does not parse or does not validate."""


class ResultError(InputError):
    """A result file does not parse or validate, or runs cannot be combined into one."""


class WriteError(InputError):
    """An output file cannot be written (nothing half-written is left).

    Measured data is kept in a recovery file that the message names.
    """


class EndpointError(TokenwattError):
    """The server under test cannot be used (pre-flight failure)."""

    exit_code: ClassVar[int] = 2


class ClusterError(TokenwattError):
    """The Ray cluster of the load generator cannot be used.

    Ray missing, no eligible node, clocks that cannot be trusted, an actor lost.
    """

    exit_code: ClassVar[int] = 2


class CalibrationError(TokenwattError):
    """The load generator's self-calibration says it cannot pace what the run plans.

    Its calibrated ceiling is under a rate the sweep must probe, or its local calibration server
    did not start or answer.
    """

    exit_code: ClassVar[int] = 2


class PowerError(TokenwattError):
    """A power source cannot be set up or read."""

    exit_code: ClassVar[int] = 2


class PolicyError(TokenwattError):
    """A file breaks the publishing policy."""


class Interrupted(TokenwattError):
    """The user pressed Ctrl-C; what was measured has been saved and marked incomplete."""

    exit_code: ClassVar[int] = 130

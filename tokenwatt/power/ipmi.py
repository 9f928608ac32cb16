"""``ipmi``: whole-node power from the BMC's DCMI power reading, through ``ipmitool``.

Each reading runs ``ipmitool -I lanplus -C <suite> -H <host> -p <port> -U <user> -E dcmi power
reading`` and takes its "Instantaneous power reading". The password goes to ipmitool through
the environment (``-E`` reads ``IPMI_PASSWORD``), never on the command line where ``ps`` would
show it. When the source opens it picks the first cipher suite the BMC accepts, 17
(HMAC-SHA256) then 3 (HMAC-SHA1): ipmitool's own negotiation can take 10 s per call on BMCs
that do not answer "Get Channel Cipher Suites".

A BMC that reports "Power reading state is: deactivated" has no valid reading: that is an
error, not a number. About 70 ms per call on loopback; fine up to a few readings per second.
"""

from __future__ import annotations

import logging
import re
import shutil
import subprocess
from collections.abc import Mapping, Sequence

from tokenwatt.errors import PowerError
from tokenwatt.power.base import (
    BuildContext,
    PowerSource,
    Reading,
    register_source,
    secret_from_env,
)
from tokenwatt.schema.spec import PowerSourceSpec

__all__ = ["IpmiSource", "parse_dcmi_power_reading", "split_host"]

logger = logging.getLogger(__name__)

_READING = re.compile(r"Instantaneous power reading\s*:\s*([0-9]+(?:\.[0-9]+)?)\s*Watts", re.I)
_STATE = re.compile(r"Power reading state is\s*:\s*(\w+)", re.I)


def split_host(host: str) -> tuple[str, int | None]:
    """``host``, ``host:port`` or ``[v6]:port`` → (host, port or None)."""
    host = host.strip()
    if host.startswith("["):
        address, _, rest = host[1:].partition("]")
        port = rest[1:] if rest.startswith(":") else ""
    elif host.count(":") == 1:
        address, _, port = host.partition(":")
    else:
        address, port = host, ""
    if not address:
        raise PowerError(f"power.host {host!r} has no host name")
    if port and not port.isdigit():
        raise PowerError(f"power.host {host!r}: the port must be a number")
    return address, int(port) if port else None


def parse_dcmi_power_reading(text: str) -> float:
    """Watts from the output of ``ipmitool dcmi power reading``.

    Raises:
        PowerError: no reading in the text, or the BMC says power measurement is deactivated.
    """
    state = _STATE.search(text)
    if state and state.group(1).lower() != "activated":
        raise PowerError(
            f"the BMC's DCMI power measurement is {state.group(1)}: its readings are not valid"
        )
    match = _READING.search(text)
    if not match:
        tail = " ".join(text.split())[-200:]
        raise PowerError(f"no 'Instantaneous power reading' in ipmitool's output: {tail!r}")
    return float(match.group(1))


@register_source("ipmi")
class IpmiSource(PowerSource):
    """Node power from a BMC's DCMI power reading via ipmitool (scope ``node``)."""

    scope = "node"

    def __init__(
        self,
        *,
        host: str,
        username: str | None = None,
        password: str | None = None,
        password_env: str | None = None,
        env: Mapping[str, str] | None = None,
        ipmitool: str = "ipmitool",
        cipher_suites: Sequence[int] = (17, 3),
        timeout_s: float = 10.0,
    ) -> None:
        """Prepare; nothing is sent before :meth:`open`.

        Args:
            host: the BMC, ``host`` or ``host:port`` (UDP, default 623).
            username: the BMC user; None = the null user.
            password: the password (given to ipmitool through its environment only).
            password_env: the name of the variable it came from, for messages.
            env: the environment ipmitool runs in (default: empty but for PATH).
            ipmitool: the ipmitool executable.
            cipher_suites: lanplus cipher suites to try, in order.
            timeout_s: per-call limit.
        """
        super().__init__()
        self.host, self.port = split_host(host)
        self.username = username
        self._password = password
        self._password_env = password_env
        self._env = dict(env or {})
        self._ipmitool = ipmitool
        self._suites = tuple(cipher_suites)
        self._timeout_s = timeout_s
        self.cipher_suite: int | None = None
        target = f"{self.host}:{self.port}" if self.port else self.host
        self.description = f"Node power from BMC (IPMI DCMI power reading, {target})"

    @classmethod
    def from_spec(cls, spec: PowerSourceSpec, context: BuildContext) -> IpmiSource:
        """From ``host``, ``username`` and ``password_env``."""
        if spec.host is None:
            raise PowerError("power.source 'ipmi' needs power.host (the BMC's host[:port])")
        return cls(
            host=spec.host,
            username=spec.username,
            password=secret_from_env(spec, context.env),
            password_env=spec.password_env,
            env=context.env,
        )

    def _argv(self, suite: int) -> list[str]:
        argv = [self._ipmitool, "-I", "lanplus", "-C", str(suite), "-N", "1", "-R", "2"]
        argv += ["-H", self.host]
        if self.port is not None:
            argv += ["-p", str(self.port)]
        if self.username is not None:
            argv += ["-U", self.username]
        if self._password is not None:
            argv.append("-E")  # password from $IPMI_PASSWORD: never on the command line
        return [*argv, "dcmi", "power", "reading"]

    def _call(self, suite: int) -> subprocess.CompletedProcess[str]:
        env = {k: v for k, v in self._env.items() if k != "IPMI_PASSWORD"}
        if self._password is not None:
            env["IPMI_PASSWORD"] = self._password
        try:
            return subprocess.run(
                self._argv(suite),
                env=env,
                stdin=subprocess.DEVNULL,
                capture_output=True,
                text=True,
                timeout=self._timeout_s,
                check=False,
            )
        except FileNotFoundError as exc:
            raise PowerError(
                f"{self._ipmitool} not found: install ipmitool (Debian: apt-get install ipmitool)"
            ) from exc
        except subprocess.TimeoutExpired as exc:
            raise PowerError(
                f"ipmitool did not finish within {self._timeout_s:g} s reading {self.description}"
            ) from exc

    def _failure(self, proc: subprocess.CompletedProcess[str]) -> PowerError:
        said = " ".join((proc.stderr or proc.stdout).split())[-300:]
        target = f"{self.host}:{self.port}" if self.port else self.host
        if "Invalid command" in said or "(c1)" in said.lower():
            return PowerError(
                f"the BMC at {target} does not support DCMI power readings ({said}); use"
                " power.source redfish or command instead"
            )
        if "Unable to establish" in said:
            env = f"${self._password_env}" if self._password_env else "the password"
            return PowerError(
                f"IPMI session to {target} refused for user {self.username!r}: check {env} and"
                f" power.username, and that the BMC is up (ipmitool: {said})"
            )
        return PowerError(f"ipmitool failed (exit {proc.returncode}) for {target}: {said}")

    def open(self) -> None:
        """Find a cipher suite the BMC accepts and read once."""
        if shutil.which(self._ipmitool, path=self._env.get("PATH")) is None:
            raise PowerError(
                f"{self._ipmitool} not found on PATH: install ipmitool"
                " (Debian: apt-get install ipmitool)"
            )
        last: PowerError | None = None
        for suite in self._suites:
            proc = self._call(suite)
            if proc.returncode == 0:
                parse_dcmi_power_reading(proc.stdout)
                self.cipher_suite = suite
                logger.info("IPMI power: %s, cipher suite %d", self.description, suite)
                return
            last = self._failure(proc)
            logger.debug("cipher suite %d refused: %s", suite, last)
            if "does not support DCMI" in str(last):
                break
        raise last or PowerError("no lanplus cipher suite to try")

    def read(self) -> Reading:
        """One ``dcmi power reading``."""
        if self.cipher_suite is None:
            raise PowerError("ipmi source read before open()")
        proc = self._call(self.cipher_suite)
        if proc.returncode != 0:
            raise self._failure(proc)
        return Reading(watts=parse_dcmi_power_reading(proc.stdout))

"""``redfish``: whole-node power from the BMC's Redfish service, over HTTPS.

Discovery (once, when the source opens): the service root ``/redfish/v1/`` → its ``Chassis``
collection → the chassis named by ``power.chassis`` (matched by ``Id`` or the last segment of
its ``@odata.id``), or else the first member that links a power resource. Then the first of
these that holds a number is read for the whole run, and named in the description:

1. ``EnvironmentMetrics.PowerWatts.Reading`` (Redfish 2020.4 and later);
2. ``Power.PowerControl[i].PowerConsumedWatts`` (the classic, now deprecated, resource);
3. ``PowerSubsystem`` → every power supply's ``Metrics.InputPowerWatts.Reading``, summed.

Links are followed as the service gives them, and so are HTTP redirects. The resources often
disagree (different sensors, different averaging), so exactly one path is chosen, never a sum
of several. The BMC's kWh counters are not used: their resolution is too coarse for a window of
a few minutes.

Credentials: ``power.username`` and the password from the environment variable named by
``power.password_env``. ``auth: session`` logs in once (``POST .../SessionService/Sessions``)
and sends the ``X-Auth-Token``, logging in again if the token expires; ``auth: basic`` sends
both on every request; unset tries a session and falls back to basic when the BMC hands out no
token. The password and the token never reach a log, a file or an error message.

The session is deleted on every way out of the run (end, error, Ctrl-C, SIGTERM), with a short
timeout. A SIGKILL leaves it open, and a BMC has few session slots, so each open session is
recorded in tokenwatt's state folder (its URL, never the token) and the next run against the same
BMC and user, once logged in, deletes those whose process is gone
(:mod:`tokenwatt.power.redfish_sessions`). A password that would go over plain ``http://`` or to
an unverified certificate is warned about loudly.

TLS: ``verify_tls: false`` accepts any certificate (BMCs usually have self-signed ones);
``true`` checks it against the system store, or the CA bundle in ``SSL_CERT_FILE`` when set.
Proxy variables are ignored: a BMC sits on a management network.
"""

from __future__ import annotations

import logging
import ssl
from typing import Any
from urllib.parse import urljoin, urlsplit

import httpx

from tokenwatt.errors import PowerError
from tokenwatt.power.base import (
    BuildContext,
    PowerSource,
    Reading,
    register_source,
    secret_from_env,
)
from tokenwatt.power.redfish_sessions import SessionLedger, SessionRecord
from tokenwatt.schema.spec import PowerSourceSpec

__all__ = ["RedfishSource"]

logger = logging.getLogger(__name__)

_SERVICE_ROOT = "/redfish/v1/"
_LOGOUT_TIMEOUT_S = 2.0
"""Longest wait for the BMC to end the session at exit (a dead BMC must not hold up the exit)."""


def _link(body: Any, key: str) -> str | None:
    value = body.get(key) if isinstance(body, dict) else None
    if isinstance(value, dict) and isinstance(value.get("@odata.id"), str):
        return str(value["@odata.id"]).split("#", 1)[0]
    return None


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


@register_source("redfish")
class RedfishSource(PowerSource):
    """Chassis power from a BMC over Redfish (scope ``node``)."""

    scope = "node"

    def __init__(
        self,
        *,
        url: str,
        username: str | None = None,
        password: str | None = None,
        password_env: str | None = None,
        verify_tls: bool = False,
        chassis: str | None = None,
        auth: str | None = None,
        ca_file: str | None = None,
        timeout_s: float = 5.0,
        transport: httpx.BaseTransport | None = None,
        ledger: SessionLedger | None = None,
    ) -> None:
        """Prepare a client; nothing is sent before :meth:`open`.

        Args:
            url: the BMC, ``https://host[:port]`` (a trailing ``/redfish/v1`` is accepted).
            username: the BMC user; None = no credentials.
            password: the password (held in memory only).
            password_env: the name of the variable it came from, for messages.
            verify_tls: check the BMC's certificate.
            chassis: the chassis id to read; None = discover.
            auth: ``basic``, ``session`` or None (session if offered, else basic).
            ca_file: CA bundle for ``verify_tls`` (``SSL_CERT_FILE``); None = system store.
            timeout_s: per-request timeout.
            transport: an httpx transport to use instead of the network (tests).
            ledger: where open sessions are recorded; None = the state folder's file, found
                at :meth:`open`.
        """
        super().__init__()
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise PowerError(f"power.url {url!r} is not an http(s) URL of a BMC")
        path = parts.path.rstrip("/")
        if path.endswith("/redfish/v1"):
            path = path[: -len("/redfish/v1")]
        self.root_url = f"{parts.scheme}://{parts.netloc}{path}"
        self.username = username
        self._password = password
        self._password_env = password_env
        self.verify_tls = verify_tls
        self.chassis = chassis
        self.auth_mode = auth
        self._ca_file = ca_file
        self._timeout_s = timeout_s
        self._transport = transport
        self._client: httpx.Client | None = None
        self._token: str | None = None
        self._session_url: str | None = None
        self._ledger = ledger
        self._session_record: SessionRecord | None = None
        self._sessions_path = "/redfish/v1/SessionService/Sessions"
        self._use_basic = False
        self._paths: list[str] = []
        self._kind = ""
        self._control_id: Any = None
        self.chassis_path: str | None = None
        if password:
            self._warn_if_exposed(parts.scheme)

    def _warn_if_exposed(self, scheme: str) -> None:
        """Say loudly when the BMC password could be read on its way."""
        if scheme == "http":
            logger.warning(
                "INSECURE: the BMC password ($%s) for user %r goes to %s over plain http://:"
                " anyone on the network path can read it; use the BMC's https:// URL",
                self._password_env,
                self.username,
                self.root_url,
            )
        elif not self.verify_tls:
            logger.warning(
                "INSECURE: the BMC's TLS certificate is not verified (power.verify_tls: false):"
                " a man in the middle at %s could read the password ($%s); set verify_tls: true"
                " and put the BMC's CA in SSL_CERT_FILE",
                self.root_url,
                self._password_env,
            )

    @classmethod
    def from_spec(cls, spec: PowerSourceSpec, context: BuildContext) -> RedfishSource:
        """From ``url``, ``username``, ``password_env``, ``verify_tls``, ``chassis``, ``auth``."""
        if spec.url is None:
            raise PowerError("power.source 'redfish' needs power.url (the BMC's https:// URL)")
        return cls(
            url=spec.url,
            username=spec.username,
            password=secret_from_env(spec, context.env),
            password_env=spec.password_env,
            verify_tls=spec.verify_tls,
            chassis=spec.chassis,
            auth=spec.auth,
            ca_file=context.env.get("SSL_CERT_FILE") or None,
        )

    # -- HTTP -------------------------------------------------------------------------------------

    def _who(self) -> str:
        env = f"${self._password_env}" if self._password_env else "the password"
        return f"for user {self.username!r}: check {env} and power.username"

    def _make_client(self) -> httpx.Client:
        verify: ssl.SSLContext | bool = False
        if self.verify_tls:
            verify = ssl.create_default_context(cafile=self._ca_file)
        return httpx.Client(
            base_url=self.root_url,
            verify=verify,
            timeout=self._timeout_s,
            follow_redirects=True,
            trust_env=False,
            headers={"Accept": "application/json", "OData-Version": "4.0"},
            transport=self._transport,
        )

    def _transport_error(self, exc: httpx.HTTPError, url: str) -> PowerError:
        text = str(exc)
        if isinstance(exc, httpx.ConnectError) and "CERTIFICATE_VERIFY_FAILED" in text:
            where = f"SSL_CERT_FILE={self._ca_file}" if self._ca_file else "the system store"
            return PowerError(
                f"TLS certificate of the BMC at {self.root_url} is not trusted by {where}"
                f" ({text}); set power.verify_tls: false to accept a self-signed certificate,"
                " or put the BMC's CA in SSL_CERT_FILE"
            )
        if isinstance(exc, httpx.TimeoutException):
            return PowerError(f"BMC at {url} did not answer within {self._timeout_s:g} s ({text})")
        return PowerError(f"cannot reach the BMC at {url}: {type(exc).__name__}: {text}")

    def _send(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        if self._client is None:
            raise PowerError("redfish source used before open()")
        headers: dict[str, str] = dict(kwargs.pop("headers", {}))
        auth: httpx.BasicAuth | None = None
        if self._token is not None:
            headers["X-Auth-Token"] = self._token
        elif self._use_basic and self.username is not None:
            auth = httpx.BasicAuth(self.username, self._password or "")
        url = urljoin(self.root_url + "/", path.lstrip("/"))
        try:
            return self._client.request(method, url, headers=headers, auth=auth, **kwargs)
        except httpx.HTTPError as exc:
            raise self._transport_error(exc, url) from exc

    def _get_json(self, path: str, *, relogin: bool = True) -> Any:
        response = self._send("GET", path)
        if response.status_code == 401 and self._token is not None and relogin:
            logger.info("Redfish session token refused (expired?); logging in again")
            self._token = None
            self._login()
            return self._get_json(path, relogin=False)
        if response.status_code in (401, 403):
            raise PowerError(f"{response.status_code} from BMC at {response.url} {self._who()}")
        if response.status_code == 404:
            raise PowerError(f"404 from BMC: {response.url} does not exist")
        if response.is_error:
            raise PowerError(f"HTTP {response.status_code} from BMC at {response.url}")
        try:
            return response.json()
        except ValueError as exc:
            raise PowerError(
                f"BMC answered {response.url} with something that is not JSON"
            ) from exc

    def _login(self) -> None:
        """Open a session and keep its token; fall back to basic auth where allowed."""
        if self.username is None:
            return
        response = self._send(
            "POST",
            self._sessions_path,
            json={"UserName": self.username, "Password": self._password or ""},
        )
        token = response.headers.get("X-Auth-Token")
        if response.is_success and token:
            self._token = token
            location = response.headers.get("Location")
            self._session_url = location or None
            self._record_session()
            logger.info("Redfish session opened at %s as %r", self.root_url, self.username)
            return
        if response.status_code in (401, 403) and self.auth_mode == "session":
            raise PowerError(
                f"{response.status_code} from BMC at {response.url} (session login) {self._who()}"
            )
        if self.auth_mode == "session":
            raise PowerError(
                f"BMC at {self.root_url} gave no session token (HTTP {response.status_code} to"
                " POST SessionService/Sessions); set power.auth: basic"
            )
        logger.info(
            "Redfish BMC at %s gave no session token (HTTP %d): using basic auth",
            self.root_url,
            response.status_code,
        )
        self._use_basic = True

    # -- sessions left open by killed runs ---------------------------------------------------------

    def _sessions(self) -> SessionLedger:
        if self._ledger is None:
            self._ledger = SessionLedger()
        return self._ledger

    def _record_session(self) -> None:
        """Record the session just opened (replacing the one it follows, if any)."""
        self._forget_session()
        if self._session_url is not None and self.username is not None:
            self._session_record = self._sessions().add(
                bmc_url=self.root_url, username=self.username, session_url=self._session_url
            )

    def _forget_session(self) -> None:
        if self._session_record is not None:
            self._sessions().remove([self._session_record])
            self._session_record = None

    def _end_stale_sessions(self) -> None:
        """Delete the recorded sessions of this BMC and user whose process is gone."""
        if self.username is None:
            return
        plan = self._sessions().cleanup(
            bmc_url=self.root_url, username=self.username, own_session_url=self._session_url
        )
        done, failed = list(plan.drop), []
        for record in plan.delete:
            try:
                response = self._send("DELETE", record.session_url, timeout=_LOGOUT_TIMEOUT_S)
            except PowerError as exc:
                reason = str(exc)
            else:
                if response.is_success or response.status_code == 404:
                    logger.info(
                        "Redfish session %s at %s, left open since %s by process %d (gone): %s",
                        record.session_url,
                        self.root_url,
                        record.opened_at.isoformat(timespec="seconds"),
                        record.pid,
                        "the BMC had ended it" if response.status_code == 404 else "deleted",
                    )
                    done.append(record)
                    continue
                reason = f"HTTP {response.status_code}"
            logger.warning(
                "Redfish session %s at %s, left open since %s by process %d (gone), could not be"
                " deleted (%s): later runs try again until it is a day old",
                record.session_url,
                self.root_url,
                record.opened_at.isoformat(timespec="seconds"),
                record.pid,
                reason,
            )
            failed.append(record)
        if done or failed:
            self._sessions().settle(done=done, failed=failed)

    # -- life cycle -------------------------------------------------------------------------------

    def open(self) -> None:
        """Log in, end the sessions killed runs left, find the chassis and its power reading."""
        self._client = self._make_client()
        self._use_basic = self.auth_mode == "basic" and self.username is not None
        try:
            root = self._get_json(_SERVICE_ROOT)
            sessions = _link(root.get("Links", {}), "Sessions") if isinstance(root, dict) else None
            if sessions:
                self._sessions_path = sessions
            if self.username is not None and self.auth_mode != "basic":
                self._login()
            self._end_stale_sessions()
            collection = _link(root, "Chassis") or "/redfish/v1/Chassis"
            self.chassis_path, chassis = self._find_chassis(collection)
            self._choose_reading(chassis)
            self.read()
        except BaseException:
            # Every way out (an error, Ctrl-C, SIGTERM's cancellation) ends the session.
            self.close()
            raise
        logger.info("Redfish power: %s", self.description)

    def _find_chassis(self, collection: str) -> tuple[str, dict[str, Any]]:
        members = [
            link
            for m in self._get_json(collection).get("Members", [])
            if (link := _link({"m": m}, "m")) is not None
        ]
        if self.chassis is not None:
            wanted = self.chassis
            for path in members:
                if path.rstrip("/").rsplit("/", 1)[-1] == wanted:
                    return path, self._get_json(path)
            for path in members:
                body = self._get_json(path)
                if body.get("Id") == wanted:
                    return path, body
            direct = f"{collection.rstrip('/')}/{wanted}"
            try:
                return direct, self._get_json(direct)
            except PowerError as exc:
                seen = ", ".join(m.rsplit("/", 1)[-1] for m in members) or "none"
                raise PowerError(
                    f"chassis {wanted!r} not found at the BMC {self.root_url}"
                    f" (chassis there: {seen}); fix power.chassis"
                ) from exc
        with_power: list[tuple[str, dict[str, Any]]] = []
        for path in members:
            body = self._get_json(path)
            if any(_link(body, k) for k in ("EnvironmentMetrics", "Power", "PowerSubsystem")):
                with_power.append((path, body))
        if not with_power:
            raise PowerError(
                f"no chassis at the BMC {self.root_url} links a power resource"
                f" ({len(members)} chassis); this BMC cannot be used as a power source"
            )
        if len(with_power) > 1:
            logger.warning(
                "%d chassis have power resources (%s); reading %s: set power.chassis to choose",
                len(with_power),
                ", ".join(p for p, _ in with_power),
                with_power[0][0],
            )
        return with_power[0]

    def _choose_reading(self, chassis: dict[str, Any]) -> None:
        name = chassis.get("Id") or (self.chassis_path or "").rsplit("/", 1)[-1]
        tried: list[str] = []
        env_link = _link(chassis, "EnvironmentMetrics")
        if env_link:
            body = self._get_json(env_link)
            reading = body.get("PowerWatts", {}).get("Reading")
            if _number(reading) is not None:
                self._kind, self._paths = "environment", [env_link]
                self.description = (
                    f"Node power from BMC (Redfish EnvironmentMetrics.PowerWatts, chassis {name})"
                )
                self.power_limit_w = _number(body.get("PowerLimitWatts", {}).get("SetPoint"))
                return
            tried.append("EnvironmentMetrics.PowerWatts")
        power_link = _link(chassis, "Power")
        if power_link:
            body = self._get_json(power_link)
            for control in body.get("PowerControl", []):
                if (
                    isinstance(control, dict)
                    and _number(control.get("PowerConsumedWatts")) is not None
                ):
                    self._kind, self._paths = "power", [power_link]
                    self._control_id = control.get("MemberId")
                    member = control.get("MemberId", "0")
                    self.description = (
                        "Node power from BMC (Redfish Power.PowerControl"
                        f"[{member}].PowerConsumedWatts, chassis {name})"
                    )
                    limit = control.get("PowerLimit")
                    if isinstance(limit, dict):
                        self.power_limit_w = _number(limit.get("LimitInWatts"))
                    return
            tried.append("Power.PowerControl[].PowerConsumedWatts")
        subsystem = _link(chassis, "PowerSubsystem")
        if subsystem:
            supplies = _link(self._get_json(subsystem), "PowerSupplies")
            members = self._get_json(supplies).get("Members", []) if supplies else []
            metrics: list[str] = []
            for m in members:
                path = _link({"m": m}, "m")
                if path is None:
                    continue
                link = _link(self._get_json(path), "Metrics")
                if link is None:
                    continue
                reading = self._get_json(link).get("InputPowerWatts", {}).get("Reading")
                if _number(reading) is not None:
                    metrics.append(link)
            if metrics:
                self._kind, self._paths = "psu", metrics
                self.description = (
                    "Node power from BMC (Redfish PowerSubsystem: input power of"
                    f" {len(metrics)} of {len(members)} power supplies, summed; chassis {name})"
                )
                return
            tried.append("PowerSubsystem power supplies' InputPowerWatts")
        raise PowerError(
            f"chassis {name} at the BMC {self.root_url} has no power reading"
            f" (tried: {', '.join(tried) or 'no EnvironmentMetrics, Power or PowerSubsystem link'})"
        )

    def read(self) -> Reading:
        """GET the chosen resource(s) and return the watts."""
        if not self._paths:
            raise PowerError("redfish source read before open()")
        total = 0.0
        for path in self._paths:
            body = self._get_json(path)
            value: Any = None
            if self._kind == "environment":
                value = body.get("PowerWatts", {}).get("Reading")
            elif self._kind == "power":
                controls = [c for c in body.get("PowerControl", []) if isinstance(c, dict)]
                match = [c for c in controls if c.get("MemberId") == self._control_id]
                value = (match or controls or [{}])[0].get("PowerConsumedWatts")
            else:
                value = body.get("InputPowerWatts", {}).get("Reading")
            number = _number(value)
            if number is None:
                raise PowerError(f"BMC gave no power reading at {path} (got {value!r})")
            total += number
        return Reading(watts=total)

    def close(self) -> None:
        """End the session (if any) and close the connection."""
        if self._client is None:
            return
        try:
            if self._token is not None and self._session_url:
                self._logout(self._session_url)
        finally:
            self._token = None
            # A session not deleted keeps its entry: the next run deletes it, once this one is gone.
            self._session_record = None
            self._client.close()
            self._client = None

    def _logout(self, session_url: str) -> None:
        try:
            response = self._send("DELETE", session_url, timeout=_LOGOUT_TIMEOUT_S)
        except PowerError as exc:
            reason = str(exc)
        else:
            # 401 and 404: the BMC had ended it already.
            if response.is_success or response.status_code in (401, 404):
                self._forget_session()
                return
            reason = f"HTTP {response.status_code}"
        logger.warning(
            "the Redfish session at %s could not be closed (%s): the next run against this BMC"
            " ends it, or else the BMC when it times out",
            session_url,
            reason,
        )

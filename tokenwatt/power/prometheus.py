"""``prometheus``: GPU board power from a dcgm-exporter style ``/metrics`` endpoint.

Read per scrape, for the GPUs in use (matched by the ``gpu`` label; all GPUs when the spec names
none):

- ``DCGM_FI_DEV_POWER_USAGE`` (W, gauge), summed: the reading;
- ``DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION`` (mJ since boot, counter), summed: the energy
  counter (resets are handled in :mod:`tokenwatt.energy`);
- ``DCGM_FI_DEV_CLOCKS_EVENT_REASONS`` (or the older ``DCGM_FI_DEV_CLOCK_THROTTLE_REASONS``),
  an NVML bitmask, OR-ed over the GPUs: the clock-event reasons;
- ``DCGM_FI_DEV_POWER_MGMT_LIMIT`` (W), summed once: the power limit.

The page is read by :func:`tokenwatt.promtext.parse`: labels are matched by name, never by
position (exporters and node-exporter's textfile collector order them differently), numbers
may be in exponent form, and a counter is found with or without its ``_total`` suffix. A page
that does not parse is a :class:`~tokenwatt.errors.PowerError` naming the line, never a zero.
Two series for the same GPU (e.g. two hosts behind one endpoint) are an error, not a sum.
dcgm-exporter refreshes its values every 30 s by default (``-c``): sampling faster repeats
values; the energy counter is then read only where it changes.

The embedded simulator serves the same names on its ``/metrics``; against it, a spec may omit
``power.url`` and :func:`~tokenwatt.power.base.build_source` is given the simulator's URL.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence

import httpx

from tokenwatt.errors import PowerError
from tokenwatt.power.base import BuildContext, PowerSource, Reading, register_source
from tokenwatt.power.board import reason_names
from tokenwatt.promtext import Sample, parse
from tokenwatt.schema.spec import PowerSourceSpec

__all__ = [
    "ENERGY_METRIC",
    "LIMIT_METRIC",
    "POWER_METRIC",
    "REASON_METRICS",
    "PrometheusSource",
]

logger = logging.getLogger(__name__)

POWER_METRIC = "DCGM_FI_DEV_POWER_USAGE"
ENERGY_METRIC = "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"
REASON_METRICS = ("DCGM_FI_DEV_CLOCKS_EVENT_REASONS", "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS")
LIMIT_METRIC = "DCGM_FI_DEV_POWER_MGMT_LIMIT"


def _family(samples: Sequence[Sample], name: str) -> list[Sample]:
    return [s for s in samples if s.name in (name, f"{name}_total")]


@register_source("prometheus")
class PrometheusSource(PowerSource):
    """GPU board power from dcgm-exporter metrics (scope ``board``)."""

    scope = "board"

    def __init__(
        self,
        *,
        url: str,
        gpu_indices: Sequence[int] | None = None,
        timeout_s: float = 5.0,
    ) -> None:
        """Prepare; nothing is fetched before :meth:`open`.

        Args:
            url: the ``/metrics`` URL.
            gpu_indices: GPUs in use (the ``gpu`` label); None = every GPU served.
            timeout_s: per-scrape timeout.
        """
        super().__init__()
        self.url = url
        self._wanted = [str(i) for i in gpu_indices] if gpu_indices is not None else None
        self.gpus: list[str] = []
        self._timeout_s = timeout_s
        self._client: httpx.Client | None = None
        self._reason_metric: str | None = None
        self.description = f"GPU board power sum (dcgm-exporter {POWER_METRIC} at {url})"

    @classmethod
    def from_spec(cls, spec: PowerSourceSpec, context: BuildContext) -> PrometheusSource:
        """From ``url`` (or the simulator's metrics URL) and the GPUs in use."""
        url = spec.url or context.default_metrics_url
        if url is None:
            raise PowerError(
                "power.source 'prometheus' needs power.url (the exporter's /metrics URL)"
            )
        return cls(url=url, gpu_indices=context.gpu_indices)

    def _scrape(self) -> list[Sample]:
        if self._client is None:
            raise PowerError("prometheus source used before open()")
        try:
            response = self._client.get(self.url)
        except httpx.TimeoutException as exc:
            raise PowerError(f"{self.url} did not answer within {self._timeout_s:g} s") from exc
        except httpx.HTTPError as exc:
            raise PowerError(f"cannot scrape {self.url}: {type(exc).__name__}: {exc}") from exc
        if response.is_error:
            raise PowerError(f"HTTP {response.status_code} from {self.url}")
        try:
            return parse(response.text)
        except ValueError as exc:
            raise PowerError(f"{self.url} is not in the Prometheus text format: {exc}") from exc

    def _by_gpu(
        self, samples: Sequence[Sample], name: str, *, required: bool
    ) -> dict[str, float] | None:
        """The metric's value per GPU in use; None (or an error if required) when incomplete."""
        values: dict[str, float] = {}
        for sample in _family(samples, name):
            gpu = sample.labels.get("gpu")
            if gpu is None or (self.gpus and gpu not in self.gpus):
                continue
            if gpu in values:
                raise PowerError(
                    f"{self.url} serves {name} twice for gpu {gpu} (labels {sample.labels});"
                    " point power.url at one host's exporter"
                )
            values[gpu] = sample.value
        missing = [g for g in self.gpus if g not in values]
        if missing:
            if required:
                raise PowerError(f"{self.url} has no {name} for gpu {', '.join(missing)}")
            return None
        return values

    def open(self) -> None:
        """Scrape once, choose the GPUs, and find which metrics exist."""
        self._client = httpx.Client(
            timeout=self._timeout_s,
            trust_env=False,
            follow_redirects=True,
            headers={"Accept": "text/plain;version=0.0.4"},
        )
        try:
            self._open()
        except PowerError:
            self.close()
            raise

    def _open(self) -> None:
        samples = self._scrape()
        served = sorted(
            {s.labels["gpu"] for s in _family(samples, POWER_METRIC) if "gpu" in s.labels},
            key=lambda g: (len(g), g),
        )
        if not served:
            raise PowerError(
                f"{self.url} serves no {POWER_METRIC} series with a gpu label; is it a"
                " dcgm-exporter (or the simulator's /metrics)?"
            )
        if self._wanted is None:
            self.gpus = served
        else:
            missing = [g for g in self._wanted if g not in served]
            if missing:
                raise PowerError(
                    f"{self.url} has no {POWER_METRIC} for gpu {', '.join(missing)} named in"
                    f" hardware.gpus (it serves gpu {', '.join(served)})"
                )
            self.gpus = list(self._wanted)
        self._by_gpu(samples, POWER_METRIC, required=True)
        self.has_energy_counter = self._by_gpu(samples, ENERGY_METRIC, required=False) is not None
        self._reason_metric = next(
            (m for m in REASON_METRICS if self._by_gpu(samples, m, required=False) is not None),
            None,
        )
        self.throttle_monitored = self._reason_metric is not None
        limits = self._by_gpu(samples, LIMIT_METRIC, required=False)
        self.power_limit_w = math.fsum(limits.values()) if limits else None
        logger.info(
            "prometheus power: gpu %s at %s; energy counter %s; reasons %s",
            ",".join(self.gpus),
            self.url,
            "yes" if self.has_energy_counter else "no",
            self._reason_metric or "no",
        )

    def read(self) -> Reading:
        """One scrape."""
        samples = self._scrape()
        power = self._by_gpu(samples, POWER_METRIC, required=True) or {}
        for gpu, watts in power.items():
            if not math.isfinite(watts) or watts < 0:
                raise PowerError(f"{self.url}: {POWER_METRIC} for gpu {gpu} is {watts}")
        energy = self._by_gpu(samples, ENERGY_METRIC, required=False)
        mask = 0
        reasons_known = True
        if self._reason_metric is not None:
            values = self._by_gpu(samples, self._reason_metric, required=False)
            if values is None:
                reasons_known = False
            else:
                for value in values.values():
                    mask |= int(value) if math.isfinite(value) and value >= 0 else 0
        reasons = reason_names(mask)
        if not reasons_known:
            reasons = (*reasons, "reasons_unreadable")
        energy_ok = energy is not None and all(math.isfinite(v) for v in energy.values())
        return Reading(
            watts=math.fsum(power[g] for g in self.gpus),
            gpu_watts=tuple(power[g] for g in self.gpus),
            energy_j=math.fsum(energy[g] for g in self.gpus) / 1000.0
            if energy_ok and energy is not None
            else None,
            throttle_reasons=reasons,
        )

    def close(self) -> None:
        """Close the HTTP client."""
        if self._client is not None:
            self._client.close()
            self._client = None

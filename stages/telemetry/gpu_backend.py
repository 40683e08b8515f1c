"""The GPU telemetry extension point: one small abstract class, units in every method name.

Backends translate vendor errors into the typed exceptions below, so samplers can tell a
metric the device does not offer (skip it) from a device that fell off the bus (stop).
"""

from __future__ import annotations

import abc
from dataclasses import dataclass

from stages.contracts.errors import RunFailedError


class GpuError(RunFailedError):
    """Any failure of a GPU query that is not one of the more specific kinds below."""


class GpuUnavailableError(GpuError):
    """No usable driver or management library (or no permission to initialise it)."""


class GpuNotSupportedError(GpuError):
    """The device or driver does not offer this metric (e.g. the energy counter before Volta)."""


class GpuLostError(GpuError):
    """The device stopped answering (fell off the bus, needs a reset); stop sampling it."""


@dataclass(frozen=True, slots=True)
class GpuProcessUtilization:
    """One per-process utilisation sample, as the driver timestamped it."""

    pid: int
    timestamp_us: int  # the driver's CPU timestamp (wall clock, microseconds)
    sm_util_pct: float
    mem_util_pct: float


@dataclass(frozen=True, slots=True)
class GpuComputeProcess:
    """A process holding a compute context on a device."""

    pid: int
    used_memory_mib: float | None  # None when the driver cannot tell (e.g. WDDM)


class GpuBackend(abc.ABC):
    """Reads one vendor's GPU metrics by device index; raises only `GpuError` subclasses."""

    @abc.abstractmethod
    def device_count(self) -> int:
        """Number of devices visible to the management library."""

    @abc.abstractmethod
    def name(self, index: int) -> str:
        """Marketing name of the device, e.g. 'NVIDIA A100-SXM4-40GB'."""

    @abc.abstractmethod
    def uuid(self, index: int) -> str:
        """Stable device UUID ('GPU-...')."""

    @abc.abstractmethod
    def power_w(self, index: int) -> float:
        """Board power draw in watts: instantaneous where the device offers it, else the
        driver's own average (see `power_field`)."""

    @abc.abstractmethod
    def power_field(self, index: int) -> str | None:
        """Which reading `power_w` returns for this device: 'instant' or 'average' (None
        before the first `power_w`). Never queries the device."""

    @abc.abstractmethod
    def total_energy_mj(self, index: int) -> int:
        """Energy counter since driver load in millijoules; `GpuNotSupportedError` when the
        device has none or stops offering it."""

    @abc.abstractmethod
    def utilization(self, index: int) -> tuple[float, float]:
        """(SM busy %, memory controller busy %) over the driver's last sample period."""

    @abc.abstractmethod
    def memory_used_mib(self, index: int) -> float:
        """Device memory in use, MiB."""

    @abc.abstractmethod
    def sm_clock_mhz(self, index: int) -> float:
        """Current SM clock, MHz."""

    @abc.abstractmethod
    def temperature_c(self, index: int) -> float:
        """GPU core temperature, degrees Celsius."""

    @abc.abstractmethod
    def throttle_reasons(self, index: int) -> int:
        """Bit mask of current clock throttle (clock event) reasons."""

    @abc.abstractmethod
    def process_utilization(self, index: int, since_us: int) -> list[GpuProcessUtilization]:
        """Per-process samples newer than `since_us` (driver timestamps); [] when none."""

    @abc.abstractmethod
    def compute_processes(self, index: int) -> list[GpuComputeProcess]:
        """Processes with a compute context on the device, with their memory."""

    @abc.abstractmethod
    def shutdown(self) -> None:
        """Release the management library; the backend is unusable afterwards."""

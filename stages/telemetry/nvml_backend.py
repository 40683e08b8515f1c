"""`GpuBackend` over NVML (the `pynvml` module of nvidia-ml-py), with NVML errors made typed.

The nvml module is a constructor argument so tests can pass `stages.telemetry.fake_nvml`'s
fake instead; by default `pynvml` is imported lazily, so importing this file never needs NVML.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from typing import Any

from stages.telemetry.gpu_backend import (
    GpuBackend,
    GpuComputeProcess,
    GpuError,
    GpuLostError,
    GpuNotSupportedError,
    GpuProcessUtilization,
    GpuUnavailableError,
)

log = logging.getLogger(__name__)

MIB = 1024 * 1024

# NVMLError subclass names (as pynvml generates them) grouped by what a sampler should do.
_LOST = ("NVMLError_GpuIsLost", "NVMLError_ResetRequired", "NVMLError_GpuNotFound")
_NOT_SUPPORTED = (
    "NVMLError_NotSupported",
    "NVMLError_FunctionNotFound",
    "NVMLError_NoPermission",
)
_UNAVAILABLE = (
    "NVMLError_LibraryNotFound",
    "NVMLError_DriverNotLoaded",
    "NVMLError_LibRmVersionMismatch",
    "NVMLError_Uninitialized",
)


# c_nvmlValue_t's union member for each NVML_VALUE_TYPE_* (pynvml's order).
_VALUE_MEMBER = ("dVal", "uiVal", "ulVal", "ullVal", "sllVal", "siVal", "usVal")


def _error_classes(nvml: Any, names: tuple[str, ...]) -> tuple[type[BaseException], ...]:
    return tuple(cls for name in names if (cls := getattr(nvml, name, None)) is not None)


def _import_pynvml() -> Any:
    """Import pynvml lazily: NVML is optional at runtime."""
    try:
        import pynvml
    except ImportError as error:
        raise GpuUnavailableError(f"pynvml is not installed: {error}") from error
    return pynvml


def _text(value: str | bytes) -> str:
    """Old pynvml releases return bytes for strings, newer ones str."""
    return value.decode() if isinstance(value, bytes) else value


class NvmlBackend(GpuBackend):
    """NVIDIA GPUs through NVML; raises `GpuUnavailableError` when NVML cannot start."""

    def __init__(self, nvml: Any | None = None) -> None:
        if nvml is None:
            nvml = _import_pynvml()
        self._nvml: Any = nvml
        self._lost = _error_classes(nvml, _LOST)
        self._not_supported = _error_classes(nvml, _NOT_SUPPORTED)
        self._unavailable = _error_classes(nvml, _UNAVAILABLE)
        self._not_found = _error_classes(nvml, ("NVMLError_NotFound",))
        self._handles: dict[int, Any] = {}
        self._power_fields: dict[int, str] = {}  # index -> 'instant' | 'average'
        try:
            nvml.nvmlInit()
        except nvml.NVMLError as error:
            # Whatever stops NVML from starting (no library, no driver, no permission, a
            # version mismatch) means the same to us: no GPU telemetry on this host.
            raise GpuUnavailableError(f"NVML init failed: {error}") from error
        self._initialised = True

    # -- plumbing ---------------------------------------------------------------------------

    def _translate(self, error: BaseException, what: str) -> GpuError:
        message = f"{what}: {error}"
        if isinstance(error, self._lost):
            return GpuLostError(message)
        if isinstance(error, self._not_supported):
            return GpuNotSupportedError(message)
        if isinstance(error, self._unavailable):
            return GpuUnavailableError(message)
        return GpuError(message)

    @contextlib.contextmanager
    def _mapped(self, what: str) -> Iterator[None]:
        """The one error mapper: NVMLError raised inside becomes the typed `GpuError` for it.
        Functions are called directly (a misspelt name fails loudly, never as 'unsupported')."""
        try:
            yield
        except self._nvml.NVMLError as error:
            raise self._translate(error, what) from error

    def _handle(self, index: int) -> Any:
        handle = self._handles.get(index)
        if handle is None:
            with self._mapped("nvmlDeviceGetHandleByIndex"):
                handle = self._nvml.nvmlDeviceGetHandleByIndex(index)
            self._handles[index] = handle
        return handle

    # -- GpuBackend -------------------------------------------------------------------------

    def device_count(self) -> int:
        with self._mapped("nvmlDeviceGetCount"):
            return int(self._nvml.nvmlDeviceGetCount())

    def name(self, index: int) -> str:
        handle = self._handle(index)
        with self._mapped("nvmlDeviceGetName"):
            return _text(self._nvml.nvmlDeviceGetName(handle))

    def uuid(self, index: int) -> str:
        handle = self._handle(index)
        with self._mapped("nvmlDeviceGetUUID"):
            return _text(self._nvml.nvmlDeviceGetUUID(handle))

    def power_w(self, index: int) -> float:
        handle = self._handle(index)
        field = self._power_fields.get(index)
        if field is None:
            field = self._power_fields[index] = self._decide_power_field(index, handle)
        if field == "instant":
            return self._instant_power_mw(handle) / 1000.0
        with self._mapped("nvmlDeviceGetPowerUsage"):
            return float(self._nvml.nvmlDeviceGetPowerUsage(handle)) / 1000.0  # NVML: mW

    def power_field(self, index: int) -> str | None:
        return self._power_fields.get(index)

    def _decide_power_field(self, index: int, handle: Any) -> str:
        """'instant' when the device answers NVML_FI_DEV_POWER_INSTANT, else 'average'
        (nvmlDeviceGetPowerUsage, a ~1 s mean on Ampere and newer). Decided once per device;
        a lost device propagates."""
        try:
            self._instant_power_mw(handle)
        except GpuLostError:
            raise
        except GpuError as error:
            log.info("GPU %d: no instantaneous power field (%s); using the average", index, error)
            return "average"
        return "instant"

    def _instant_power_mw(self, handle: Any) -> float:
        what = "nvmlDeviceGetFieldValues(NVML_FI_DEV_POWER_INSTANT)"
        with self._mapped(what):
            values = self._nvml.nvmlDeviceGetFieldValues(
                handle, [self._nvml.NVML_FI_DEV_POWER_INSTANT]
            )
        field = values[0]
        if field.nvmlReturn != self._nvml.NVML_SUCCESS:
            # Each value carries its own return code; NVMLError(code) is that code's subclass.
            raise self._translate(self._nvml.NVMLError(field.nvmlReturn), what)
        return float(getattr(field.value, _VALUE_MEMBER[field.valueType]))

    def total_energy_mj(self, index: int) -> int:
        handle = self._handle(index)
        with self._mapped("nvmlDeviceGetTotalEnergyConsumption"):
            return int(self._nvml.nvmlDeviceGetTotalEnergyConsumption(handle))

    def utilization(self, index: int) -> tuple[float, float]:
        handle = self._handle(index)
        with self._mapped("nvmlDeviceGetUtilizationRates"):
            rates = self._nvml.nvmlDeviceGetUtilizationRates(handle)
        return float(rates.gpu), float(rates.memory)

    def memory_used_mib(self, index: int) -> float:
        handle = self._handle(index)
        with self._mapped("nvmlDeviceGetMemoryInfo"):
            return float(self._nvml.nvmlDeviceGetMemoryInfo(handle).used) / MIB

    def sm_clock_mhz(self, index: int) -> float:
        handle = self._handle(index)
        with self._mapped("nvmlDeviceGetClockInfo"):
            return float(self._nvml.nvmlDeviceGetClockInfo(handle, self._nvml.NVML_CLOCK_SM))

    def temperature_c(self, index: int) -> float:
        handle = self._handle(index)
        with self._mapped("nvmlDeviceGetTemperature"):
            sensor = self._nvml.NVML_TEMPERATURE_GPU
            return float(self._nvml.nvmlDeviceGetTemperature(handle, sensor))

    def throttle_reasons(self, index: int) -> int:
        handle = self._handle(index)
        try:
            with self._mapped("nvmlDeviceGetCurrentClocksEventReasons"):
                return int(self._nvml.nvmlDeviceGetCurrentClocksEventReasons(handle))
        except GpuNotSupportedError:
            # Drivers older than 535 only know the deprecated name (FunctionNotFound above).
            with self._mapped("nvmlDeviceGetCurrentClocksThrottleReasons"):
                return int(self._nvml.nvmlDeviceGetCurrentClocksThrottleReasons(handle))

    def process_utilization(self, index: int, since_us: int) -> list[GpuProcessUtilization]:
        handle = self._handle(index)
        try:
            samples = self._nvml.nvmlDeviceGetProcessUtilization(handle, since_us)
        except self._nvml.NVMLError as error:
            # NOT_FOUND: no process had a sample newer than since_us. pynvml also raises
            # NVMLError(NVML_SUCCESS) when the driver reports zero samples on the first call.
            if isinstance(error, self._not_found) or getattr(error, "value", None) == getattr(
                self._nvml, "NVML_SUCCESS", 0
            ):
                return []
            raise self._translate(error, "nvmlDeviceGetProcessUtilization") from error
        return [
            GpuProcessUtilization(
                pid=int(sample.pid),
                timestamp_us=int(sample.timeStamp),
                sm_util_pct=float(sample.smUtil),
                mem_util_pct=float(sample.memUtil),
            )
            for sample in samples
        ]

    def compute_processes(self, index: int) -> list[GpuComputeProcess]:
        handle = self._handle(index)
        with self._mapped("nvmlDeviceGetComputeRunningProcesses"):
            processes = self._nvml.nvmlDeviceGetComputeRunningProcesses(handle)
        return [
            GpuComputeProcess(
                pid=int(process.pid),
                used_memory_mib=None
                if process.usedGpuMemory is None
                else float(process.usedGpuMemory) / MIB,
            )
            for process in processes
        ]

    def shutdown(self) -> None:
        if not self._initialised:
            return
        self._initialised = False
        self._handles.clear()
        try:
            self._nvml.nvmlShutdown()
        except self._nvml.NVMLError as error:
            log.debug("nvmlShutdown failed: %s", error)

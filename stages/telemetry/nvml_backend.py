"""`GpuBackend` over NVML (the `pynvml` module of nvidia-ml-py), with NVML errors made typed.

The nvml module is a constructor argument so tests can pass `stages.telemetry.fake_nvml`'s
fake instead; by default `pynvml` is imported lazily, so importing this file never needs NVML.
"""

from __future__ import annotations

import logging
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
        self._no_energy_counter: set[int] = set()
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

    def _call(self, function: str, *args: Any) -> Any:
        try:
            fn = getattr(self._nvml, function)
        except AttributeError:
            raise GpuNotSupportedError(f"{function}: not in this pynvml") from None
        try:
            return fn(*args)
        except self._nvml.NVMLError as error:
            raise self._translate(error, function) from error

    def _handle(self, index: int) -> Any:
        handle = self._handles.get(index)
        if handle is None:
            handle = self._call("nvmlDeviceGetHandleByIndex", index)
            self._handles[index] = handle
        return handle

    def _device(self, function: str, index: int, *args: Any) -> Any:
        return self._call(function, self._handle(index), *args)

    # -- GpuBackend -------------------------------------------------------------------------

    def device_count(self) -> int:
        return int(self._call("nvmlDeviceGetCount"))

    def name(self, index: int) -> str:
        return _text(self._device("nvmlDeviceGetName", index))

    def uuid(self, index: int) -> str:
        return _text(self._device("nvmlDeviceGetUUID", index))

    def power_w(self, index: int) -> float:
        return float(self._device("nvmlDeviceGetPowerUsage", index)) / 1000.0  # NVML: mW

    def total_energy_mj(self, index: int) -> int | None:
        if index in self._no_energy_counter:
            return None
        try:
            return int(self._device("nvmlDeviceGetTotalEnergyConsumption", index))
        except GpuNotSupportedError:
            self._no_energy_counter.add(index)  # pre-Volta: never ask again
            return None

    def utilization(self, index: int) -> tuple[float, float]:
        rates = self._device("nvmlDeviceGetUtilizationRates", index)
        return float(rates.gpu), float(rates.memory)

    def memory_used_mib(self, index: int) -> float:
        return float(self._device("nvmlDeviceGetMemoryInfo", index).used) / MIB

    def sm_clock_mhz(self, index: int) -> float:
        return float(self._device("nvmlDeviceGetClockInfo", index, self._nvml.NVML_CLOCK_SM))

    def temperature_c(self, index: int) -> float:
        sensor = self._nvml.NVML_TEMPERATURE_GPU
        return float(self._device("nvmlDeviceGetTemperature", index, sensor))

    def throttle_reasons(self, index: int) -> int:
        try:
            return int(self._device("nvmlDeviceGetCurrentClocksEventReasons", index))
        except GpuNotSupportedError:
            # Drivers older than 535 only know the deprecated name.
            return int(self._device("nvmlDeviceGetCurrentClocksThrottleReasons", index))

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
        processes = self._device("nvmlDeviceGetComputeRunningProcesses", index)
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

"""`FakeNvml`: stands in for the `pynvml` module, answering from a script (see `script`).

Same function names and units as pynvml (power in mW, energy in mJ, memory in bytes, process
timestamps in wall-clock microseconds); the class also carries pynvml's constants and error
classes as attributes, as the module does.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from stages.telemetry.fake_nvml import constants, errors
from stages.telemetry.fake_nvml.constants import (
    MIB,
    NVML_CLOCK_SM,
    NVML_ERROR_INVALID_ARGUMENT,
    NVML_ERROR_NOT_SUPPORTED,
    NVML_FI_DEV_POWER_AVERAGE,
    NVML_FI_DEV_POWER_INSTANT,
    NVML_TEMPERATURE_GPU,
    NVML_VALUE_TYPE_UNSIGNED_INT,
)
from stages.telemetry.fake_nvml.errors import (
    NVMLError_GpuIsLost,
    NVMLError_InvalidArgument,
    NVMLError_NotFound,
    NVMLError_NotSupported,
    NVMLError_Uninitialized,
)
from stages.telemetry.fake_nvml.script import (
    FakeDevice,
    FakeProcess,
    FakeScript,
    step_integral,
    step_value,
)
from stages.telemetry.fake_nvml.structs import (
    FakeHandle,
    FieldValue,
    MemoryInfo,
    ProcessInfo,
    ProcessUtilizationSample,
    Utilization,
)


class FakeNvml:
    """Stands in for the `pynvml` module; construct from a script, pass to `NvmlBackend`."""

    def __init__(
        self,
        script: FakeScript | dict[str, Any],
        clock_ns: Callable[[], int] = time.monotonic_ns,
        wall_offset_ns: int | None = None,
    ) -> None:
        self.script = script if isinstance(script, FakeScript) else FakeScript(**script)
        self._clock_ns = clock_ns
        self.origin_ns = self.script.start_ns if self.script.start_ns is not None else clock_ns()
        # Process utilisation timestamps are wall-clock microseconds in real NVML.
        self.wall_offset_ns = (
            time.time_ns() - time.monotonic_ns() if wall_offset_ns is None else wall_offset_ns
        )
        self._init_count = 0
        self._file_seen_s: dict[int, float] = {}  # id(device) -> when events_after_file appeared

    @classmethod
    def from_file(
        cls, path: str | os.PathLike[str], clock_ns: Callable[[], int] = time.monotonic_ns
    ) -> FakeNvml:
        """Load a JSON or YAML script."""
        data = yaml.safe_load(Path(path).read_text()) or {}
        return cls(FakeScript(**data), clock_ns=clock_ns)

    # -- time and script evaluation -------------------------------------------------------------

    def elapsed_s(self) -> float:
        """Seconds since the script's origin."""
        return (self._clock_ns() - self.origin_ns) / 1e9

    def scripted_energy_j(self, index: int, t0_s: float, t1_s: float) -> float:
        """The true energy the script draws over [t0_s, t1_s] (what a sampler should report)."""
        return step_integral(self.script.devices[index].power_w, max(t0_s, 0.0), t1_s)

    def _grid_s(self, period_ms: float) -> float:
        """The latest multiple of period_ms at or before now (integer ns: no float drift)."""
        period_ns = max(round(period_ms * 1e6), 1)
        elapsed_ns = max(self._clock_ns() - self.origin_ns, 0)
        return elapsed_ns // period_ns * period_ns / 1e9

    def _counter_mj(self, device: FakeDevice, t_s: float) -> int:
        updated_s = self._grid_s(device.energy_update_period_ms)  # the last counter update
        offset_s = self._events_offset_s(device, t_s)
        resets = [r + offset_s for r in device.energy_resets_at_s if r + offset_s <= t_s]
        if resets:
            since_s = max(resets)
            return round(step_integral(device.power_w, since_s, max(updated_s, since_s)) * 1000)
        joules = step_integral(device.power_w, 0.0, updated_s)
        return device.energy_counter_start_mj + round(joules * 1000)

    def _events_offset_s(self, device: FakeDevice, t_s: float) -> float:
        """Where the device's scripted events count from: 0 (the origin), or the script time
        its `events_after_file` first existed (infinity while it does not)."""
        if device.events_after_file is None:
            return 0.0
        key = id(device)  # the script's devices live as long as this fake
        if key not in self._file_seen_s:
            if not os.path.exists(device.events_after_file):
                return float("inf")
            self._file_seen_s[key] = t_s
        return self._file_seen_s[key]

    def _check_init(self) -> None:
        if self._init_count <= 0:
            raise NVMLError_Uninitialized()

    def _device(self, handle: FakeHandle, function: str) -> tuple[FakeDevice, float]:
        """The scripted device behind a handle and the current script time; raises like NVML."""
        self._check_init()
        if not isinstance(handle, FakeHandle) or handle.index >= len(self.script.devices):
            raise NVMLError_InvalidArgument()
        device = self.script.devices[handle.index]
        t_s = self.elapsed_s()
        offset_s = self._events_offset_s(device, t_s)
        if device.lost_at_s is not None and t_s >= device.lost_at_s + offset_s:
            raise NVMLError_GpuIsLost()
        if device.crash_at_s is not None and t_s >= device.crash_at_s + offset_s:
            raise RuntimeError(f"fake NVML crashed in {function} (crash_at_s)")
        if function in device.not_supported:
            raise NVMLError_NotSupported()
        from_s = device.not_supported_from_s.get(function)
        if from_s is not None and t_s >= from_s:
            raise NVMLError_NotSupported()
        return device, t_s

    def _power_mw(self, device: FakeDevice, t_s: float, average_s: float) -> int:
        """Power now, or its mean over the last average_s seconds, in milliwatts."""
        if average_s <= 0:
            return round(step_value(device.power_w, t_s) * 1000)
        return round(step_integral(device.power_w, t_s - average_s, t_s) / average_s * 1000)

    # -- the pynvml surface -----------------------------------------------------------------------

    def nvmlInit(self) -> None:
        if self.script.init_error:
            raise getattr(self, self.script.init_error)()
        self._init_count += 1

    def nvmlShutdown(self) -> None:
        self._check_init()
        self._init_count -= 1

    def nvmlDeviceGetCount(self) -> int:
        self._check_init()
        return len(self.script.devices)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> FakeHandle:
        self._check_init()
        if not 0 <= index < len(self.script.devices):
            raise NVMLError_InvalidArgument()
        return FakeHandle(index)

    def nvmlDeviceGetName(self, handle: FakeHandle) -> str:
        device, _ = self._device(handle, "nvmlDeviceGetName")
        return device.name

    def nvmlDeviceGetUUID(self, handle: FakeHandle) -> str:
        device, _ = self._device(handle, "nvmlDeviceGetUUID")
        return device.uuid or f"GPU-00000000-fake-0000-0000-{handle.index:012d}"

    def nvmlDeviceGetPowerUsage(self, handle: FakeHandle) -> int:
        """Milliwatts, like NVML."""
        device, t_s = self._device(handle, "nvmlDeviceGetPowerUsage")
        return self._power_mw(device, t_s, device.power_average_s)

    def nvmlDeviceGetFieldValues(self, handle: FakeHandle, fieldIds: list[int]) -> Any:
        """An array of c_nvmlFieldValue_t, like pynvml; a field the device lacks is answered
        per value (nvmlReturn NOT_SUPPORTED; an unknown id INVALID_ARGUMENT), not raised."""
        device, t_s = self._device(handle, "nvmlDeviceGetFieldValues")
        values = (FieldValue * len(fieldIds))()
        stamp_us = (self._clock_ns() + self.wall_offset_ns) // 1000
        for value, field_id in zip(values, fieldIds, strict=True):
            value.fieldId = field_id
            value.timestamp = stamp_us
            if field_id in device.unsupported_fields:
                value.nvmlReturn = NVML_ERROR_NOT_SUPPORTED
            elif field_id == NVML_FI_DEV_POWER_INSTANT:
                value.valueType = NVML_VALUE_TYPE_UNSIGNED_INT
                value.value.uiVal = self._power_mw(device, t_s, 0.0)
            elif field_id == NVML_FI_DEV_POWER_AVERAGE:
                value.valueType = NVML_VALUE_TYPE_UNSIGNED_INT
                value.value.uiVal = self._power_mw(device, t_s, max(device.power_average_s, 1.0))
            else:
                value.nvmlReturn = NVML_ERROR_INVALID_ARGUMENT
        return values

    def nvmlDeviceGetTotalEnergyConsumption(self, handle: FakeHandle) -> int:
        """Millijoules since 'driver load'; moves only every energy_update_period_ms."""
        device, t_s = self._device(handle, "nvmlDeviceGetTotalEnergyConsumption")
        return self._counter_mj(device, t_s)

    def nvmlDeviceGetUtilizationRates(self, handle: FakeHandle) -> Utilization:
        device, t_s = self._device(handle, "nvmlDeviceGetUtilizationRates")
        return Utilization(
            gpu=round(step_value(device.sm_util_pct, t_s)),
            memory=round(step_value(device.mem_util_pct, t_s)),
        )

    def nvmlDeviceGetMemoryInfo(self, handle: FakeHandle) -> MemoryInfo:
        """Bytes, like NVML."""
        device, t_s = self._device(handle, "nvmlDeviceGetMemoryInfo")
        total = round(device.memory_total_mib * MIB)
        used = min(total, round(step_value(device.memory_used_mib, t_s) * MIB))
        return MemoryInfo(total=total, free=total - used, used=used)

    def nvmlDeviceGetClockInfo(self, handle: FakeHandle, clock_type: int) -> int:
        device, t_s = self._device(handle, "nvmlDeviceGetClockInfo")
        if clock_type != NVML_CLOCK_SM:
            raise NVMLError_NotSupported()
        return round(step_value(device.sm_clock_mhz, t_s))

    def nvmlDeviceGetTemperature(self, handle: FakeHandle, sensor: int) -> int:
        device, t_s = self._device(handle, "nvmlDeviceGetTemperature")
        if sensor != NVML_TEMPERATURE_GPU:
            raise NVMLError_InvalidArgument()
        return round(step_value(device.temperature_c, t_s))

    def nvmlDeviceGetCurrentClocksEventReasons(self, handle: FakeHandle) -> int:
        device, t_s = self._device(handle, "nvmlDeviceGetCurrentClocksEventReasons")
        return int(step_value(device.throttle_reasons, t_s))

    def nvmlDeviceGetCurrentClocksThrottleReasons(self, handle: FakeHandle) -> int:
        device, t_s = self._device(handle, "nvmlDeviceGetCurrentClocksThrottleReasons")
        return int(step_value(device.throttle_reasons, t_s))

    def nvmlDeviceGetComputeRunningProcesses(self, handle: FakeHandle) -> list[ProcessInfo]:
        device, t_s = self._device(handle, "nvmlDeviceGetComputeRunningProcesses")
        return [
            ProcessInfo(
                pid=process.pid,
                usedGpuMemory=None
                if process.used_memory_mib is None
                else round(process.used_memory_mib * MIB),
                gpuInstanceId=0xFFFFFFFF,
                computeInstanceId=0xFFFFFFFF,
            )
            for process in device.processes
            if _alive(process, t_s)
        ]

    def nvmlDeviceGetProcessUtilization(
        self,
        handle: FakeHandle,
        timeStamp: int,
    ) -> list[ProcessUtilizationSample]:
        """One sample per process with non-zero utilisation in the driver's latest sample
        period, if newer than timeStamp (wall-clock us); NotFound when there is none."""
        device, _ = self._device(handle, "nvmlDeviceGetProcessUtilization")
        sampled_s = self._grid_s(device.process_sample_period_ms)
        stamp_us = (self.origin_ns + round(sampled_s * 1e9) + self.wall_offset_ns) // 1000
        samples = []
        if stamp_us > timeStamp:
            for process in device.processes:
                if not _alive(process, sampled_s):
                    continue
                sm = round(step_value(process.sm_util_pct, sampled_s))
                memory = round(step_value(process.mem_util_pct, sampled_s))
                if sm or memory:
                    samples.append(
                        ProcessUtilizationSample(process.pid, stamp_us, sm, memory, 0, 0)
                    )
        if not samples:
            raise NVMLError_NotFound()
        return samples


def _alive(process: FakeProcess, t_s: float) -> bool:
    return process.start_s <= t_s and (process.end_s is None or t_s < process.end_s)


# Like the pynvml module, the fake carries pynvml's constants and error classes as attributes.
for _module in (constants, errors):
    for _name, _value in vars(_module).items():
        if _name.startswith(("NVML_", "NVMLError")):
            setattr(FakeNvml, _name, _value)

"""A faithful, scripted fake of the `pynvml` surface `NvmlBackend` uses, for machines without GPUs.

Same function names, same units (power in mW, energy in mJ, memory in bytes, process
timestamps in wall-clock microseconds), same `NVMLError` subclasses with the same names and
codes. A script (dict, or a JSON/YAML file, e.g. named by env var `COLLOBENCH_FAKE_NVML` so a
spawned sampler can load it) describes each device over time: piecewise-constant traces,
an energy counter that integrates the scripted power but only moves every ~100 ms like the
real one, counter resets, a GPU that is lost at time T, functions that turn NotSupported at
time T, compute processes, and power read two ways: `nvmlDeviceGetPowerUsage` (optionally a
moving average, as on Ampere and newer) and `nvmlDeviceGetFieldValues` with its per-value
return codes, in the same ctypes structures pynvml returns.
"""

from __future__ import annotations

import ctypes
import itertools
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field

ENV_VAR = "COLLOBENCH_FAKE_NVML"

# -- constants, with pynvml's names and values --------------------------------------------------

NVML_SUCCESS = 0
NVML_ERROR_UNINITIALIZED = 1
NVML_ERROR_INVALID_ARGUMENT = 2
NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_NO_PERMISSION = 4
NVML_ERROR_ALREADY_INITIALIZED = 5
NVML_ERROR_NOT_FOUND = 6
NVML_ERROR_INSUFFICIENT_SIZE = 7
NVML_ERROR_INSUFFICIENT_POWER = 8
NVML_ERROR_DRIVER_NOT_LOADED = 9
NVML_ERROR_TIMEOUT = 10
NVML_ERROR_IRQ_ISSUE = 11
NVML_ERROR_LIBRARY_NOT_FOUND = 12
NVML_ERROR_FUNCTION_NOT_FOUND = 13
NVML_ERROR_CORRUPTED_INFOROM = 14
NVML_ERROR_GPU_IS_LOST = 15
NVML_ERROR_RESET_REQUIRED = 16
NVML_ERROR_OPERATING_SYSTEM = 17
NVML_ERROR_LIB_RM_VERSION_MISMATCH = 18
NVML_ERROR_IN_USE = 19
NVML_ERROR_MEMORY = 20
NVML_ERROR_NO_DATA = 21
NVML_ERROR_VGPU_ECC_NOT_SUPPORTED = 22
NVML_ERROR_INSUFFICIENT_RESOURCES = 23
NVML_ERROR_FREQ_NOT_SUPPORTED = 24
NVML_ERROR_ARGUMENT_VERSION_MISMATCH = 25
NVML_ERROR_DEPRECATED = 26
NVML_ERROR_NOT_READY = 27
NVML_ERROR_GPU_NOT_FOUND = 28
NVML_ERROR_INVALID_STATE = 29
NVML_ERROR_RESET_TYPE_NOT_SUPPORTED = 30
NVML_ERROR_UNKNOWN = 999

NVML_TEMPERATURE_GPU = 0
NVML_CLOCK_SM = 1

NVML_VALUE_TYPE_DOUBLE = 0
NVML_VALUE_TYPE_UNSIGNED_INT = 1
NVML_VALUE_TYPE_UNSIGNED_LONG = 2
NVML_VALUE_TYPE_UNSIGNED_LONG_LONG = 3
NVML_VALUE_TYPE_SIGNED_LONG_LONG = 4
NVML_VALUE_TYPE_SIGNED_INT = 5
NVML_VALUE_TYPE_UNSIGNED_SHORT = 6

NVML_FI_DEV_POWER_AVERAGE = 185  # mW, averaged over ~1 s (Ampere and newer)
NVML_FI_DEV_POWER_INSTANT = 186  # mW, instantaneous

MIB = 1024 * 1024


# -- errors: NVMLError(code) returns the subclass for that code, as in pynvml --------------------


class NVMLError(Exception):
    """Base of the fake NVML errors; `value` is the NVML return code."""

    value: int
    _by_value: dict[int, type[NVMLError]] = {}

    def __new__(cls, value: int = NVML_ERROR_UNKNOWN) -> NVMLError:
        if cls is NVMLError:
            cls = NVMLError._by_value.get(value, NVMLError)
        error: NVMLError = Exception.__new__(cls)
        error.value = getattr(cls, "_code", value)
        return error

    def __init__(self, value: int = NVML_ERROR_UNKNOWN) -> None:
        super().__init__(self.value)

    def __str__(self) -> str:
        return f"NVML error {self.value} ({type(self).__name__.removeprefix('NVMLError_')})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, NVMLError) and self.value == other.value

    def __hash__(self) -> int:
        return hash(self.value)


def _error_class(name: str, code: int) -> type[NVMLError]:
    cls = type(name, (NVMLError,), {"_code": code, "__module__": __name__})
    NVMLError._by_value[code] = cls
    return cls


NVMLError_Uninitialized = _error_class("NVMLError_Uninitialized", 1)
NVMLError_InvalidArgument = _error_class("NVMLError_InvalidArgument", 2)
NVMLError_NotSupported = _error_class("NVMLError_NotSupported", 3)
NVMLError_NoPermission = _error_class("NVMLError_NoPermission", 4)
NVMLError_AlreadyInitialized = _error_class("NVMLError_AlreadyInitialized", 5)
NVMLError_NotFound = _error_class("NVMLError_NotFound", 6)
NVMLError_InsufficientSize = _error_class("NVMLError_InsufficientSize", 7)
NVMLError_InsufficientPower = _error_class("NVMLError_InsufficientPower", 8)
NVMLError_DriverNotLoaded = _error_class("NVMLError_DriverNotLoaded", 9)
NVMLError_Timeout = _error_class("NVMLError_Timeout", 10)
NVMLError_IrqIssue = _error_class("NVMLError_IrqIssue", 11)
NVMLError_LibraryNotFound = _error_class("NVMLError_LibraryNotFound", 12)
NVMLError_FunctionNotFound = _error_class("NVMLError_FunctionNotFound", 13)
NVMLError_CorruptedInforom = _error_class("NVMLError_CorruptedInforom", 14)
NVMLError_GpuIsLost = _error_class("NVMLError_GpuIsLost", 15)
NVMLError_ResetRequired = _error_class("NVMLError_ResetRequired", 16)
NVMLError_OperatingSystem = _error_class("NVMLError_OperatingSystem", 17)
NVMLError_LibRmVersionMismatch = _error_class("NVMLError_LibRmVersionMismatch", 18)
NVMLError_InUse = _error_class("NVMLError_InUse", 19)
NVMLError_Memory = _error_class("NVMLError_Memory", 20)
NVMLError_NoData = _error_class("NVMLError_NoData", 21)
NVMLError_VgpuEccNotSupported = _error_class("NVMLError_VgpuEccNotSupported", 22)
NVMLError_InsufficientResources = _error_class("NVMLError_InsufficientResources", 23)
NVMLError_FreqNotSupported = _error_class("NVMLError_FreqNotSupported", 24)
NVMLError_ArgumentVersionMismatch = _error_class("NVMLError_ArgumentVersionMismatch", 25)
NVMLError_Deprecated = _error_class("NVMLError_Deprecated", 26)
NVMLError_NotReady = _error_class("NVMLError_NotReady", 27)
NVMLError_GpuNotFound = _error_class("NVMLError_GpuNotFound", 28)
NVMLError_InvalidState = _error_class("NVMLError_InvalidState", 29)
NVMLError_ResetTypeNotSupported = _error_class("NVMLError_ResetTypeNotSupported", 30)
NVMLError_Unknown = _error_class("NVMLError_Unknown", 999)


# -- the script ----------------------------------------------------------------------------------

# A trace is a constant, or piecewise-constant steps [[t_s, value], ...] (t_s since the
# script's origin; before the first step the first value holds).
Trace = float | list[tuple[float, float]]


class _ScriptModel(BaseModel):
    model_config = ConfigDict(extra="forbid")


class FakeProcess(_ScriptModel):
    """A compute process on a fake device, alive in [start_s, end_s)."""

    pid: int
    used_memory_mib: float | None = 256.0
    start_s: float = 0.0
    end_s: float | None = None
    sm_util_pct: Trace = 0.0
    mem_util_pct: Trace = 0.0


class FakeDevice(_ScriptModel):
    """One scripted GPU."""

    name: str = "NVIDIA Fake GPU"
    uuid: str | None = None  # default GPU-00000000-fake-0000-0000-<index>
    memory_total_mib: float = 16384.0
    power_w: Trace = 100.0
    # nvmlDeviceGetPowerUsage's moving-average window (about 1 s on Ampere and newer);
    # 0 = it reports the instantaneous draw, as on older GPUs.
    power_average_s: float = Field(0.0, ge=0)
    # Field ids whose value nvmlDeviceGetFieldValues answers with NVML_ERROR_NOT_SUPPORTED.
    unsupported_fields: list[int] = Field(default_factory=list)
    sm_util_pct: Trace = 0.0
    mem_util_pct: Trace = 0.0
    memory_used_mib: Trace = 512.0
    sm_clock_mhz: Trace = 1410.0
    temperature_c: Trace = 45.0
    throttle_reasons: Trace = 0.0
    energy_counter_start_mj: int = 1_234_567_890  # a real counter starts at driver load
    energy_update_period_ms: float = Field(100.0, gt=0)
    energy_resets_at_s: list[float] = Field(default_factory=list)  # counter restarts at 0
    lost_at_s: float | None = None  # from then on every device query raises GpuIsLost
    # From then on every device query raises RuntimeError, an error outside NVML's own (a
    # broken binding or driver): the sampler process crashes, as no NVML error would make it.
    crash_at_s: float | None = None
    # When set, lost_at_s, crash_at_s and energy_resets_at_s count from the moment this file
    # first exists (checked on every call) instead of from the origin, and none happens before:
    # a test creates the file to inject the fault at a moment of its choosing (mid-window).
    events_after_file: str | None = None
    not_supported: list[str] = Field(
        default_factory=list, description="nvml function names that raise NotSupported"
    )
    not_supported_from_s: dict[str, float] = Field(
        default_factory=dict,
        description="nvml function name -> script time from which it raises NotSupported",
    )
    processes: list[FakeProcess] = Field(default_factory=list)
    process_sample_period_ms: float = Field(100.0, gt=0)


class FakeScript(_ScriptModel):
    """What the fake NVML will report, as a function of time."""

    start_ns: int | None = None  # origin on time.monotonic_ns; default: when the fake is built
    init_error: str | None = None  # an NVMLError class name nvmlInit raises
    devices: list[FakeDevice] = Field(default_factory=list)


def step_value(trace: Trace, t_s: float) -> float:
    """Value of a piecewise-constant trace at t_s."""
    if isinstance(trace, int | float):
        return float(trace)
    value = trace[0][1]
    for start_s, step in trace:
        if start_s > t_s:
            break
        value = step
    return float(value)


def step_integral(trace: Trace, t0_s: float, t1_s: float) -> float:
    """Exact integral of a piecewise-constant trace over [t0_s, t1_s] (value x seconds)."""
    if t1_s <= t0_s:
        return 0.0
    if isinstance(trace, int | float):
        return float(trace) * (t1_s - t0_s)
    edges = sorted({t0_s, t1_s, *(s for s, _ in trace if t0_s < s < t1_s)})
    return sum(step_value(trace, a) * (b - a) for a, b in itertools.pairwise(edges))


# -- returned structures, with pynvml's field names ---------------------------------------------


@dataclass
class _Utilization:
    gpu: int
    memory: int


@dataclass
class _Memory:
    total: int
    free: int
    used: int


@dataclass
class _ProcessInfo:
    pid: int
    usedGpuMemory: int | None
    gpuInstanceId: int
    computeInstanceId: int


@dataclass
class _ProcessUtilizationSample:
    pid: int
    timeStamp: int
    smUtil: int
    memUtil: int
    encUtil: int
    decUtil: int


class _Value(ctypes.Union):
    """pynvml's c_nvmlValue_t: one union, read through the member `valueType` names."""

    _fields_ = [
        ("dVal", ctypes.c_double),
        ("uiVal", ctypes.c_uint),
        ("ulVal", ctypes.c_ulong),
        ("ullVal", ctypes.c_ulonglong),
        ("sllVal", ctypes.c_longlong),
        ("siVal", ctypes.c_int),
        ("usVal", ctypes.c_ushort),
    ]


class _FieldValue(ctypes.Structure):
    """pynvml's c_nvmlFieldValue_t: each value carries its own return code."""

    _fields_ = [
        ("fieldId", ctypes.c_uint32),
        ("scopeId", ctypes.c_uint32),
        ("timestamp", ctypes.c_int64),  # wall clock, microseconds
        ("latencyUsec", ctypes.c_int64),
        ("valueType", ctypes.c_uint),
        ("nvmlReturn", ctypes.c_uint),
        ("value", _Value),
    ]


@dataclass(frozen=True)
class FakeHandle:
    index: int


# -- the fake module -------------------------------------------------------------------------------


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

    @classmethod
    def from_env(cls, clock_ns: Callable[[], int] = time.monotonic_ns) -> FakeNvml | None:
        """The fake named by `COLLOBENCH_FAKE_NVML`, or None when the variable is unset."""
        path = os.environ.get(ENV_VAR)
        return cls.from_file(path, clock_ns=clock_ns) if path else None

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
        values = (_FieldValue * len(fieldIds))()
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

    def nvmlDeviceGetUtilizationRates(self, handle: FakeHandle) -> _Utilization:
        device, t_s = self._device(handle, "nvmlDeviceGetUtilizationRates")
        return _Utilization(
            gpu=round(step_value(device.sm_util_pct, t_s)),
            memory=round(step_value(device.mem_util_pct, t_s)),
        )

    def nvmlDeviceGetMemoryInfo(self, handle: FakeHandle) -> _Memory:
        """Bytes, like NVML."""
        device, t_s = self._device(handle, "nvmlDeviceGetMemoryInfo")
        total = round(device.memory_total_mib * MIB)
        used = min(total, round(step_value(device.memory_used_mib, t_s) * MIB))
        return _Memory(total=total, free=total - used, used=used)

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

    def nvmlDeviceGetComputeRunningProcesses(self, handle: FakeHandle) -> list[_ProcessInfo]:
        device, t_s = self._device(handle, "nvmlDeviceGetComputeRunningProcesses")
        return [
            _ProcessInfo(
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
    ) -> list[_ProcessUtilizationSample]:
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
                        _ProcessUtilizationSample(process.pid, stamp_us, sm, memory, 0, 0)
                    )
        if not samples:
            raise NVMLError_NotFound()
        return samples


def _alive(process: FakeProcess, t_s: float) -> bool:
    return process.start_s <= t_s and (process.end_s is None or t_s < process.end_s)


# The fake module also carries pynvml's constants and error classes as attributes.
for _name, _value in list(globals().items()):
    if _name.startswith(("NVML_", "NVMLError")):
        setattr(FakeNvml, _name, _value)

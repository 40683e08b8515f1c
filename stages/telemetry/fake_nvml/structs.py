"""The structures the fake NVML returns, with pynvml's field names and ctypes layouts."""

from __future__ import annotations

import ctypes
from dataclasses import dataclass


@dataclass
class Utilization:
    """pynvml's c_nvmlUtilization_t: busy percentages."""

    gpu: int
    memory: int


@dataclass
class MemoryInfo:
    """pynvml's c_nvmlMemory_t: bytes."""

    total: int
    free: int
    used: int


@dataclass
class ProcessInfo:
    """pynvml's c_nvmlProcessInfo_t: one compute process; memory in bytes."""

    pid: int
    usedGpuMemory: int | None
    gpuInstanceId: int
    computeInstanceId: int


@dataclass
class ProcessUtilizationSample:
    """pynvml's c_nvmlProcessUtilizationSample_t: timestamp in wall-clock microseconds."""

    pid: int
    timeStamp: int
    smUtil: int
    memUtil: int
    encUtil: int
    decUtil: int


class Value(ctypes.Union):
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


class FieldValue(ctypes.Structure):
    """pynvml's c_nvmlFieldValue_t: each value carries its own return code."""

    _fields_ = [
        ("fieldId", ctypes.c_uint32),
        ("scopeId", ctypes.c_uint32),
        ("timestamp", ctypes.c_int64),  # wall clock, microseconds
        ("latencyUsec", ctypes.c_int64),
        ("valueType", ctypes.c_uint),
        ("nvmlReturn", ctypes.c_uint),
        ("value", Value),
    ]


@dataclass(frozen=True)
class FakeHandle:
    """A device handle, as `nvmlDeviceGetHandleByIndex` returns it."""

    index: int

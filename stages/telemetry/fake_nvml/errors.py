"""The fake NVML's errors: `NVMLError(code)` returns the subclass for that code, as in pynvml,
with the same class names and codes, so `NvmlBackend` maps them exactly as it maps pynvml's."""

from __future__ import annotations

from stages.contracts.errors import RunFailedError
from stages.telemetry.fake_nvml.constants import NVML_ERROR_UNKNOWN


class NVMLError(RunFailedError):
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

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

A test double: production reaches it only through `gpu_backend_factory.open_gpu_backend`,
which imports it lazily when `COLLOBENCH_FAKE_NVML` is set. Modules: `constants` and `errors`
(pynvml's), `structs` (returned structures), `script` (the script's models), `fake` (the fake).
"""

from stages.telemetry.fake_nvml.constants import *  # noqa: F403  (pynvml's flat namespace)
from stages.telemetry.fake_nvml.errors import *  # noqa: F403
from stages.telemetry.fake_nvml.errors import NVMLError as NVMLError
from stages.telemetry.fake_nvml.fake import FakeNvml as FakeNvml
from stages.telemetry.fake_nvml.script import FakeDevice as FakeDevice
from stages.telemetry.fake_nvml.script import FakeProcess as FakeProcess
from stages.telemetry.fake_nvml.script import FakeScript as FakeScript
from stages.telemetry.fake_nvml.script import Trace as Trace
from stages.telemetry.fake_nvml.script import step_integral as step_integral
from stages.telemetry.fake_nvml.script import step_value as step_value
from stages.telemetry.fake_nvml.structs import FakeHandle as FakeHandle
from stages.telemetry.fake_nvml.structs import FieldValue as FieldValue
from stages.telemetry.fake_nvml.structs import Value as Value

"""The fake NVML must behave like pynvml where the backend can tell: names, units, errors."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pynvml
import pytest

from stages.telemetry import fake_nvml, gpu_backend_factory, nvml_backend
from stages.telemetry.fake_nvml import FakeNvml
from stages.telemetry.gpu_backend import GpuLostError, GpuNotSupportedError, GpuUnavailableError
from stages.telemetry.gpu_backend_factory import FAKE_NVML_ENV_VAR
from stages.telemetry.nvml_backend import NvmlBackend

START_MJ = 1_000_000


class Clock:
    """A controllable monotonic clock in ns."""

    def __init__(self) -> None:
        self.now_ns = 0

    def __call__(self) -> int:
        return self.now_ns

    def at(self, t_s: float) -> None:
        self.now_ns = round(t_s * 1e9)


def make(devices: list[dict], **script: object) -> tuple[FakeNvml, Clock]:
    clock = Clock()
    fake = FakeNvml({"start_ns": 0, "devices": devices, **script}, clock_ns=clock)
    fake.nvmlInit()
    return fake, clock


def test_error_classes_match_pynvml_names_and_codes() -> None:
    codes = {name: value for name, value in vars(pynvml).items() if name.startswith("NVML_ERROR_")}
    assert len(codes) > 25
    for name, value in codes.items():
        assert getattr(fake_nvml, name) == value, name
        real_class = type(pynvml.NVMLError(value))
        fake_error = fake_nvml.NVMLError(value)
        assert type(fake_error).__name__ == real_class.__name__
        assert fake_error.value == value
        assert isinstance(fake_error, getattr(FakeNvml, real_class.__name__))
    assert fake_nvml.NVMLError_GpuIsLost().value == pynvml.NVML_ERROR_GPU_IS_LOST
    for name in ("NVML_CLOCK_SM", "NVML_TEMPERATURE_GPU", "NVML_SUCCESS"):
        assert getattr(FakeNvml, name) == getattr(pynvml, name)


def test_every_function_the_backend_calls_exists_in_pynvml_and_the_fake() -> None:
    source = Path(nvml_backend.__file__).read_text()
    called = set(re.findall(r'"(nvml[A-Z]\w+)"', source)) | set(
        re.findall(r"nvml\.(nvml[A-Z]\w+)", source)
    )
    assert {"nvmlInit", "nvmlDeviceGetTotalEnergyConsumption"} <= called
    for function in called:
        assert callable(getattr(pynvml, function)), function
        assert callable(getattr(FakeNvml, function)), function
    fake_functions = {name for name in vars(FakeNvml) if name.startswith("nvml")}
    assert fake_functions <= set(vars(pynvml)), "the fake must not invent NVML functions"


def test_units_and_energy_counter_granularity() -> None:
    fake, clock = make(
        [{"power_w": [[0, 150.0], [1.0, 250.0]], "energy_counter_start_mj": START_MJ}]
    )
    handle = fake.nvmlDeviceGetHandleByIndex(0)
    clock.at(0.5)
    assert fake.nvmlDeviceGetPowerUsage(handle) == 150_000  # milliwatts
    clock.at(1.23)
    assert fake.nvmlDeviceGetPowerUsage(handle) == 250_000
    first = fake.nvmlDeviceGetTotalEnergyConsumption(handle)
    clock.at(1.29)  # same 100 ms update window: the counter has not moved
    assert fake.nvmlDeviceGetTotalEnergyConsumption(handle) == first
    # Counter at the 1.2 s update: 150 J + 0.2 s x 250 W = 200 J, in mJ on top of the start.
    assert first == START_MJ + 200_000
    clock.at(1.30)
    assert fake.nvmlDeviceGetTotalEnergyConsumption(handle) == START_MJ + 225_000
    assert fake.scripted_energy_j(0, 0.0, 1.3) == pytest.approx(225.0)
    memory = fake.nvmlDeviceGetMemoryInfo(handle)
    assert memory.used == 512 * 1024 * 1024  # bytes
    assert memory.total == memory.used + memory.free


def test_counter_reset_lost_gpu_and_not_supported() -> None:
    fake, clock = make(
        [
            {"power_w": 100.0, "energy_resets_at_s": [2.0], "lost_at_s": 3.0},
            {"not_supported": ["nvmlDeviceGetTotalEnergyConsumption"]},
        ]
    )
    handle = fake.nvmlDeviceGetHandleByIndex(0)
    clock.at(1.95)
    before = fake.nvmlDeviceGetTotalEnergyConsumption(handle)
    clock.at(2.05)
    assert fake.nvmlDeviceGetTotalEnergyConsumption(handle) == 0  # restarted at 0
    clock.at(2.55)
    assert fake.nvmlDeviceGetTotalEnergyConsumption(handle) == 50_000
    assert before > 50_000
    clock.at(3.0)
    with pytest.raises(fake_nvml.NVMLError_GpuIsLost):
        fake.nvmlDeviceGetPowerUsage(handle)
    with pytest.raises(fake_nvml.NVMLError_NotSupported):
        fake.nvmlDeviceGetTotalEnergyConsumption(fake.nvmlDeviceGetHandleByIndex(1))
    fake.nvmlShutdown()
    with pytest.raises(fake_nvml.NVMLError_Uninitialized):
        fake.nvmlDeviceGetCount()


def test_processes_and_process_utilization() -> None:
    fake, clock = make(
        [
            {
                "processes": [
                    {"pid": 11, "used_memory_mib": 100, "sm_util_pct": [[0, 30], [0.5, 70]]},
                    {"pid": 12, "used_memory_mib": None, "end_s": 1.0},
                ]
            }
        ]
    )
    handle = fake.nvmlDeviceGetHandleByIndex(0)
    clock.at(0.25)
    processes = fake.nvmlDeviceGetComputeRunningProcesses(handle)
    assert [(p.pid, p.usedGpuMemory) for p in processes] == [(11, 100 * 1024 * 1024), (12, None)]
    samples = fake.nvmlDeviceGetProcessUtilization(handle, 0)
    assert [(s.pid, s.smUtil) for s in samples] == [(11, 30)]  # idle pid 12 has no sample
    with pytest.raises(fake_nvml.NVMLError_NotFound):  # nothing newer than what we saw
        fake.nvmlDeviceGetProcessUtilization(handle, samples[0].timeStamp)
    clock.at(0.65)
    later = fake.nvmlDeviceGetProcessUtilization(handle, samples[0].timeStamp)
    assert later[0].smUtil == 70
    assert later[0].timeStamp - samples[0].timeStamp == 400_000  # microseconds
    clock.at(1.5)
    assert [p.pid for p in fake.nvmlDeviceGetComputeRunningProcesses(handle)] == [11]


def test_backend_maps_errors_to_typed_exceptions() -> None:
    clock = Clock()
    script = {
        "start_ns": 0,
        "devices": [
            {"lost_at_s": 1.0, "not_supported": ["nvmlDeviceGetTotalEnergyConsumption"]},
            {"not_supported": ["nvmlDeviceGetTemperature"]},
        ],
    }
    backend = NvmlBackend(FakeNvml(script, clock_ns=clock))
    assert backend.device_count() == 2
    with pytest.raises(GpuNotSupportedError):  # the sampler then integrates power
        backend.total_energy_mj(0)
    with pytest.raises(GpuNotSupportedError):
        backend.temperature_c(1)
    assert backend.power_w(0) == pytest.approx(100.0)
    assert backend.process_utilization(0, 0) == []  # NVML's NotFound means "no samples"
    clock.at(1.0)
    with pytest.raises(GpuLostError):
        backend.power_w(0)
    backend.shutdown()
    for init_error in ("NVMLError_DriverNotLoaded", "NVMLError_LibraryNotFound"):
        with pytest.raises(GpuUnavailableError):
            NvmlBackend(FakeNvml({"init_error": init_error}))


@pytest.mark.parametrize("suffix", [".json", ".yaml"])
def test_loads_from_env_var(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, suffix: str) -> None:
    script = {"devices": [{"name": "Fake H100", "uuid": "GPU-abc", "power_w": 321.5}]}
    path = tmp_path / f"fake{suffix}"
    path.write_text(json.dumps(script))  # JSON is valid YAML too
    monkeypatch.setenv(FAKE_NVML_ENV_VAR, str(path))
    backend = gpu_backend_factory.open_gpu_backend()
    assert backend is not None
    assert backend.name(0) == "Fake H100"
    assert backend.uuid(0) == "GPU-abc"
    assert backend.power_w(0) == pytest.approx(321.5)
    backend.shutdown()


def test_open_gpu_backend_without_driver_or_devices_is_none(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "fake.json"
    path.write_text(json.dumps({"init_error": "NVMLError_DriverNotLoaded"}))
    monkeypatch.setenv(FAKE_NVML_ENV_VAR, str(path))
    assert gpu_backend_factory.open_gpu_backend() is None
    path.write_text(json.dumps({"devices": []}))
    assert gpu_backend_factory.open_gpu_backend() is None
    path.write_text(json.dumps({"devices": [{"powr_w": 1}]}))  # typo: loud, not silent
    with pytest.raises(ValueError, match="powr_w"):
        gpu_backend_factory.open_gpu_backend()


def test_real_nvml_missing_is_none(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(FAKE_NVML_ENV_VAR, raising=False)
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        assert gpu_backend_factory.open_gpu_backend() is None
    else:  # a machine with a driver
        pynvml.nvmlShutdown()
        pytest.skip("NVML is present here")


def test_field_values_like_pynvml() -> None:
    # Same structures (field names and C types) and constants as pynvml's.
    assert fake_nvml.FieldValue._fields_[:-1] == pynvml.c_nvmlFieldValue_t._fields_[:-1]
    assert fake_nvml.FieldValue._fields_[-1] == ("value", fake_nvml.Value)
    assert pynvml.c_nvmlFieldValue_t._fields_[-1] == ("value", pynvml.c_nvmlValue_t)
    assert fake_nvml.Value._fields_ == pynvml.c_nvmlValue_t._fields_
    for name in vars(fake_nvml):
        if name.startswith(("NVML_FI_", "NVML_VALUE_TYPE_")):
            assert getattr(FakeNvml, name) == getattr(pynvml, name), name
    fake, clock = make(
        [
            {"power_w": [[0, 100.0], [1.0, 300.0]], "power_average_s": 1.0},
            {"unsupported_fields": [186]},
        ]
    )
    handle = fake.nvmlDeviceGetHandleByIndex(0)
    clock.at(1.25)
    instant, average, unknown = fake.nvmlDeviceGetFieldValues(
        handle, [pynvml.NVML_FI_DEV_POWER_INSTANT, pynvml.NVML_FI_DEV_POWER_AVERAGE, 4242]
    )
    assert (instant.nvmlReturn, instant.valueType) == (0, pynvml.NVML_VALUE_TYPE_UNSIGNED_INT)
    assert instant.value.uiVal == 300_000  # milliwatts, read through the typed member
    assert average.value.uiVal == 150_000  # (0.75 s x 100 W + 0.25 s x 300 W) / 1 s
    assert fake.nvmlDeviceGetPowerUsage(handle) == 150_000  # the same 1 s average
    assert unknown.nvmlReturn == pynvml.NVML_ERROR_INVALID_ARGUMENT
    (unsupported,) = fake.nvmlDeviceGetFieldValues(fake.nvmlDeviceGetHandleByIndex(1), [186])
    assert unsupported.nvmlReturn == pynvml.NVML_ERROR_NOT_SUPPORTED
    clock.at(2.5)
    assert instant.timestamp < fake.nvmlDeviceGetFieldValues(handle, [186])[0].timestamp


def test_not_supported_from_a_time_on() -> None:
    fake, clock = make([{"not_supported_from_s": {"nvmlDeviceGetTotalEnergyConsumption": 1.5}}])
    handle = fake.nvmlDeviceGetHandleByIndex(0)
    clock.at(1.49)
    assert fake.nvmlDeviceGetTotalEnergyConsumption(handle) > 0
    clock.at(1.5)
    with pytest.raises(fake_nvml.NVMLError_NotSupported):
        fake.nvmlDeviceGetTotalEnergyConsumption(handle)
    assert fake.nvmlDeviceGetPowerUsage(handle) == 100_000  # other functions still answer

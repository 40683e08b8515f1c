"""The NVML checks of `make gpu-check`: devices, power, memory, the energy counter against the
power integral, per-process utilisation; each on a GpuBackend (real NVML there, the fake NVML in
tests/gpu/test_gpu_check.py)."""

from __future__ import annotations

import statistics
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from typing import Any

from stages.telemetry.gpu_backend import GpuBackend, GpuError, GpuNotSupportedError
from tests.gpu.check import FAIL, OK, SKIP, Check

# Energy counter vs the integral of power sampled every POWER_PERIOD_S over the same window.
# The counter moves about every 100 ms (so ±0.1 s of power at each end of a ~4 s window) and an
# averaged power field lags the load (the idle padding around the load lets its area catch up).
ENERGY_TOLERANCE = {"instant": 0.10, "average": 0.20}
POWER_PERIOD_S = 0.02
LOAD_S = 2.0
PAD_S = 1.2  # idle before and after the load, longer than the ~1 s averaging of 'average'


def check_devices(backend: GpuBackend) -> Check:
    count = backend.device_count()
    devices = [{"index": i, "name": backend.name(i), "uuid": backend.uuid(i)} for i in range(count)]
    if not count:
        return Check("nvml.devices", FAIL, "NVML started but reports no device")
    names = ", ".join(f"{d['index']}: {d['name']} ({d['uuid']})" for d in devices)
    return Check("nvml.devices", OK, f"{count} device(s): {names}", {"devices": devices})


def check_power(backend: GpuBackend, index: int = 0) -> Check:
    power_w = backend.power_w(index)
    field_name = backend.power_field(index)
    figures = {"power_w": round(power_w, 1), "power_field": field_name}
    if not 0 < power_w < 2000:
        return Check("nvml.power", FAIL, f"implausible power {power_w:.1f} W", figures)
    return Check("nvml.power", OK, f"{power_w:.1f} W idle, field '{field_name}'", figures)


def check_memory(backend: GpuBackend, allocate_mib: Callable[[int], Any], index: int = 0) -> Check:
    """Memory used rises by an allocation of 1 GiB (held while it is read)."""
    before_mib = backend.memory_used_mib(index)
    held = allocate_mib(1024)
    time.sleep(0.2)
    after_mib = backend.memory_used_mib(index)
    del held
    delta_mib = after_mib - before_mib
    figures = {"used_before_mib": round(before_mib), "used_after_mib": round(after_mib)}
    status = OK if 0.9 * 1024 <= delta_mib <= 1.5 * 1024 else FAIL
    return Check(
        "nvml.memory",
        status,
        f"{before_mib:.0f} -> {after_mib:.0f} MiB with 1 GiB allocated",
        figures,
    )


@dataclass
class EnergyTrace:
    """Power samples and counter readings over one window (monotonic seconds)."""

    times_s: list[float] = field(default_factory=list)
    power_w: list[float] = field(default_factory=list)
    counter_mj: list[tuple[float, int]] = field(default_factory=list)
    utilization_pids: set[int] = field(default_factory=set)  # per-process utilisation samples
    compute_pids: set[int] = field(default_factory=set)  # processes with a compute context
    process_error: str | None = None  # per-process utilisation unsupported (or failed)


@contextmanager
def sampled(backend: GpuBackend, index: int, trace: EnergyTrace) -> Iterator[None]:
    """Sample power every POWER_PERIOD_S in a thread; the counter at both ends."""
    stop = threading.Event()
    since_us = int(time.time() * 1e6)

    def loop() -> None:
        while not stop.is_set():
            trace.times_s.append(time.monotonic())
            trace.power_w.append(backend.power_w(index))
            stop.wait(POWER_PERIOD_S)

    trace.counter_mj.append((time.monotonic(), backend.total_energy_mj(index)))
    thread = threading.Thread(target=loop, name="power", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()
        trace.times_s.append(time.monotonic())
        trace.power_w.append(backend.power_w(index))
        trace.counter_mj.append((time.monotonic(), backend.total_energy_mj(index)))
        try:
            samples = backend.process_utilization(index, since_us)
            trace.utilization_pids = {sample.pid for sample in samples}
        except GpuError as error:
            trace.process_error = f"{type(error).__name__}: {error}"
        with suppress(GpuError):
            trace.compute_pids = {process.pid for process in backend.compute_processes(index)}


def integral_j(times_s: list[float], power_w: list[float]) -> float:
    """Trapezoid integral of power over time."""
    return sum(
        (t1 - t0) * (p0 + p1) / 2
        for t0, t1, p0, p1 in zip(times_s, times_s[1:], power_w, power_w[1:], strict=False)
    )


def check_energy(
    backend: GpuBackend,
    load: Callable[[float], None],
    index: int = 0,
    pad_s: float = PAD_S,
    load_s: float = LOAD_S,
) -> tuple[Check, EnergyTrace]:
    """The counter moves under load and agrees with the power integral."""
    trace = EnergyTrace()
    try:
        with sampled(backend, index, trace):
            time.sleep(pad_s)
            load_started = time.monotonic()
            load(load_s)
            load_ended = time.monotonic()
            time.sleep(pad_s)
    except GpuNotSupportedError as error:
        return Check(
            "nvml.energy_counter", SKIP, f"no energy counter on this device: {error}"
        ), trace
    (t0, e0), (t1, e1) = trace.counter_mj[0], trace.counter_mj[-1]
    counter_j = (e1 - e0) / 1000
    power_j = integral_j(trace.times_s, trace.power_w)
    loaded = [
        p
        for t, p in zip(trace.times_s, trace.power_w, strict=True)
        if load_started <= t <= load_ended
    ]
    idle = [p for t, p in zip(trace.times_s, trace.power_w, strict=True) if t < load_started]
    field_name = backend.power_field(index) or "average"
    tolerance = ENERGY_TOLERANCE.get(field_name, ENERGY_TOLERANCE["average"])
    difference = (counter_j - power_j) / power_j if power_j else float("inf")
    figures = {
        "window_s": round(t1 - t0, 2),
        "counter_j": round(counter_j, 1),
        "power_integral_j": round(power_j, 1),
        "difference": round(difference, 4),
        "tolerance": tolerance,
        "power_field": field_name,
        "idle_w": round(statistics.median(idle), 1) if idle else None,
        "load_w": round(statistics.median(loaded), 1) if loaded else None,
        "power_samples": len(trace.power_w),
    }
    detail = (
        f"counter {counter_j:.1f} J vs power integral {power_j:.1f} J over "
        f"{t1 - t0:.1f} s ({difference:+.1%}, tolerance ±{tolerance:.0%}); "
        f"{figures['idle_w']} W idle, {figures['load_w']} W under load"
    )
    moved = (
        counter_j > 0
        and bool(loaded)
        and bool(idle)
        and statistics.median(loaded) > statistics.median(idle)
    )
    status = OK if moved and abs(difference) <= tolerance else FAIL
    if not moved:
        detail = "counter or power did not rise under load: " + detail
    return Check("nvml.energy_counter", status, detail, figures), trace


def check_process_utilization(trace: EnergyTrace, pid: int) -> Check:
    """Per-process utilisation (sampled during the energy check's load) names our pid."""
    figures = {
        "our_pid": pid,
        "utilization_pids": sorted(trace.utilization_pids),
        "compute_pids": sorted(trace.compute_pids),
    }
    in_compute = f"compute processes {sorted(trace.compute_pids)}"
    if trace.process_error is not None:
        return Check(
            "nvml.process_utilization",
            SKIP,
            f"unsupported here: {trace.process_error}; {in_compute}",
            figures,
        )
    if pid in trace.utilization_pids:
        return Check(
            "nvml.process_utilization", OK, f"our pid {pid} sampled; {in_compute}", figures
        )
    return Check(
        "nvml.process_utilization",
        FAIL,
        f"our pid {pid} not among the sampled {sorted(trace.utilization_pids)} ({in_compute}; "
        "a PID namespace hides it?): gpu_process_samples cannot be matched to pipelines",
        figures,
    )


# ----------------------------------------------------------------------------- CUDA checks

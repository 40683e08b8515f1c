"""What the fake NVML reports, as a function of time: the script's models and trace maths.

A script (dict, or a JSON/YAML file) describes each device over time with piecewise-constant
traces; `step_value`/`step_integral` evaluate them (the energy counter integrates power).
"""

from __future__ import annotations

import itertools

from pydantic import BaseModel, ConfigDict, Field

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

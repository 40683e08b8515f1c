"""Cost of telemetry: host sampling at 100 Hz (CPU % of one core) and NVML us per sample.

Prints ONE JSON line. The host figure is the spawned sampler process's own CPU time over a
steady-state window (interpreter start-up and imports excluded), with two sampled processes
and the harness rows (this script as the launcher; its sampler and resource tracker count).
The NVML figure is `GpuSampler.sample()` against the fake NVML (Python overhead only; real
NVML calls add the driver's own cost).
"""

from __future__ import annotations

import json
import multiprocessing
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

from stages.rundir.tables import ChunkWriter, read_table
from stages.telemetry.fake_nvml import FakeNvml
from stages.telemetry.gpu_sampler import GpuSampler
from stages.telemetry.nvml_backend import NvmlBackend
from stages.telemetry.sampler_process import SamplerSettings, host_sampler_main

HOST_PERIOD_MS = 10.0  # 100 Hz
WINDOW_S = 5.0
WARMUP_S = 1.5
GPU_SAMPLES = 5000
WORKLOAD = "import time\nwhile True:\n    sum(range(20000)); time.sleep(0.01)"


def cpu_s(process: psutil.Process) -> float:
    times = process.cpu_times()
    return times.user + times.system


def host_cost(run_dir: Path) -> dict[str, float | int]:
    workloads = [subprocess.Popen([sys.executable, "-c", WORKLOAD]) for _ in range(2)]
    context = multiprocessing.get_context("spawn")
    stop = context.Event()
    settings = SamplerSettings(
        str(run_dir),
        "perf",
        0,
        "collocated",
        HOST_PERIOD_MS,
        {f"p{i}": w.pid for i, w in enumerate(workloads)},
        harness_pid=os.getpid(),
    )
    sampler = context.Process(target=host_sampler_main, args=(settings, stop))
    try:
        sampler.start()
        time.sleep(WARMUP_S)  # spawn + imports, not part of the steady-state cost
        process = psutil.Process(sampler.pid)
        cpu0, wall0 = cpu_s(process), time.monotonic_ns()
        time.sleep(WINDOW_S)
        cpu1, wall1 = cpu_s(process), time.monotonic_ns()
        stop.set()
        sampler.join(30)
    finally:
        for workload in workloads:
            workload.kill()
            workload.wait()
    rows = read_table(run_dir, "host_samples").to_pydict()
    in_window = [
        ts
        for ts, scope in zip(rows["ts_ns"], rows["scope"], strict=True)
        if scope == "host" and wall0 <= ts < wall1
    ]
    window_s = (wall1 - wall0) / 1e9
    return {
        "host_cpu_pct_of_core": round((cpu1 - cpu0) / window_s * 100, 2),
        "host_samples_per_s": round(len(in_window) / window_s, 1),
        "host_process_rows": sum(scope == "process" for scope in rows["scope"]),
        "host_harness_rows": sum(scope == "harness" for scope in rows["scope"]),
    }


def nvml_cost(run_dir: Path) -> float:
    script = {
        "devices": [
            {
                "power_w": [[0, 200.0], [1.0, 300.0]],
                "processes": [{"pid": 11, "sm_util_pct": 40}, {"pid": 12, "sm_util_pct": 20}],
            }
        ]
    }
    backend = NvmlBackend(FakeNvml(script))
    keys = {"run_id": "perf", "trial": 0, "phase": "collocated"}
    sampler = GpuSampler(
        backend,
        0,
        ChunkWriter(run_dir, "gpu_samples", "gpu0", keys),
        ChunkWriter(run_dir, "gpu_process_samples", "gpu0", keys),
    )
    started = time.perf_counter()
    for _ in range(GPU_SAMPLES):
        sampler.sample()
    sampler.close()
    return (time.perf_counter() - started) / GPU_SAMPLES * 1e6


def main() -> None:
    with tempfile.TemporaryDirectory() as directory:
        host = host_cost(Path(directory) / "host")
        us_per_sample = nvml_cost(Path(directory) / "gpu")
    print(
        json.dumps(
            {
                "benchmark": "sampler_cost",
                "host_period_ms": HOST_PERIOD_MS,
                "host_window_s": WINDOW_S,
                "host_sampled_processes": 2,
                **host,
                "host_target_pct_of_core": 2.0,
                "nvml_fake_us_per_sample": round(us_per_sample, 1),
            }
        )
    )


if __name__ == "__main__":
    main()

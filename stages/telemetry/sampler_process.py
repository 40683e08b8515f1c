"""Process entry points for the samplers, spawned by the launcher (multiprocessing 'spawn').

One host sampler per run phase and one GPU sampler per physical device (never one per
pipeline: duplicated series double-count). Each waits on `stop_event.wait(timeout)` between
samples (never busy-spins; these own their process, so Event.wait's timer slack is fine),
takes one last sample when stopped so the energy covers the whole window, flushes and returns.

The GPU sampler gets its backend from `gpu_backend_factory.open_gpu_backend` (real NVML, or
the scripted fake when env var `COLLOBENCH_FAKE_NVML` is set, also in a child process).
"""

from __future__ import annotations

import logging
import os
import secrets
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import psutil

from stages.rundir.tables import ChunkWriter
from stages.telemetry.gpu_backend import GpuBackend, GpuError
from stages.telemetry.gpu_backend_factory import (
    open_gpu_backend as open_gpu_backend,  # re-exported: the launcher imports it from here
)
from stages.telemetry.gpu_sampler import GpuSampler, GpuSamplerResult
from stages.telemetry.host_sampler import HostSampler, HostSamplerResult

log = logging.getLogger(__name__)


@dataclass
class SamplerSettings:
    """Everything a sampler process needs; picklable, so it crosses the spawn boundary."""

    run_dir: str
    run_id: str
    trial: int
    phase: str  # solo | collocated | collocated:a+b (a subset) | idle
    period_ms: float
    pipeline_pids: dict[str, int] = field(default_factory=dict)
    cpu_watts_per_core: float | None = None
    harness_pid: int | None = None  # the launcher: its non-worker descendants' CPU (host only)
    service_pids: dict[str, int] = field(default_factory=dict)
    """The spec's running servers: service name -> the server's pid (its descendants are
    found by the samplers): host rows of scope `service`, GPU process rows named after it."""


class StopEvent(Protocol):
    """What the samplers need of `multiprocessing.Event` (or `threading.Event`)."""

    def wait(self, timeout: float | None = None) -> bool: ...

    def is_set(self) -> bool: ...


def run_periodic(
    tick: Callable[[], bool],
    stop_event: StopEvent,
    period_ms: float,
    clock_ns: Callable[[], int] = time.monotonic_ns,
    on_first_tick: Callable[[], object] | None = None,
) -> int:
    """Call `tick` on a fixed-rate schedule until `stop_event` is set (then once more) or
    `tick` returns False; returns the number of ticks. Missed deadlines are skipped, not
    caught up in a burst. `on_first_tick` runs once, right after the first tick."""
    period_ns = max(int(period_ms * 1e6), 1)
    ticks = 0
    deadline_ns = clock_ns()
    while True:
        running = tick()
        if ticks == 0 and on_first_tick is not None:
            on_first_tick()
        if not running:
            return ticks
        ticks += 1
        deadline_ns += period_ns
        now_ns = clock_ns()
        if now_ns > deadline_ns:  # overran: realign to the grid after now
            deadline_ns += -(-(now_ns - deadline_ns) // period_ns) * period_ns
        if stop_event.wait((deadline_ns - now_ns) / 1e9):
            tick()  # the end of the window: energy and utilisation up to the stop
            return ticks + 1


def _label(kind: str, settings: SamplerSettings) -> str:
    """Unique chunk-file label: solo baselines reuse (trial, phase) in several processes."""
    return f"{kind}-{settings.phase}-t{settings.trial}-{os.getpid()}-{secrets.token_hex(3)}"


def _keys(settings: SamplerSettings) -> dict[str, Any]:
    return {"run_id": settings.run_id, "trial": settings.trial, "phase": settings.phase}


class PipelineOfPid:
    """Maps a pid to the pipeline whose process (or descendant) it is; None if foreign."""

    def __init__(self, pipeline_pids: dict[str, int]) -> None:
        self._by_pid = {pid: name for name, pid in pipeline_pids.items()}
        self._cache: dict[int, str | None] = {}

    def __call__(self, pid: int) -> str | None:
        if pid not in self._cache:
            name = self._by_pid.get(pid)
            if name is None:
                try:
                    for parent in psutil.Process(pid).parents():
                        if parent.pid in self._by_pid:
                            name = self._by_pid[parent.pid]
                            break
                except psutil.Error:
                    pass  # not visible from here (another container) or gone
            self._cache[pid] = name
        return self._cache[pid]


def foreign_compute_processes(
    backend: GpuBackend, gpu_indices: Iterable[int], own_pids: Iterable[int]
) -> list[dict[str, Any]]:
    """Compute processes on these GPUs that are neither ours nor our descendants, for a
    manifest warning (another job on the GPU skews every figure of the run)."""
    ours = PipelineOfPid({str(pid): pid for pid in own_pids})
    foreign: list[dict[str, Any]] = []
    for index in gpu_indices:
        try:
            processes = backend.compute_processes(index)
        except GpuError as error:
            log.warning("GPU %d: cannot list compute processes: %s", index, error)
            continue
        for process in processes:
            if ours(process.pid) is not None:
                continue
            try:
                name: str | None = psutil.Process(process.pid).name()
            except psutil.Error:
                name = None
            foreign.append(
                {
                    "gpu": index,
                    "pid": process.pid,
                    "name": name,
                    "used_memory_mib": process.used_memory_mib,
                }
            )
    return foreign


def host_sampler_main(
    settings: SamplerSettings,
    stop_event: StopEvent,
    on_first_sample: Callable[[], object] | None = None,
) -> HostSamplerResult:
    """Sample host, pipeline, service and harness processes every `period_ms` until stopped;
    `on_first_sample` runs right after the first sample (the start barrier waits for it)."""
    writer = ChunkWriter(
        Path(settings.run_dir), "host_samples", _label("host", settings), _keys(settings)
    )
    writer.warm_up()  # Parquet's one-time set-up now, not during the measured window
    sampler = HostSampler(
        writer,
        settings.pipeline_pids,
        cpu_watts_per_core=settings.cpu_watts_per_core,
        harness_pid=settings.harness_pid,
        service_pids=settings.service_pids,
    )
    try:
        run_periodic(sampler.sample, stop_event, settings.period_ms, on_first_tick=on_first_sample)
    finally:
        result = sampler.close()
    return result


def gpu_sampler_main(
    settings: SamplerSettings,
    gpu_index: int,
    stop_event: StopEvent,
    on_first_sample: Callable[[], object] | None = None,
) -> GpuSamplerResult | None:
    """Sample one GPU every `period_ms` until stopped or the GPU is lost; None without NVML.
    A lost GPU is logged and returned in the result; rows already taken are kept.
    `on_first_sample` runs right after the first sample (not at all without NVML)."""
    backend = open_gpu_backend()
    if backend is None:
        log.warning("GPU %d not sampled: no NVML device", gpu_index)
        return None
    try:
        try:
            count = backend.device_count()
        except GpuError as error:
            log.warning("GPU %d not sampled: %s", gpu_index, error)
            return None
        if not 0 <= gpu_index < count:
            log.warning("GPU %d not sampled: NVML sees %d devices", gpu_index, count)
            return None
        label = _label(f"gpu{gpu_index}", settings)
        root = Path(settings.run_dir)
        writers = [
            ChunkWriter(root, table, label, _keys(settings))
            for table in ("gpu_samples", "gpu_process_samples")
        ]
        for writer in writers:
            writer.warm_up()  # Parquet's one-time set-up now, not during the measured window
        sampler = GpuSampler(
            backend,
            gpu_index,
            writers[0],
            writers[1],
            # Service and pipeline names never collide (spec check): a GPU process row's
            # `pipeline` names either.
            pid_to_pipeline=PipelineOfPid({**settings.pipeline_pids, **settings.service_pids}),
        )
        try:
            run_periodic(
                sampler.sample, stop_event, settings.period_ms, on_first_tick=on_first_sample
            )
        finally:
            result = sampler.close()
    finally:
        backend.shutdown()
    if result.error:
        log.error("GPU sampler stopped early: %s", result.error)
    return result

"""Starts and stops the sampler processes of one phase: one per device, never one per pipeline.

Each sampler runs in its own `spawn`ed process and hands a summary back when stopped, so a GPU
lost mid-run or an energy-counter reset ends up as a warning in the run's manifest.
"""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Callable
from dataclasses import asdict, is_dataclass
from multiprocessing.context import SpawnContext, SpawnProcess
from pathlib import Path
from typing import Any

from stages.lifetime import die_with_parent
from stages.spec import TelemetrySpec
from stages.telemetry.sampler_process import SamplerSettings, gpu_sampler_main, host_sampler_main

STOP_GRACE_S = 5.0


class SamplerGroup:
    """The host sampler and one sampler per GPU, for one phase of one trial."""

    def __init__(
        self,
        context: SpawnContext,
        run_dir: Path,
        run_id: str,
        telemetry: TelemetrySpec,
        gpu_count: int | None,
    ) -> None:
        self._context = context
        self._run_dir = str(run_dir)
        self._run_id = run_id
        self._telemetry = telemetry
        self._gpu_count = gpu_count or 0
        self._running: list[tuple[SpawnProcess, Any, Any]] = []

    def start(self, trial: int, phase: str, pipeline_pids: dict[str, int]) -> None:
        telemetry = self._telemetry
        if telemetry.host.enabled:
            power_model = telemetry.power_model
            settings = SamplerSettings(
                self._run_dir,
                self._run_id,
                trial,
                phase,
                telemetry.host.period_ms,
                pipeline_pids,
                power_model.cpu_watts_per_core if power_model else None,
            )
            self._spawn(host_sampler_main, (settings,), "collobench:host-sampler")
        if telemetry.gpu.enabled:
            settings = SamplerSettings(
                self._run_dir, self._run_id, trial, phase, telemetry.gpu.period_ms, pipeline_pids
            )
            for index in range(self._gpu_count):
                self._spawn(gpu_sampler_main, (settings, index), f"collobench:gpu{index}-sampler")

    def _spawn(self, target: Callable[..., object], args: tuple[Any, ...], name: str) -> None:
        stop_event = self._context.Event()
        results = self._context.SimpleQueue()
        process = self._context.Process(
            target=_sampler_entry, args=(target, (*args, stop_event), results), name=name
        )
        process.start()
        self._running.append((process, stop_event, results))

    def stop(self) -> list[str]:
        """Stop every sampler (each takes a last sample and flushes); returns warnings."""
        warnings: list[str] = []
        for _process, stop_event, _results in self._running:
            stop_event.set()
        for process, _stop_event, results in self._running:
            process.join(timeout=STOP_GRACE_S)
            if process.is_alive():
                process.kill()
                process.join(timeout=STOP_GRACE_S)
            if process.exitcode not in (0, None):
                warnings.append(f"{process.name} exited with code {process.exitcode}")
            summary = results.get() if not results.empty() else {}
            if summary.get("error"):
                warnings.append(
                    f"{process.name}: {summary['error']} (samples taken before it are kept)"
                )
            if summary.get("counter_resets"):
                warnings.append(
                    f"{process.name}: energy counter reset {summary['counter_resets']} time(s); "
                    "repaired by continuing from the last reading"
                )
        self._running = []
        return warnings


class _StopOnSignal:
    """The launcher's stop event, or SIGTERM (sent by the kernel when the launcher dies).

    The signal handler only sets a flag: taking the event's lock inside a handler deadlocks
    when the signal lands while the lock is held. The sampler's periodic wait notices the flag
    within one period, then takes its last sample and flushes as on an ordinary stop.
    """

    def __init__(self, event: Any) -> None:
        self._event = event
        self.signalled = False

    def on_signal(self, signum: int, frame: object) -> None:
        self.signalled = True

    def is_set(self) -> bool:
        return self.signalled or bool(self._event.is_set())

    def wait(self, timeout: float | None = None) -> bool:
        return self.signalled or bool(self._event.wait(timeout)) or self.signalled


def _sampler_entry(target: Callable[..., object], args: tuple[Any, ...], results: Any) -> None:
    """Sampler process entry: run the sampler, then hand its summary back to the launcher."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the launcher stops samplers itself
    stop = _StopOnSignal(args[-1])
    signal.signal(signal.SIGTERM, stop.on_signal)
    die_with_parent()
    summary = target(*args[:-1], stop)
    record: dict[str, Any] = {}
    if is_dataclass(summary) and not isinstance(summary, type):
        record = asdict(summary)
    with contextlib.suppress(OSError):  # the launcher may be gone
        results.put(record)

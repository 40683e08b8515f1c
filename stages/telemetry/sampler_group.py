"""Starts and stops the sampler processes of one phase: one per device, never one per pipeline.

Each sampler runs in its own `spawn`ed process and hands a summary back when stopped, so a GPU
lost mid-run or an energy-counter reset ends up as a warning in the run's manifest. Each also
sets an event after its first sample: `wait_first_samples` is the sampler side of the start
barrier (a measured window must not open before its telemetry is running).
"""

from __future__ import annotations

import contextlib
import multiprocessing
import secrets
import signal
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, is_dataclass
from multiprocessing.context import SpawnContext, SpawnProcess
from pathlib import Path
from typing import TYPE_CHECKING, Any

from stages.process_lifetime import die_with_parent
from stages.rundir.arrow_pandas import skip_pandas_check
from stages.runtime.os_threads import name_os_thread
from stages.telemetry.sampler_process import SamplerSettings, gpu_sampler_main, host_sampler_main
from stages.telemetry.server_metrics import MetricsTarget, server_metrics_main

if TYPE_CHECKING:  # a sampler process imports this module: not the spec's models
    from stages.spec.models import TelemetrySpec

STOP_GRACE_S = 5.0


@dataclass
class _Sampler:
    """One sampler process and what the launcher shares with it."""

    process: SpawnProcess
    stop_event: Any  # multiprocessing Event: set by the launcher to stop it
    first_sample: Any  # multiprocessing Event: set by the sampler after its first sample
    results: Any  # SimpleQueue: the sampler's summary (a dict), put once when it ends
    summary: dict[str, Any] | None = None  # taken from `results` when it arrived early

    def take_summary(self) -> dict[str, Any]:
        if self.summary is None and not self.results.empty():
            self.summary = self.results.get()
        return self.summary or {}


class SamplerGroup:
    """The host sampler, one sampler per GPU and one scraper per service metrics endpoint, for
    one phase of one trial."""

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
        self._running: list[_Sampler] = []

    def start(
        self,
        trial: int,
        phase: str,
        pipeline_pids: dict[str, int],
        harness_pid: int | None = None,
        service_pids: dict[str, int] | None = None,
        metric_targets: Sequence[MetricsTarget] = (),
    ) -> None:
        """Spawn the samplers; `harness_pid` (the launcher) adds the harness CPU rows,
        `service_pids` (service name -> server pid) the services' rows, `metric_targets` one
        scraper per service endpoint (`server_samples`)."""
        self._start_scrapers(trial, phase, metric_targets)
        telemetry = self._telemetry
        services = dict(service_pids or {})
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
                harness_pid,
                services,
            )
            self._spawn(host_sampler_main, (settings,), "collobench:host-sampler")
        if telemetry.gpu.enabled:
            settings = SamplerSettings(
                self._run_dir,
                self._run_id,
                trial,
                phase,
                telemetry.gpu.period_ms,
                pipeline_pids,
                service_pids=services,
            )
            for index in range(self._gpu_count):
                self._spawn(gpu_sampler_main, (settings, index), f"collobench:gpu{index}-sampler")

    def _start_scrapers(self, trial: int, phase: str, targets: Sequence[MetricsTarget]) -> None:
        keys = {"run_id": self._run_id, "trial": trial, "phase": phase}
        for target in targets:
            label = f"metrics-{target.service}-{phase}-t{trial}-{secrets.token_hex(3)}"
            args = (self._run_dir, keys, label, target)
            self._spawn(server_metrics_main, args, f"collobench:metrics-{target.service}")

    def _spawn(self, target: Callable[..., object], args: tuple[Any, ...], name: str) -> None:
        stop_event = self._context.Event()
        first_sample = self._context.Event()
        results = self._context.SimpleQueue()
        process = self._context.Process(
            target=_sampler_entry,
            args=(target, (*args, stop_event), results, first_sample),
            name=name,
        )
        process.start()
        self._running.append(_Sampler(process, stop_event, first_sample, results))

    def wait_first_samples(self, timeout_s: float) -> list[str]:
        """Block until every sampler started has taken its first sample or ended (a GPU
        sampler without NVML ends at once), so a window opened afterwards is covered from
        its start. Returns a warning per sampler that ended early or did not report within
        `timeout_s` (the wait then goes on no longer)."""
        deadline_s = time.monotonic() + timeout_s
        warnings: list[str] = []
        for sampler in self._running:
            name = sampler.process.name
            if not sampler.first_sample.wait(max(deadline_s - time.monotonic(), 0.0)):
                warnings.append(f"{name}: no first sample within {timeout_s:g} s")
                continue
            # The summary is put before the event is set on the way out: if it is there, the
            # sampler has already ended (nothing to wait for, but its series is missing).
            if not sampler.results.empty():
                summary = sampler.take_summary()
                reason = summary.get("error") or (
                    f"after {summary['samples']} samples"
                    if summary.get("samples")
                    else "without sampling (no device to sample?)"
                )
                warnings.append(f"{name} ended before the measured window: {reason}")
        return warnings

    def stop(self) -> list[str]:
        """Stop every sampler (each takes a last sample and flushes); returns warnings."""
        warnings: list[str] = []
        setters = [self._signal_stop(sampler) for sampler in self._running]
        for setter in setters:
            if setter is not None:
                setter.join(timeout=STOP_GRACE_S)
        for sampler in self._running:
            process = sampler.process
            process.join(timeout=STOP_GRACE_S)
            if process.is_alive():
                process.kill()
                process.join(timeout=STOP_GRACE_S)
            if process.exitcode not in (0, None):
                warnings.append(f"{process.name} exited with code {process.exitcode}")
            summary = sampler.take_summary()
            if summary.get("error"):
                warnings.append(
                    f"{process.name}: {summary['error']} (samples taken before it are kept)"
                )
            warnings += summary.get("warnings") or []  # a metrics scraper's gaps
            if summary.get("counter_resets"):
                warnings.append(
                    f"{process.name}: energy counter reset {summary['counter_resets']} time(s); "
                    "repaired by continuing from the last reading"
                )
        self._running = []
        return warnings

    @staticmethod
    def _signal_stop(sampler: _Sampler) -> threading.Thread | None:
        """Set a live sampler's stop event, from a daemon thread. A multiprocessing Event's
        set() waits until every process sleeping in wait() has woken; a sampler killed while
        sleeping (SIGKILL, the OOM killer) never wakes, and set() would hang the launcher for
        ever. So a dead sampler's event is left alone, and a set() that hangs because the
        sampler died just now is abandoned after STOP_GRACE_S (stop() then kills and reaps)."""
        if not sampler.process.is_alive():
            return None
        setter = threading.Thread(
            target=sampler.stop_event.set, name=f"stop {sampler.process.name}", daemon=True
        )
        setter.start()
        return setter


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


def _sampler_entry(
    target: Callable[..., object], args: tuple[Any, ...], results: Any, first_sample: Any
) -> None:
    """Sampler process entry: run the sampler, then hand its summary back to the launcher.
    `first_sample` is set after the first sample, and again on the way out (after the summary
    is put), so the start barrier never waits on a sampler that ended without one."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the launcher stops samplers itself
    # Named for `top -H` and `perf sched` (host-sampler, gpu0-sampler, ...).
    name_os_thread(multiprocessing.current_process().name.removeprefix("collobench:"))
    stop = _StopOnSignal(args[-1])
    signal.signal(signal.SIGTERM, stop.on_signal)
    die_with_parent()
    skip_pandas_check()  # its rows are lists of numbers and strings
    try:
        try:
            summary = target(*args[:-1], stop, on_first_sample=first_sample.set)
        except Exception as error:
            with contextlib.suppress(OSError):
                results.put({"error": f"sampler crashed: {error!r}"})
            raise
        record: dict[str, Any] = {}
        if is_dataclass(summary) and not isinstance(summary, type):
            record = asdict(summary)
        with contextlib.suppress(OSError):  # the launcher may be gone
            results.put(record)
    finally:
        first_sample.set()

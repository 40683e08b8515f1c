"""The collocation launcher: one benchmark spec -> one run directory.

For each trial it runs every pipeline alone (solo baselines, when asked and when there is more
than one pipeline), then all together (collocated), then any subsets asked for (phase
`collocated:a+b`, for the interference matrix). Each pipeline runs in its own `spawn`ed
worker process; all workers prepare (load models), then start their load at one common instant
chosen by the launcher, so the load windows overlap. One sampler process per device records
telemetry meanwhile. A worker that fails, crashes or hangs is contained: its pipeline is marked
failed with the reason and the others carry on. At the end the chunk files are merged, the
manifest is written, and MLflow gets a summary (never on the measured path).

This module is the run's lifecycle; the jobs it sequences live beside it: `phase_plan`,
`supervision` (workers), `barrier` (the common start), `preflight` (checks and the
environment probe), `energy_notes` (idle baseline, energy sources), `manifest_writer`, `startup`
(the manifest's start-up breakdown).
"""

from __future__ import annotations

import datetime as dt
import multiprocessing
import os
import signal
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from types import FrameType
from typing import Any

from stages.collocation.barrier import start_together
from stages.collocation.calibration_run import RunCalibration
from stages.collocation.device_locks import DeviceBusy, held_devices
from stages.collocation.energy_notes import (
    SAMPLER_READY_TIMEOUT_S,
    energy_sources,
    measure_idle_baseline,
)
from stages.collocation.manifest_writer import RunState, manifest_of, write_manifest
from stages.collocation.phase_plan import COLLOCATED, phases_of, subset_phase_name, subsets_of
from stages.collocation.preflight import DeviceInUse, EnvironmentProbe, check_environment
from stages.collocation.results import (
    LauncherInterrupted,
    LauncherInterruptedWithResult,
    LaunchError,
    PhaseFigures,
    PhaseSummarizer,
    PipelineOutcome,
    ProgressCallback,
    ProgressEvent,
    RunResult,
    attach_figures,
)
from stages.collocation.run_options import RunOptions, new_run_id
from stages.collocation.services_run import RunServices
from stages.collocation.startup import StartupClock
from stages.collocation.supervision import Supervisor, WorkerHandle
from stages.collocation.worker import WorkerTask
from stages.process_lifetime import ParentWatch, stop_reason
from stages.rundir.manifest import DEVICE_BUSY
from stages.rundir.tables import merge_parts
from stages.spec.models import PipelineSpec
from stages.telemetry.sampler_group import SamplerGroup
from stages.validation.loading import LoadedSpec
from stages.validation.paths import spec_folder, with_resolved_files

# Names the CLI, Dagster and the tests import from here, wherever they are defined.
__all__ = [
    "COLLOCATED",
    "DeviceInUse",
    "LaunchError",
    "Launcher",
    "LauncherInterrupted",
    "LauncherInterruptedWithResult",
    "PhaseFigures",
    "PhaseSummarizer",
    "PipelineOutcome",
    "ProgressCallback",
    "ProgressEvent",
    "RunOptions",
    "RunResult",
    "new_run_id",
    "phases_of",
    "run_benchmark",
    "subset_phase_name",
    "subsets_of",
]


class Launcher:
    """Runs one loaded spec end to end; see the module docstring."""

    def __init__(self, loaded: LoadedSpec, options: RunOptions) -> None:
        self.loaded = loaded
        self.spec = with_resolved_files(loaded.spec, spec_folder(loaded.source))
        self.options = options
        self.run_id = options.run_id or new_run_id(self.spec.name)
        self.run_dir = Path(options.out_dir) / self.run_id
        self.context = multiprocessing.get_context("spawn")
        self.results: list[PipelineOutcome] = []
        # Shared with the supervisor and the helpers: only ever extended in place.
        self.warnings: list[str] = []
        # When the harness's own work ran, so a reader can check it never overlapped a window.
        self.timeline: list[dict[str, Any]] = []
        self.startup = StartupClock(options.startup)
        self._supervisor = Supervisor(
            self.context, self._emit, self.warnings, options.resident_workers
        )
        self._probe = EnvironmentProbe(
            options.project_dir, self.timeline, options.environment, options.cache_dir
        )
        self._live: list[WorkerHandle] = []
        self._samplers: SamplerGroup | None = None
        self._gpu_count: int | None = None
        self._energy_sources: dict[str, str | None] = {"gpu_source": None, "host_source": None}
        self._started: tuple[str, dict[str, int]] = ("", {})
        self._services = RunServices(self.spec, self.run_dir, self.timeline)
        self._calibration = RunCalibration(
            self.spec, self.run_dir, self.timeline, self.warnings, self._probe
        )

    # ----------------------------------------------------------------- public

    def run(self) -> RunResult:
        self._gpu_count, warnings, busy = check_environment(self.spec)
        self.warnings += warnings
        if busy:
            self._refuse_busy(busy)
        # Capturing the environment takes ~1.3 s (a torch import in a subprocess): do it beside
        # the services' start, or the first phase's preparation (the calibration before a
        # phase waits for it and for the workers to be ready).
        self._probe.start([service.type for service in self.spec.services])
        self.run_dir.mkdir(parents=True, exist_ok=False)
        clock = {"monotonic_ns": time.monotonic_ns(), "wall_time_ns": time.time_ns()}
        self._started = (dt.datetime.now(dt.UTC).isoformat(), clock)
        self._write_manifest("running", None)
        previous = {
            sig: signal.signal(sig, self._on_signal) for sig in (signal.SIGINT, signal.SIGTERM)
        }
        status = "ok"
        try:
            status = self._run_phases()
        except LauncherInterrupted as interruption:
            status = "interrupted"
            # A signal's name, or why a progress callback stopped the run (a capacity probe
            # that can no longer pass): the manifest says what cut the run short.
            self.warnings.append(f"interrupted: {interruption}")
            self._stop_everything()
        finally:
            self._services.stop()
            for sig, handler in previous.items():
                signal.signal(sig, handler)
            merge_parts(self.run_dir)
            self.startup.read_first_measured_query(self.run_dir)
            self._energy_sources = energy_sources(self.run_dir)
            self._write_manifest(status, dt.datetime.now(dt.UTC).isoformat())
        mlflow_run_id = self._log_to_mlflow() if status != "interrupted" else None
        result = RunResult(
            self.run_id, self.run_dir, status, self.results, self.warnings, mlflow_run_id
        )
        if status == "interrupted":
            raise LauncherInterruptedWithResult(result)
        return result

    def _refuse_busy(self, busy: Sequence[str]) -> None:
        """A foreign compute process on a device of the run: a run directory with only its
        manifest (status device_busy, the processes named), nothing measured; DeviceInUse."""
        self.run_dir.mkdir(parents=True, exist_ok=False)
        now = dt.datetime.now(dt.UTC).isoformat()
        self._started = (now, {"monotonic_ns": time.monotonic_ns(), "wall_time_ns": time.time_ns()})
        self.warnings += busy
        self._write_manifest(DEVICE_BUSY, now)
        raise DeviceInUse(list(busy), self.run_dir)

    # ----------------------------------------------------------------- phases

    def _run_phases(self) -> str:
        """The idle baseline, then every phase of the plan; the run's status."""
        if self.spec.telemetry.idle_baseline_s > 0:
            self._measure_idle_baseline(self.spec.telemetry.idle_baseline_s)
        # Services start after the idle baseline (their idle draw is theirs, not the machine's).
        if not self._services.start(self.warnings):
            return "failed"
        for trial, phase, pipelines in phases_of(self.spec):
            if not self._services.before_phase(self.warnings):
                return "failed"
            outcomes = self._run_phase(trial, phase, pipelines)
            self._services.after_phase(outcomes, self.warnings)
            self.results += outcomes
        self._services.stop()
        return "failed" if any(outcome.status != "ok" for outcome in self.results) else "ok"

    def _run_phase(
        self, trial: int, phase: str, pipelines: list[PipelineSpec]
    ) -> list[PipelineOutcome]:
        names = [p.name for p in pipelines]
        self._emit(ProgressEvent("phase_start", trial, phase, data={"pipelines": names}))
        marks = self.startup.phase(trial, phase, names)
        workers = [
            self._supervisor.spawn(self._task(trial, phase, pipeline)) for pipeline in pipelines
        ]
        marks["spawned"] = time.monotonic_ns()
        self._live = workers
        # Samplers start now, so their own start-up (imports, Parquet set-up) overlaps the
        # workers' preparation instead of competing with the first seconds of the load.
        samplers = self._start_samplers(trial, phase, {w.name: w.process.pid or 0 for w in workers})
        timeouts_s = {p.name: p.loadgen.timeout_s for p in pipelines}
        start_ns = self._load_window(
            workers,
            timeouts_s,
            samplers,
            lambda: self._calibration.boundary(trial, phase, pipelines, "before"),
            marks,
        )
        end_ns = time.monotonic_ns()
        if start_ns is None:  # no worker got ready (each failed in prepare): an empty window
            start_ns = end_ns
        self.warnings += samplers.stop()
        self._samplers = None
        for worker in workers:
            self._supervisor.reap(worker)
        self._live = []
        outcomes = [worker.outcome for worker in workers]
        self.timeline.append(
            {
                "what": "phase",
                "trial": trial,
                "phase": phase,
                "pipelines": names,
                "start_ns": start_ns,
                "end_ns": end_ns,
            }
        )
        self._calibration.boundary(trial, phase, pipelines, "after")
        # The manifest on disk holds everything so far (a killed launcher leaves it), and the
        # environment the phase summary's host-load figures need.
        self._write_manifest("running", None)
        summarize = self.options.summarize_phase
        self.warnings += attach_figures(summarize, self.run_dir, trial, phase, outcomes)
        self._emit(
            ProgressEvent("phase_end", trial, phase, data={"outcomes": [o.row() for o in outcomes]})
        )
        return outcomes

    def _load_window(
        self,
        workers: list[WorkerHandle],
        timeouts_s: dict[str, float],
        samplers: SamplerGroup,
        calibrate: Callable[[], None],
        marks: dict[str, Any],
    ) -> int | None:
        """Prepare, calibrate, start together, run to the end; the common start (None: no
        worker ready). The calibration runs once every worker is ready and idle, so it neither
        competes with their preparation nor delays it. `marks`: the phase's start-up entry."""
        self._supervisor.await_ready(workers)
        marks["ready"] = time.monotonic_ns()
        # Nothing of the harness may run inside a load window: the environment probe ends and
        # every sampler has its first sample (so energy covers the window) before the start.
        self._probe.await_before_load(self.warnings)
        self.warnings += samplers.wait_first_samples(SAMPLER_READY_TIMEOUT_S)
        ready = [worker for worker in workers if worker.ready and not worker.done]
        if not ready:
            return None
        calibrate()
        marks["calibrated"] = time.monotonic_ns()
        start_ns = start_together(ready, timeouts_s)
        marks["started"] = start_ns
        self._supervisor.await_done(ready, self._services.dead_users)
        return start_ns

    def _task(self, trial: int, phase: str, pipeline: PipelineSpec) -> WorkerTask:
        return WorkerTask(
            run_dir=str(self.run_dir),
            run_id=self.run_id,
            trial=trial,
            phase=phase,
            pipeline=pipeline.model_dump(mode="json"),
            spec_seed=self.spec.seed,
            collocation_mode=self.spec.collocation.mode,
            cache_dir=str(self.options.cache_dir),
            service_urls=self._services.base_urls(),
        )

    def _start_samplers(self, trial: int, phase: str, pids: dict[str, int]) -> SamplerGroup:
        """One sampler per device for this phase (stopped by the phase or `_stop_everything`)."""
        samplers = SamplerGroup(
            self.context, self.run_dir, self.run_id, self.spec.telemetry, self._gpu_count
        )
        self._samplers = samplers
        services = self._services
        samplers.start(
            trial, phase, pids, os.getpid(), services.root_pids(), services.metric_targets()
        )
        return samplers

    def _measure_idle_baseline(self, idle_s: float) -> None:
        """Sample the machine with no pipeline running (phase `idle`), so the energy views can
        subtract idle power from each load window's energy."""
        self._probe.await_before_load(self.warnings)
        samplers = SamplerGroup(
            self.context, self.run_dir, self.run_id, self.spec.telemetry, self._gpu_count
        )
        self._samplers = samplers
        window = measure_idle_baseline(samplers, idle_s, self.warnings)
        self._samplers = None
        self.timeline.append(window)

    # ----------------------------------------------------------------- interruption

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        # "parent died (pid N)" when the ParentWatch sent the signal, else the signal's name.
        raise LauncherInterrupted(stop_reason() or signal.Signals(signum).name)

    def _stop_everything(self) -> None:
        """Stop every child: workers get SIGTERM (they flush and report), then SIGKILL."""
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        for worker in self._live:
            if not worker.done:
                self._supervisor.terminate(worker, "interrupted")
                worker.outcome.status = "interrupted"
            self._supervisor.reap(worker)
            if worker.outcome not in self.results:
                self.results.append(worker.outcome)
        if self._samplers is not None:
            self.warnings += self._samplers.stop()
            self._samplers = None
        self._live = []

    # ----------------------------------------------------------------- records

    def _write_manifest(self, status: str, ended_at: str | None) -> None:
        if ended_at is not None:
            self._probe.join(timeout_s=60)
        started_at, clock = self._started
        self.startup.marks["environment_probed"] = self._probe.ended_ns
        record = RunState(
            run_id=self.run_id,
            status=status,
            started_at=started_at,
            ended_at=ended_at,
            clock=clock,
            timeline=self.timeline,
            environment=self._probe.environment,
            energy=self._energy_sources,
            warnings=self.warnings,
            results=self.results,
            host=self.options.host,
            startup=self.startup.record(),
        )
        write_manifest(self.run_dir, manifest_of(self.loaded, self.spec, record))

    def _log_to_mlflow(self) -> str | None:
        if not self.options.mlflow_uri or self.options.log_to_mlflow is None:
            return None
        return self.options.log_to_mlflow(self.run_dir, self.options.mlflow_uri)

    def _emit(self, event: ProgressEvent) -> None:
        if self.options.progress is not None:
            self.options.progress(event)


def run_benchmark(loaded: LoadedSpec, options: RunOptions) -> RunResult:
    """Run a validated spec; see `Launcher`. The run holds its devices' locks throughout, so
    two benchmarks never share a device by accident, however each was started; it ends (as on
    SIGTERM) if the process that started it dies (`lifetime.ParentWatch`)."""
    launcher = Launcher(loaded, options)
    devices = [pipeline.device for pipeline in loaded.spec.pipelines]
    devices += [service.device for service in loaded.spec.services if service.type != "external"]
    try:
        with (
            ParentWatch(),
            held_devices(devices, options.lock_dir, options.device_wait_s, launcher.run_id),
        ):
            return launcher.run()
    except DeviceBusy as busy:  # stays an input error (exit 2): tests/collocation pin it
        raise LaunchError(str(busy), loaded.source) from None
    except LaunchError as error:  # its line names the spec file
        error.source = loaded.source
        raise

"""The collocation launcher: one benchmark spec -> one run directory.

For each trial it runs every pipeline alone (solo baselines, when asked and when there is more
than one pipeline), then all together (collocated), then any subsets asked for (phase
`collocated:a+b`, for the interference matrix). Each pipeline runs in its own `spawn`ed
worker process; all workers prepare (load models), then start their load at one common instant
chosen by the launcher, so the load windows overlap. One sampler process per device records
telemetry meanwhile. A worker that fails, crashes or hangs is contained: its pipeline is marked
failed with the reason and the others carry on. At the end the chunk files are merged, the
manifest is written, and MLflow gets a summary (never on the measured path).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import itertools
import json
import logging
import multiprocessing
import multiprocessing.connection
import os
import secrets
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from multiprocessing.connection import Connection
from multiprocessing.context import SpawnProcess
from pathlib import Path
from types import FrameType
from typing import Any

from stages import settings
from stages.collocation.device_locks import DeviceBusy, held_devices
from stages.collocation.placement import check_collocation
from stages.collocation.worker import WorkerTask, worker_main
from stages.rundir.tables import MANIFEST, merge_parts, read_table
from stages.runtime.driver import arrival_seed
from stages.spec.loading import LoadedSpec
from stages.spec.models import BenchmarkSpec, PipelineSpec
from stages.spec.paths import spec_folder, with_resolved_files
from stages.telemetry.supervisor import SamplerGroup

log = logging.getLogger(__name__)

START_MARGIN_S = 0.05  # between "all ready" and the common start: time to deliver the message
PREPARE_TIMEOUT_S = 900.0  # loading a large model can take minutes
TERMINATE_GRACE_S = 5.0  # SIGTERM, then SIGKILL after this long
STOP_GRACE_S = 15.0  # past the pipeline's timeout_s before the launcher intervenes
SAMPLER_READY_TIMEOUT_S = 30.0  # for every sampler's first sample before a phase starts
PROBE_TIMEOUT_S = 120.0  # the environment probe must end before the first load window


@dataclass
class PipelineOutcome:
    """How one pipeline fared in one phase of one trial (a row of the manifest's results)."""

    trial: int
    phase: str
    pipeline: str
    status: str = "failed"  # ok | failed | timeout | interrupted
    error: str | None = None
    traceback: str | None = None  # the worker's, when it raised
    exit_code: int | None = None
    pid: int | None = None
    issued: int = 0
    ok: int = 0
    errors: int = 0
    dropped: int = 0
    timeouts: int = 0
    samples_ok: int = 0
    not_issued: int = 0
    stopped_by: str | None = None  # why the load generator stopped issuing
    first_issue_ns: int | None = None
    last_completed_ns: int | None = None
    live_p99_ms: float | None = None  # progress display only: the last 2,000 completions
    summary: dict[str, Any] | None = None  # the phase's figures, from the analysis views


@dataclass
class RunResult:
    run_id: str
    run_dir: Path
    status: str
    results: list[PipelineOutcome]
    warnings: list[str] = field(default_factory=list)
    mlflow_run_id: str | None = None

    @property
    def failed(self) -> list[PipelineOutcome]:
        return [outcome for outcome in self.results if outcome.status != "ok"]


@dataclass
class ProgressEvent:
    """What the launcher tells a progress display."""

    kind: str  # phase_start | progress | phase_end
    trial: int
    phase: str
    pipeline: str | None = None
    data: dict[str, Any] = field(default_factory=dict)


ProgressCallback = Callable[[ProgressEvent], None]
# (run_dir, trial, phase) -> ({pipeline: figures}, warnings)
PhaseSummarizer = Callable[[Path, int, str], tuple[dict[str, dict[str, Any]], list[str]]]


class LaunchError(RuntimeError):
    """The run cannot start (e.g. a collocation mode this machine does not support)."""


class LauncherInterrupted(Exception):
    """SIGINT or SIGTERM reached the launcher."""


@dataclass
class RunOptions:
    out_dir: Path
    cache_dir: Path
    project_dir: Path = field(default_factory=Path.cwd)
    mlflow_uri: str | None = None
    progress: ProgressCallback | None = None
    run_id: str | None = None
    summarize_phase: PhaseSummarizer | None = None
    """Computes a finished phase's figures from the run directory (injected by the CLI or
    Dagster, which may import the analysis layer; the launcher may not)."""
    log_to_mlflow: Callable[[Path, str], str | None] | None = None
    """Records the finished run at `mlflow_uri` and returns the MLflow run id (injected by the
    composition root, as `summarize_phase` is)."""
    lock_dir: Path = field(default_factory=settings.locks_dir)
    """Where the per-device locks live (see `device_locks`)."""
    device_wait_s: float = field(default_factory=settings.device_wait_s)
    """How long to wait for a device another benchmark holds before refusing to start."""


def new_run_id(spec_name: str) -> str:
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%d-%H%M%S")
    return f"{stamp}-{spec_name}-{secrets.token_hex(3)}"


COLLOCATED = "collocated"  # the phase running every pipeline at once


def subset_phase_name(names: list[str]) -> str:
    """The phase of a subset of the pipelines run together: `collocated:a+b`, the names sorted
    and '+'-joined (a pipeline name matches STAGE_ID_PATTERN, so it holds neither ':' nor '+'
    and the name splits back unambiguously)."""
    return f"{COLLOCATED}:{'+'.join(sorted(names))}"


def subsets_of(spec: BenchmarkSpec) -> list[list[PipelineSpec]]:
    """The proper subsets of the pipelines `collocation.subsets` asks to run together, in spec
    order, smallest first: none; pairs (every pair); all (every subset of 2..n-1 pipelines).
    Empty with fewer than three pipelines: the only set of two or more is the full one."""
    pipelines = list(spec.pipelines)
    largest = {"none": 1, "pairs": 2, "all": len(pipelines) - 1}[spec.collocation.subsets]
    return [
        list(subset)
        for size in range(2, min(largest, len(pipelines) - 1) + 1)
        for subset in itertools.combinations(pipelines, size)
    ]


def phases_of(spec: BenchmarkSpec) -> list[tuple[int, str, list[PipelineSpec]]]:
    """(trial, phase, pipelines) in run order, alternating between trials (ABBA): even trials
    run the solo baselines, then all pipelines collocated, then the subset phases
    (`collocation.subsets`, phase `collocated:a+b`); odd trials run that order reversed, so
    slow drift and a noisy neighbour do not land on one side of every comparison."""
    plan: list[tuple[int, str, list[PipelineSpec]]] = []
    for trial in range(spec.repeats):
        if len(spec.pipelines) == 1:
            plan.append((trial, "solo", list(spec.pipelines)))
            continue
        steps: list[tuple[int, str, list[PipelineSpec]]] = []
        if spec.collocation.solo_baselines:
            steps = [(trial, "solo", [pipeline]) for pipeline in spec.pipelines]
        steps.append((trial, COLLOCATED, list(spec.pipelines)))
        steps += [
            (trial, subset_phase_name([p.name for p in subset]), subset)
            for subset in subsets_of(spec)
        ]
        plan += steps if trial % 2 == 0 else steps[::-1]
    return plan


_COUNTER_FIELDS = (
    "issued",
    "ok",
    "errors",
    "dropped",
    "timeouts",
    "not_issued",
    "stopped_by",
    "samples_ok",
    "first_issue_ns",
    "last_completed_ns",
    "live_p99_ms",
)


class _Worker:
    """Launcher-side state of one worker process."""

    def __init__(
        self, outcome: PipelineOutcome, process: SpawnProcess, connection: Connection
    ) -> None:
        self.outcome = outcome
        self.process = process
        self.connection = connection
        self.ready = False
        self.done = False
        self.deadline_ns: int | None = None

    @property
    def name(self) -> str:
        return self.outcome.pipeline


def _death_reason(exit_code: int | None) -> str:
    if exit_code is None:
        return "worker did not exit"
    if exit_code < 0:
        name = signal.Signals(-exit_code).name
        hint = " (possibly the OOM killer)" if name == "SIGKILL" else ""
        return f"worker killed by {name}{hint}"
    return f"worker exited with code {exit_code} before reporting"


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
        self.warnings: list[str] = []
        self._live: list[_Worker] = []
        self._samplers: SamplerGroup | None = None
        self._gpu_count: int | None = None
        self._energy_sources: dict[str, str | None] = {"gpu_source": None, "host_source": None}
        self._environment: dict[str, object] | None = None  # filled in by the probe thread
        self._environment_probe = threading.Thread(
            target=self._capture_environment, name="environment-probe", daemon=True
        )
        # When the harness's own work ran, so a reader can check it never overlapped a window.
        self.timeline: list[dict[str, Any]] = []
        self._started: tuple[str, dict[str, int]] = ("", {})

    # ----------------------------------------------------------------- public

    def run(self) -> RunResult:
        self._check_environment()
        # Capturing the environment takes ~1.3 s (a torch import in a subprocess): do it while
        # the workers spawn and prepare, not before them.
        self._environment_probe.start()
        self.run_dir.mkdir(parents=True, exist_ok=False)
        clock = {"monotonic_ns": time.monotonic_ns(), "wall_time_ns": time.time_ns()}
        started_at = dt.datetime.now(dt.UTC).isoformat()
        self._started = (started_at, clock)
        self._write_manifest("running", started_at, None, clock)
        previous = {
            sig: signal.signal(sig, self._on_signal) for sig in (signal.SIGINT, signal.SIGTERM)
        }
        status = "ok"
        try:
            if self.spec.telemetry.idle_baseline_s > 0:
                self._measure_idle_baseline(self.spec.telemetry.idle_baseline_s)
            for trial, phase, pipelines in phases_of(self.spec):
                self.results += self._run_phase(trial, phase, pipelines)
            if any(outcome.status != "ok" for outcome in self.results):
                status = "failed"
        except LauncherInterrupted:
            status = "interrupted"
            self._stop_everything()
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
            merge_parts(self.run_dir)
            self._note_energy_sources()
            self._write_manifest(status, started_at, dt.datetime.now(dt.UTC).isoformat(), clock)
        mlflow_run_id = self._log_to_mlflow() if status != "interrupted" else None
        result = RunResult(
            self.run_id, self.run_dir, status, self.results, self.warnings, mlflow_run_id
        )
        if status == "interrupted":
            raise LauncherInterruptedWithResult(result)
        return result

    # ----------------------------------------------------------------- phases

    def _run_phase(
        self, trial: int, phase: str, pipelines: list[PipelineSpec]
    ) -> list[PipelineOutcome]:
        self._emit(
            ProgressEvent(
                "phase_start", trial, phase, data={"pipelines": [p.name for p in pipelines]}
            )
        )
        workers = [self._spawn_worker(trial, phase, pipeline) for pipeline in pipelines]
        self._live = workers
        # Samplers start now, so their own start-up (imports, Parquet set-up) overlaps the
        # workers' preparation instead of competing with the first seconds of the load.
        samplers = SamplerGroup(
            self.context, self.run_dir, self.run_id, self.spec.telemetry, self._gpu_count
        )
        self._samplers = samplers
        samplers.start(
            trial, phase, {w.name: w.process.pid or 0 for w in workers}, harness_pid=os.getpid()
        )
        self._await_ready(workers)
        # Nothing of the harness may run inside a load window: the environment probe ends and
        # every sampler has its first sample (so energy covers the window) before the start.
        self._await_environment_probe()
        self.warnings += samplers.wait_first_samples(SAMPLER_READY_TIMEOUT_S)
        ready = [worker for worker in workers if worker.ready and not worker.done]
        start_ns: int | None = None
        if ready:
            start_ns = time.monotonic_ns() + int(START_MARGIN_S * 1e9)
            for worker in ready:
                timeout_s = next(p for p in pipelines if p.name == worker.name).loadgen.timeout_s
                worker.deadline_ns = start_ns + int((timeout_s + STOP_GRACE_S) * 1e9)
                # A worker that died just now raises here; its sentinel tells us below.
                with contextlib.suppress(OSError):
                    worker.connection.send({"kind": "start", "start_ns": start_ns})
            self._await_done(ready)
        end_ns = time.monotonic_ns()
        self.warnings += samplers.stop()
        self._samplers = None
        for worker in workers:
            self._reap(worker)
        self._live = []
        outcomes = [worker.outcome for worker in workers]
        self.timeline.append(
            {
                "what": "phase",
                "trial": trial,
                "phase": phase,
                "pipelines": [p.name for p in pipelines],
                "start_ns": start_ns,
                "end_ns": end_ns,
            }
        )
        # The manifest on disk holds everything so far (a killed launcher leaves it), and the
        # environment the phase summary's host-load figures need.
        started_at, clock = self._started
        self._write_manifest("running", started_at, None, clock)
        self._summarize_phase(trial, phase, outcomes)
        self._emit(
            ProgressEvent(
                "phase_end", trial, phase, data={"outcomes": [asdict(o) for o in outcomes]}
            )
        )
        return outcomes

    def _spawn_worker(self, trial: int, phase: str, pipeline: PipelineSpec) -> _Worker:
        task = WorkerTask(
            run_dir=str(self.run_dir),
            run_id=self.run_id,
            trial=trial,
            phase=phase,
            pipeline=pipeline.model_dump(mode="json"),
            spec_seed=self.spec.seed,
            collocation_mode=self.spec.collocation.mode,
            cache_dir=str(self.options.cache_dir),
        )
        parent_end, child_end = self.context.Pipe(duplex=True)
        process = self.context.Process(
            target=worker_main, args=(task, child_end), name=f"collobench:{pipeline.name}"
        )
        process.start()
        child_end.close()
        outcome = PipelineOutcome(trial, phase, pipeline.name, pid=process.pid)
        return _Worker(outcome, process, parent_end)

    def _handle(self, worker: _Worker, message: dict[str, Any]) -> None:
        kind = message.get("kind")
        outcome = worker.outcome
        if kind == "ready":
            worker.ready = True
        elif kind in ("progress", "done"):
            for name in _COUNTER_FIELDS:
                if name in message:
                    setattr(outcome, name, message[name])
            if kind == "done":
                worker.done = True
                outcome.status = message.get("status", "failed")
                outcome.error = message.get("error")
                leaked = message.get("leaked_threads") or []
                if leaked:
                    self.warnings.append(
                        f"{outcome.pipeline} (trial {outcome.trial}, {outcome.phase}): stage "
                        f"threads still running at shutdown: {', '.join(leaked)}"
                    )
            self._emit(
                ProgressEvent(
                    kind, outcome.trial, outcome.phase, outcome.pipeline, data=asdict(outcome)
                )
            )
        elif kind == "failed":
            worker.done = True
            outcome.status = "failed"
            outcome.error = message.get("error")
            outcome.traceback = message.get("traceback")
            self._emit_outcome(worker)

    def _emit_outcome(self, worker: _Worker) -> None:
        outcome = worker.outcome
        self._emit(
            ProgressEvent(
                "done", outcome.trial, outcome.phase, outcome.pipeline, data=asdict(outcome)
            )
        )

    def _poll(self, workers: list[_Worker], timeout_s: float) -> None:
        """Wait for messages or deaths of `workers`, handling whatever arrives."""
        waitables: dict[Any, _Worker] = {}
        for worker in workers:
            if not worker.done:
                waitables[worker.connection] = worker
                waitables[worker.process.sentinel] = worker
        if not waitables:
            return
        for ready in multiprocessing.connection.wait(list(waitables), timeout=timeout_s):
            worker = waitables[ready]
            if ready is worker.connection:
                try:
                    while worker.connection.poll():
                        self._handle(worker, worker.connection.recv())
                except (EOFError, OSError):
                    self._mark_dead(worker)
            elif not worker.done:
                # Drain what it said before dying (its last messages may explain why).
                try:
                    while worker.connection.poll():
                        self._handle(worker, worker.connection.recv())
                except (EOFError, OSError):
                    pass
                if not worker.done:
                    self._mark_dead(worker)

    def _mark_dead(self, worker: _Worker) -> None:
        """The worker's pipe closed or its process ended; without a final report it failed."""
        if worker.done:
            return
        worker.process.join(timeout=TERMINATE_GRACE_S)
        worker.done = True
        worker.outcome.status = "failed"
        worker.outcome.exit_code = worker.process.exitcode
        worker.outcome.error = worker.outcome.error or _death_reason(worker.process.exitcode)
        self._emit_outcome(worker)

    def _await_ready(self, workers: list[_Worker]) -> None:
        deadline = time.monotonic() + PREPARE_TIMEOUT_S
        while any(not w.ready and not w.done for w in workers):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                for worker in workers:
                    if not worker.ready and not worker.done:
                        self._terminate(worker, f"prepare took over {PREPARE_TIMEOUT_S:.0f} s")
                return
            self._poll([w for w in workers if not w.ready], min(remaining, 1.0))

    def _await_done(self, workers: list[_Worker]) -> None:
        while any(not w.done for w in workers):
            now_ns = time.monotonic_ns()
            for worker in workers:
                if not worker.done and worker.deadline_ns and now_ns > worker.deadline_ns:
                    self._terminate(worker, "worker did not finish within timeout_s; terminated")
            self._poll(workers, 0.5)

    def _terminate(self, worker: _Worker, reason: str) -> None:
        """SIGTERM (the worker flushes and reports), then SIGKILL after a grace period."""
        process = worker.process
        if process.is_alive():
            process.terminate()
            deadline = time.monotonic() + TERMINATE_GRACE_S
            while process.is_alive() and time.monotonic() < deadline:
                self._poll([worker], 0.2)
                if worker.done:
                    break
            process.join(timeout=max(0.0, deadline - time.monotonic()))
            if process.is_alive():
                process.kill()
                process.join(timeout=TERMINATE_GRACE_S)
        worker.done = True
        outcome = worker.outcome
        outcome.status = "timeout" if "timeout" in reason else "failed"
        outcome.error = reason
        outcome.exit_code = process.exitcode
        self._emit_outcome(worker)

    def _reap(self, worker: _Worker) -> None:
        worker.process.join(timeout=TERMINATE_GRACE_S)
        if worker.process.is_alive():
            worker.process.kill()
            worker.process.join(timeout=TERMINATE_GRACE_S)
        worker.outcome.exit_code = worker.process.exitcode
        worker.connection.close()

    # ----------------------------------------------------------------- environment

    def _check_environment(self) -> None:
        from stages.telemetry.sampler_process import foreign_compute_processes, open_gpu_backend

        backend = open_gpu_backend() if self.spec.telemetry.gpu.enabled else None
        try:
            self._gpu_count = backend.device_count() if backend else None
            if backend and self._gpu_count:
                for process in foreign_compute_processes(
                    backend, list(range(self._gpu_count)), {os.getpid()}
                ):
                    self.warnings.append(f"foreign compute process on the GPU: {process}")
        finally:
            if backend:
                backend.shutdown()
        problems = check_collocation(self.spec, self._gpu_count) + _check_traces(self.spec)
        if problems:
            raise LaunchError("; ".join(problems))

    def _capture_environment(self) -> None:
        from stages.collocation.environment import capture_environment

        started_ns = time.monotonic_ns()
        try:
            self._environment = capture_environment(self.options.project_dir)
        finally:
            self.timeline.append(
                {"what": "environment_probe", "start_ns": started_ns, "end_ns": time.monotonic_ns()}
            )

    def _await_environment_probe(self) -> None:
        """Wait for the environment probe (it overlaps the first phase's model loading only)."""
        if not self._environment_probe.is_alive():
            return
        self._environment_probe.join(timeout=PROBE_TIMEOUT_S)
        if self._environment_probe.is_alive():
            self.warnings.append(
                f"the environment probe was still running {PROBE_TIMEOUT_S:.0f} s in; the "
                "first load window started anyway and may be disturbed by it"
            )

    def _measure_idle_baseline(self, idle_s: float) -> None:
        """Sample the machine with no pipeline running (phase `idle`), so the energy views can
        subtract idle power from each load window's energy."""
        self._await_environment_probe()
        samplers = SamplerGroup(
            self.context, self.run_dir, self.run_id, self.spec.telemetry, self._gpu_count
        )
        self._samplers = samplers
        samplers.start(0, "idle", {}, harness_pid=os.getpid())
        self.warnings += samplers.wait_first_samples(SAMPLER_READY_TIMEOUT_S)
        start_ns = time.monotonic_ns()
        time.sleep(idle_s)
        end_ns = time.monotonic_ns()
        self.warnings += samplers.stop()
        self._samplers = None
        self.timeline.append(
            {"what": "idle", "trial": 0, "phase": "idle", "start_ns": start_ns, "end_ns": end_ns}
        )

    def _summarize_phase(self, trial: int, phase: str, outcomes: list[PipelineOutcome]) -> None:
        """Attach the phase's figures, computed by the analysis views (the one definition of
        every figure), to its outcomes; their warnings (foreign CPU load) join the manifest's."""
        summarize = self.options.summarize_phase
        if summarize is None:
            return
        try:
            figures, warnings = summarize(self.run_dir, trial, phase)
        except Exception as error:  # the run's data is on disk whatever happens here
            log.warning("could not summarise trial %d %s: %s", trial, phase, error)
            self.warnings.append(f"trial {trial} {phase}: no summary: {error}")
            return
        for outcome in outcomes:
            outcome.summary = figures.get(outcome.pipeline)
        self.warnings += warnings

    def _note_energy_sources(self) -> None:
        for table, key in (("host_samples", "host_source"), ("gpu_samples", "gpu_source")):
            try:
                column = read_table(self.run_dir, table).column("energy_source").to_pylist()
            except (OSError, KeyError, ValueError):
                continue
            sources = sorted({value for value in column if value})
            self._energy_sources[key] = ",".join(sources) or None

    # ----------------------------------------------------------------- interruption

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        raise LauncherInterrupted(signal.Signals(signum).name)

    def _stop_everything(self) -> None:
        """Stop every child: workers get SIGTERM (they flush and report), then SIGKILL."""
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        for worker in self._live:
            if not worker.done:
                self._terminate(worker, "interrupted")
                worker.outcome.status = "interrupted"
            self._reap(worker)
            if worker.outcome not in self.results:
                self.results.append(worker.outcome)
        if self._samplers is not None:
            self.warnings += self._samplers.stop()
            self._samplers = None
        self._live = []

    # ----------------------------------------------------------------- records

    def _write_manifest(
        self, status: str, started_at: str, ended_at: str | None, clock: dict[str, int]
    ) -> None:
        if ended_at is not None:
            self._environment_probe.join(timeout=60)
        manifest = {
            "format_version": 1,
            "run_id": self.run_id,
            "name": self.spec.name,
            "spec": self.loaded.normalized,
            "spec_hash": self.loaded.spec_hash,
            "spec_source": self.loaded.source,
            "overrides": list(self.loaded.overrides),
            "seed": self.spec.seed,
            "seeds": {
                pipeline.name: {
                    "arrivals_by_trial": [
                        arrival_seed(self.spec.seed, pipeline.name, trial)
                        for trial in range(self.spec.repeats)
                    ],
                }
                for pipeline in self.spec.pipelines
            },
            "clock": clock,
            "phase_order": [
                [trial, phase, [p.name for p in pipelines]]
                for trial, phase, pipelines in phases_of(self.spec)
            ],
            "timeline": self.timeline,
            "started_at": started_at,
            "ended_at": ended_at,
            "status": status,
            "environment": self._environment,
            "energy": self._energy_sources,
            "warnings": self.warnings,
            "results": [asdict(outcome) for outcome in self.results],
        }
        temporary = self.run_dir / (MANIFEST + ".tmp")
        temporary.write_text(json.dumps(manifest, indent=2, default=str))
        os.replace(temporary, self.run_dir / MANIFEST)

    def _log_to_mlflow(self) -> str | None:
        if not self.options.mlflow_uri or self.options.log_to_mlflow is None:
            return None
        return self.options.log_to_mlflow(self.run_dir, self.options.mlflow_uri)

    def _emit(self, event: ProgressEvent) -> None:
        if self.options.progress is not None:
            self.options.progress(event)


def _check_traces(spec: BenchmarkSpec) -> list[str]:
    """Trace files are read now, so a bad one is an input error, not a failed worker."""
    from stages.runtime.loadgen.arrivals import TraceError, read_trace

    problems = []
    for index, pipeline in enumerate(spec.pipelines):
        if pipeline.loadgen.type == "trace" and pipeline.loadgen.trace:
            try:
                read_trace(Path(pipeline.loadgen.trace))
            except TraceError as error:
                problems.append(f"pipelines[{index}].loadgen.trace: {error}")
    return problems


class LauncherInterruptedWithResult(Exception):
    """The run was interrupted; `result` holds what was kept (manifest status interrupted)."""

    def __init__(self, result: RunResult) -> None:
        super().__init__(f"run {result.run_id} interrupted")
        self.result = result


def run_benchmark(loaded: LoadedSpec, options: RunOptions) -> RunResult:
    """Run a validated spec; see `Launcher`. The run holds its devices' locks throughout, so
    two benchmarks never share a device by accident, however each was started."""
    launcher = Launcher(loaded, options)
    devices = [pipeline.device for pipeline in loaded.spec.pipelines]
    try:
        with held_devices(devices, options.lock_dir, options.device_wait_s, launcher.run_id):
            return launcher.run()
    except DeviceBusy as busy:
        raise LaunchError(str(busy)) from None

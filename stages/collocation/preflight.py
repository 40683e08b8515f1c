"""Pre-flight: what must hold before a run starts (the collocation mode works here, trace files
read, no foreign process on the GPU), and the environment probe the manifest records, which
runs beside the services' start (and, with calibration off, the first phase's model loading)
but never inside a load window or beside a calibration."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from stages.collocation.placement import check_collocation
from stages.collocation.results import LaunchError
from stages.contracts.errors import DeviceBusyError
from stages.contracts.warnings import RunWarning, foreign_compute_process
from stages.rundir.manifest import DEVICE_BUSY
from stages.spec.models import BenchmarkSpec, PipelineSpec

PROBE_TIMEOUT_S = 120.0  # the environment probe must end before the first load window


class DeviceInUse(DeviceBusyError):
    """The pre-flight found a foreign compute process on a GPU the run will use: the run is
    refused before anything is measured (manifest status `device_busy`); `refusals` names
    each process."""

    def __init__(self, refusals: list[str], run_dir: Path | None = None) -> None:
        super().__init__("; ".join(refusals))
        self.refusals = refusals
        self.run_dir = run_dir

    def lines(self) -> list[str]:
        return [f"{DEVICE_BUSY}: {line}" for line in self.refusals] + [
            f"refused before measuring; manifest in {self.run_dir}"
        ]


def _gpu_index(device: str, gpu: int | str | None = None) -> int | None:
    """The NVML index of a device string (`cuda` is 0), a placement's GPU index first (a
    placement by UUID is taken as the device string's index); None: cpu."""
    if not device.startswith("cuda"):
        return None
    if isinstance(gpu, int) or (isinstance(gpu, str) and gpu.isdigit()):
        return int(gpu)
    return int(device.split(":", 1)[1]) if ":" in device else 0


def gpus_used(spec: BenchmarkSpec) -> set[int]:
    """The GPUs the run will use: its pipelines' and the services it starts itself."""
    used = {_gpu_index(p.device, p.placement.gpu) for p in spec.pipelines}
    used |= {_gpu_index(s.device) for s in spec.services if s.type != "external"}
    return {index for index in used if index is not None}


def check_environment(
    spec: BenchmarkSpec,
) -> tuple[int | None, list[RunWarning], list[RunWarning]]:
    """The number of GPUs NVML sees (None without GPU telemetry), warnings (a foreign compute
    process on a GPU the run does not use) and refusals (one on a GPU it uses: the caller
    refuses the run as `device_busy`); raises `LaunchError` when the spec cannot run here.

    The run's own services start after this check, so every compute process found is
    foreign unless it is this process or a descendant."""
    from stages.telemetry.sampler_process import foreign_compute_processes, open_gpu_backend

    warnings: list[RunWarning] = []
    busy: list[RunWarning] = []
    used = gpus_used(spec)
    backend = open_gpu_backend() if spec.telemetry.gpu.enabled else None
    try:
        gpu_count = backend.device_count() if backend else None
        if backend and gpu_count:
            for process in foreign_compute_processes(
                backend, list(range(gpu_count)), {os.getpid()}
            ):
                (busy if process["gpu"] in used else warnings).append(
                    foreign_compute_process(process)
                )
    finally:
        if backend:
            backend.shutdown()
    problems = check_collocation(spec, gpu_count) + check_traces(spec)
    if problems:
        raise LaunchError("; ".join(problems))
    return gpu_count, warnings, busy


def check_traces(spec: BenchmarkSpec) -> list[str]:
    """Trace files are read now, so a bad one is an input error, not a failed worker."""
    from stages.runtime.loadgen.trace_formats import TraceError, read_trace

    problems = []
    for index, pipeline in enumerate(spec.pipelines):
        if pipeline.loadgen.type == "trace" and pipeline.loadgen.trace:
            where = f"pipelines[{index}].loadgen.trace"
            try:
                requests = read_trace(Path(pipeline.loadgen.trace), pipeline.loadgen)
            except TraceError as error:
                problems.append(f"{where}: {error}")
                continue
            shapes = [request.shape for request in requests]
            problems += [
                f"{where}: {pipeline.loadgen.trace}: {problem}"
                for problem in _entry_request_problems(pipeline, shapes)
            ]
    return problems


def _entry_request_problems(
    pipeline: PipelineSpec, shapes: list[dict[str, Any] | None]
) -> list[str]:
    """What the pipeline's entry stages say of the trace's request shapes (a request longer
    than the served model's context), when the trace gives any."""
    from stages.runtime.graph import StageGraph
    from stages.runtime.registry import default_registry

    if not any(shapes):
        return []
    registry = default_registry()
    problems = []
    for entry in StageGraph.from_pipeline(pipeline).entries:
        stage = pipeline.stages[entry]
        config = registry.get(stage.type).config_model.model_validate(stage.config)
        problems += config.request_problems(shapes)
    return problems


class EnvironmentProbe:
    """Captures the environment in a thread, so it overlaps the services' start and the first
    phase's workers' spawning and preparation; its span joins `timeline`. Under a second with
    torch's build details cached in `cache_dir` (without: a torch import in a subprocess,
    4.5-14 s on a loaded 2-core machine, up to its 20 s deadline)."""

    def __init__(
        self,
        project_dir: Path,
        timeline: list[dict[str, Any]],
        known: dict[str, object] | None = None,
        cache_dir: Path | None = None,
    ) -> None:
        """`known`: an environment captured earlier on this machine, taken as is (no probe)."""
        self._project_dir = project_dir
        self._cache_dir = cache_dir
        self.ended_ns: int | None = None
        """When the probe ended (monotonic ns); None while it runs, or when `known` was given."""
        self._service_types: tuple[str, ...] = ()
        self._timeline = timeline
        self.environment: dict[str, object] | None = known  # else filled in by the thread
        self._thread = threading.Thread(target=self._capture, name="environment-probe", daemon=True)

    def start(self, service_types: Sequence[str] = ()) -> None:
        """Start the probe; `service_types`: the spec's `services[].type` (the versions of
        their programs are recorded)."""
        self._service_types = tuple(service_types)
        if self.environment is None:
            self._thread.start()

    def _capture(self) -> None:
        from stages.collocation.environment import capture_environment

        started_ns = time.monotonic_ns()
        try:
            self.environment = capture_environment(
                self._project_dir, self._service_types, self._cache_dir
            )
        finally:
            self.ended_ns = time.monotonic_ns()
            self._timeline.append(
                {"what": "environment_probe", "start_ns": started_ns, "end_ns": self.ended_ns}
            )

    def await_before_load(self, warnings: list[str]) -> None:
        """Wait for the probe (before the first calibration, else before the first load
        window); one still running after PROBE_TIMEOUT_S is noted in `warnings`."""
        if not self._thread.is_alive():
            return
        self._thread.join(timeout=PROBE_TIMEOUT_S)
        if self._thread.is_alive():
            warnings.append(
                f"the environment probe was still running {PROBE_TIMEOUT_S:.0f} s in; the "
                "first load window started anyway and may be disturbed by it"
            )

    def join(self, timeout_s: float) -> None:
        if self._thread.ident is not None:  # started
            self._thread.join(timeout=timeout_s)

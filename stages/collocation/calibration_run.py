"""The run's calibrations, as the launcher sequences them: at every phase boundary (before the
load starts, once the phase's workers are ready and idle and the environment probe has ended,
and after the workers are reaped),
outside every load window, each pipeline's cores are measured with the reference workload of
stages.telemetry.calibration (`cpu_loop`), and its GPU too when its device is cuda (`gpu_gemm`,
`gpu_copy`, placed as its worker would be).

Pipelines with the same cores (no placement: every core the launcher may use) or the same GPU
placement share one measurement, one row each. The rows go to the run directory's
`calibration` table (one chunk per boundary), one `calibration` span per boundary to the
manifest's timeline (the Dagster validity check flags one inside a load window). A calibration
that fails is a warning (code calibration_failed) and no row: it never costs the run.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from stages.collocation.placement import torch_device, worker_environment
from stages.collocation.preflight import EnvironmentProbe
from stages.contracts.errors import RunInterruptedError
from stages.contracts.warnings import RunWarning, WarningCode
from stages.rundir.tables import ChunkWriter
from stages.spec.models import BenchmarkSpec, PipelineSpec
from stages.telemetry.calibration import Score, cpu_score, gpu_scores

Measure = Callable[[], list[Score]]


class RunCalibration:
    """The calibrations of one run (telemetry.calibration.enabled false: none)."""

    def __init__(
        self,
        spec: BenchmarkSpec,
        run_dir: Path,
        timeline: list[dict[str, Any]],
        warnings: list[str],
        probe: EnvironmentProbe | None = None,
    ) -> None:
        """`run_dir`'s name is the run id; `timeline` and `warnings` are the launcher's (only
        extended here); `probe`, the run's environment probe, ends before a calibration starts
        (beside it, on a small machine, the first calibration read half the speed)."""
        self._probe = probe
        self._writer: ChunkWriter | None = None
        self._spec = spec
        self._settings = spec.telemetry.calibration
        self._run_dir = Path(run_dir)
        self._timeline = timeline
        self._warnings = warnings

    def boundary(self, trial: int, phase: str, pipelines: list[PipelineSpec], where: str) -> None:
        """Measure `pipelines`' cores (and GPUs) `where` ('before' | 'after') the phase."""
        if not self._settings.enabled or not pipelines:
            return
        if self._probe is not None:
            self._probe.await_before_load(self._warnings)
        started_ns = time.monotonic_ns()
        rows = [
            (name, where, score.workload, score.score, score.unit, score.start_ns, score.end_ns)
            for names, workloads, measure in self._targets(pipelines)
            for score in self._attempt(trial, phase, where, names, workloads, measure)
            for name in names
        ]
        self._timeline.append(
            {
                "what": "calibration",
                "trial": trial,
                "phase": phase,
                "pipelines": [pipeline.name for pipeline in pipelines],
                "start_ns": started_ns,
                "end_ns": time.monotonic_ns(),
            }
        )
        self._write(trial, phase, where, rows)

    def _targets(self, pipelines: list[PipelineSpec]) -> list[tuple[list[str], str, Measure]]:
        """(pipelines, workloads, measurement) per distinct set of cores, then per distinct GPU
        placement of the cuda pipelines."""
        cores: dict[tuple[int, ...] | None, list[PipelineSpec]] = {}
        gpus: dict[tuple[object, ...], list[PipelineSpec]] = {}
        for pipeline in pipelines:
            cpus = pipeline.placement.cpus
            cores.setdefault(None if cpus is None else tuple(sorted(cpus)), []).append(pipeline)
            if pipeline.device.startswith("cuda"):
                placed = pipeline.placement
                key = (pipeline.device, placed.gpu, placed.mig, placed.mps_thread_percentage)
                gpus.setdefault(key, []).append(pipeline)
        targets = [
            ([p.name for p in same], "cpu_loop", self._cpu(same[0])) for same in cores.values()
        ]
        workloads = "gpu_gemm, gpu_copy"
        return targets + [
            ([p.name for p in same], workloads, self._gpu(same[0])) for same in gpus.values()
        ]

    def _cpu(self, pipeline: PipelineSpec) -> Measure:
        settings = self._settings
        cpus = pipeline.placement.cpus
        return lambda: [cpu_score(cpus, settings.chunk_ms, settings.duration_ms)]

    def _gpu(self, pipeline: PipelineSpec) -> Measure:
        """The GPU workloads where the pipeline's worker would run (its collocation mode's
        placement variables, the device as torch names it then)."""
        settings, mode = self._settings, self._spec.collocation.mode

        def measure() -> list[Score]:
            environment = worker_environment(pipeline, mode)
            device = torch_device(pipeline, mode)
            return gpu_scores(device, environment, settings.chunk_ms, settings.duration_ms)

        return measure

    def _attempt(
        self, trial: int, phase: str, where: str, names: list[str], workloads: str, measure: Measure
    ) -> list[Score]:
        """The measurement's scores; none, and a warning, when it fails."""
        try:
            return measure()
        except RunInterruptedError:
            raise
        except Exception as error:  # a calibration never costs the run
            self._warn(
                f"trial {trial} {phase}: calibration {where} the phase ({workloads} of "
                f"{', '.join(names)}) failed: {error}",
                trial=trial,
                phase=phase,
                position=where,
                pipelines=names,
                workload=workloads,
            )
            return []

    def _write(self, trial: int, phase: str, where: str, rows: list[tuple[Any, ...]]) -> None:
        """The boundary's rows as one chunk of the run's `calibration` table (none: nothing)."""
        if not rows:
            return
        columns = {column: [row[i] for row in rows] for i, column in enumerate(_COLUMNS)}
        columns |= {"trial": [trial] * len(rows), "phase": [phase] * len(rows)}
        try:
            if self._writer is None:  # one writer: its chunks are numbered through the run
                keys = {"run_id": self._run_dir.name}
                self._writer = ChunkWriter(self._run_dir, "calibration", "calibration", keys)
            self._writer.write_columns(columns)
        except OSError as error:  # a full disk: the run's own writers say so too
            self._warn(
                f"trial {trial} {phase}: calibration rows {where} the phase not written: {error}",
                trial=trial,
                phase=phase,
                position=where,
            )

    def _warn(self, message: str, **details: Any) -> None:
        self._warnings.append(RunWarning(message, WarningCode.CALIBRATION_FAILED, details))


_COLUMNS = ("pipeline", "position", "workload", "score", "unit", "start_ns", "end_ns")

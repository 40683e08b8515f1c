"""Run one pipeline's load window in this process: the glue between runtime and load generator.

Used by the worker process of a collocated run and, in-process, by tests and perf studies.
"""

from __future__ import annotations

import gc
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from stages.contracts.counters import QueryCounters
from stages.runtime.loadgen.kinds import make_scenario
from stages.runtime.loadgen.scenarios import LoadOutcome, Scenario
from stages.runtime.loadgen.timing import set_timer_slack_ns
from stages.runtime.pipeline import PipelineRuntime
from stages.runtime.recorder import Recorder
from stages.runtime.seeds import derive_seed
from stages.spec.models import PipelineSpec


@dataclass
class PhaseResult:
    """How one pipeline's load window ended."""

    status: str  # ok | failed | timeout
    error: str | None
    outcome: LoadOutcome
    counters: QueryCounters
    leaked_threads: list[str] = field(default_factory=list)


def prepare_load(runtime: PipelineRuntime, seed: int) -> Scenario[Any]:
    """The pipeline's scenario, with its pre-start work done (call before the barrier)."""
    spec = runtime.spec.loadgen
    scenario = make_scenario(spec, seed)
    scenario.prepare(runtime)
    return scenario


def run_load(runtime: PipelineRuntime, scenario: Scenario[Any], start_ns: int) -> PhaseResult:
    """Drive the load from the calling thread (it becomes the issuing thread), then drain and
    stop the pipeline. Stage threads must already be started."""
    spec = runtime.spec.loadgen
    set_timer_slack_ns(1)
    buffer = runtime.recorder.buffer()
    # Everything built before the window (models, datasets, offline query records) moves to
    # the collector's permanent generation: full collections during the measurement then
    # walk only what the workload allocates, not the harness's own state (a 2x effect on
    # offline throughput). The workload's own garbage is collected exactly as before.
    gc.freeze()
    try:
        outcome = scenario.drive(runtime, start_ns, buffer)
        drained = runtime.finish(start_ns + int(spec.timeout_s * 1e9), buffer)
    finally:
        gc.unfreeze()
    if runtime.failure is not None:
        status, error = "failed", runtime.failure
    elif not drained:
        inflight = runtime.counters.timeouts
        status, error = "timeout", f"{inflight} queries still running after {spec.timeout_s} s"
    else:
        status, error = "ok", None
    # The last rows were handed to the writer just now: wait until they are on disk (or
    # failed to get there: a full disk), so a failed write is never reported as an ok phase.
    runtime.recorder.close()
    if runtime.recorder.write_errors:
        status = "failed"
        error = f"recording failed: {runtime.recorder.write_errors[0]}"
    return PhaseResult(status, error, outcome, runtime.counters, runtime.leaked_threads)


def arrival_seed(spec_seed: int, pipeline: str, trial: int) -> int:
    """The arrival schedule's seed: the same in the solo and collocated phases of a trial."""
    return derive_seed(spec_seed, "arrivals", pipeline, trial)


def run_pipeline(
    pipeline: PipelineSpec,
    *,
    seed: int = 0,
    trial: int = 0,
    run_dir: Path | None = None,
    keys: dict[str, Any] | None = None,
    keep_in_memory: bool = True,
    start_delay_s: float = 0.01,
) -> tuple[PhaseResult, Recorder]:
    """Build, prepare and run one pipeline in this process (no isolation); for tests and
    overhead studies. Rows go to `run_dir` chunk files, or stay in the returned recorder."""
    keys = keys or {
        "run_id": "inprocess",
        "trial": trial,
        "phase": "solo",
        "pipeline": pipeline.name,
    }
    recorder = Recorder(
        run_dir,
        keys,
        [stage.id for stage in pipeline.stages],
        label=f"t{trial}-{keys['phase']}-{pipeline.name}",
        keep_in_memory=keep_in_memory,
        slo_ms=pipeline.loadgen.slo_ms,
    )
    runtime = PipelineRuntime(pipeline, recorder, seed=derive_seed(seed, "stages", pipeline.name))
    try:
        runtime.prepare()
        scenario = prepare_load(runtime, arrival_seed(seed, pipeline.name, trial))
        runtime.start()
        start_ns = time.monotonic_ns() + int(start_delay_s * 1e9)
        result = run_load(runtime, scenario, start_ns)
    finally:
        recorder.close()
    return result, recorder

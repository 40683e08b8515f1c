"""What a run reports: each pipeline's outcome per phase (a row of the manifest's `results`),
the run's result, the progress events a display receives, and the errors a run ends with."""

from __future__ import annotations

import copy
import logging
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from stages.collocation.protocol import Done, Failed
from stages.contracts.counters import QueryCounters
from stages.contracts.errors import InvalidInputError, RunInterruptedError

log = logging.getLogger(__name__)


@dataclass(slots=True)
class PipelineOutcome:
    """How one pipeline fared in one phase of one trial; `row()` is its row of the manifest's
    results (stages.rundir.manifest.PipelineResult). Slots: an assignment to a field that does
    not exist raises instead of adding an attribute."""

    trial: int
    phase: str
    pipeline: str
    status: str = "failed"  # ok | failed | timeout | interrupted
    error: str | None = None
    traceback: str | None = None  # the worker's, when it raised
    exit_code: int | None = None
    pid: int | None = None
    counters: QueryCounters = field(default_factory=QueryCounters)  # the worker's last report
    not_issued: int = 0
    stopped_by: str | None = None  # why the load generator stopped issuing
    summary: dict[str, Any] | None = None  # the phase's figures, from the analysis views
    slo_verdict: str | None = None  # met | missed | undecided (the views'); None: no SLO

    def row(self) -> dict[str, Any]:
        """The outcome as one flat record, the counters in place of `counters`: the manifest's
        row of results, and the data of the launcher's progress events."""
        record: dict[str, Any] = {}
        for name in (item.name for item in fields(self)):
            value = getattr(self, name)
            if isinstance(value, QueryCounters):
                record.update(value.model_dump())
            else:
                record[name] = copy.deepcopy(value)
        return record

    def record_done(self, done: Done) -> None:
        """The worker's final report on its load window."""
        self.counters = done.counters
        self.not_issued = done.not_issued
        self.stopped_by = done.stopped_by
        self.status = done.status
        self.error = done.error

    def record_failure(self, failed: Failed) -> None:
        """The worker raised before it could report `Done`."""
        self.status = "failed"
        self.error = failed.error
        self.traceback = failed.traceback


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

    kind: str  # phase_start | progress | done | phase_end
    trial: int
    phase: str
    pipeline: str | None = None
    data: dict[str, Any] = field(default_factory=dict)


ProgressCallback = Callable[[ProgressEvent], None]


@dataclass(frozen=True)
class PhaseFigures:
    """One pipeline's figures for one phase, as the analysis views computed them: the numbers
    (infinite ones as the string "inf", so the manifest stays JSON) and the SLO verdict by name
    (met | missed | undecided; None without an SLO), which is no number."""

    metrics: dict[str, Any]
    slo_verdict: str | None = None


# (run_dir, trial, phase) -> ({pipeline: figures}, warnings)
PhaseSummarizer = Callable[[Path, int, str], tuple[dict[str, PhaseFigures], list[str]]]


def attach_figures(
    summarize: PhaseSummarizer | None,
    run_dir: Path,
    trial: int,
    phase: str,
    outcomes: list[PipelineOutcome],
) -> list[str]:
    """Attach the phase's figures, computed by the analysis views (the one definition of
    every figure; `summarize`, injected: None attaches nothing), to its outcomes; returns the
    warnings for the manifest (foreign CPU load, or why there is no summary)."""
    if summarize is None:
        return []
    try:
        figures, warnings = summarize(run_dir, trial, phase)
    except Exception as error:  # the run's data is on disk whatever happens here
        log.warning("could not summarise trial %d %s: %s", trial, phase, error)
        return [f"trial {trial} {phase}: no summary: {error}"]
    for outcome in outcomes:
        mine = figures.get(outcome.pipeline)
        outcome.summary = None if mine is None else mine.metrics
        outcome.slo_verdict = None if mine is None else mine.slo_verdict
    return warnings


class LaunchError(InvalidInputError, RuntimeError):
    """The run cannot start (e.g. a collocation mode this machine does not support); `source`
    (the spec file, set by `run_benchmark`) prefixes its line."""

    def __init__(self, message: str, source: str | None = None) -> None:
        super().__init__(message)
        self.source = source

    def lines(self) -> list[str]:
        return [f"{self.source}: {self}" if self.source else str(self)]


class LauncherInterrupted(RunInterruptedError):
    """SIGINT or SIGTERM reached the launcher."""


class LauncherInterruptedWithResult(RunInterruptedError):
    """The run was interrupted; `result` holds what was kept (manifest status interrupted)."""

    def __init__(self, result: RunResult) -> None:
        super().__init__(f"run {result.run_id} interrupted")
        self.result = result

    def lines(self) -> list[str]:
        return [f"interrupted; kept what was measured in {self.result.run_dir}"]

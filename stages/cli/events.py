"""What `collobench run` and `collobench capacity` report while they work, for people (the
consoles) or, under `$COLLOBENCH_PROGRESS=jsonl`, as `ProgressRecord` lines on stdout for the
Dagster Pipes child that started them (stages.contracts.progress)."""

from __future__ import annotations

import os
import sys
import time
from typing import Any

from stages.cli.console import err, out
from stages.cli.progress import ProgressDisplay, phase_line, phase_title
from stages.contracts.progress import JSONL, PROGRESS_ENV, ProgressRecord
from stages.contracts.warnings import WarningRecord


def jsonl() -> bool:
    """Whether stdout carries progress records (set by the Pipes children)."""
    return os.environ.get(PROGRESS_ENV) == JSONL


def emit(record: ProgressRecord) -> None:
    sys.stdout.write(record.to_line())
    sys.stdout.flush()


def say(event: str, message: str, **data: Any) -> None:
    """A progress line: a record under jsonl, else printed as is on stdout."""
    if jsonl():
        emit(ProgressRecord(event=event, message=message, data=data))
    else:
        out.print(message, highlight=False, markup=False)


def warn(warning: str) -> None:
    """One of the run's warnings: a record (with its code) under jsonl, else on stderr."""
    if jsonl():
        record = WarningRecord.of(warning)
        data = {"code": record.code, "details": record.details}
        emit(ProgressRecord(event="warning", message=record.message, level="warning", data=data))
    else:
        err.print(f"warning: {warning}", markup=False)


class JsonlProgress:
    """The progress display's stand-in under jsonl: a record per phase start and per pipeline
    at each phase's end, with the lines the display prints in a log."""

    def __init__(self) -> None:
        self._phase_started = 0.0

    def __enter__(self) -> JsonlProgress:
        return self

    def __exit__(self, *exc: object) -> None:
        pass

    def update(self, event: Any) -> None:
        """Take one launcher ProgressEvent (phase_start and phase_end are reported)."""
        where = {"trial": event.trial, "phase": event.phase}
        if event.kind == "phase_start":
            self._phase_started = time.monotonic()
            names = event.data["pipelines"]
            data = where | {"pipelines": names}
            message = f"{phase_title(event.trial, event.phase)}: {', '.join(names)}"
            emit(ProgressRecord(event="phase_start", message=message, data=data))
        elif event.kind == "phase_end":
            elapsed_s = time.monotonic() - self._phase_started
            for outcome in event.data["outcomes"]:
                message = f"{phase_line(outcome)} ({elapsed_s:.1f} s)"
                data = where | {"pipeline": outcome["pipeline"], "status": outcome["status"]}
                emit(ProgressRecord(event="pipeline_end", message=message, data=data))


def progress_display() -> ProgressDisplay | JsonlProgress:
    """The live display for people, or the records under jsonl."""
    return JsonlProgress() if jsonl() else ProgressDisplay()

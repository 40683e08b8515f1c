"""A run's warnings as typed records: a code that readers (the Dagster checks, the device-busy
failure) act on, the message people read, and details. The codes are defined here once; the
launcher raises warnings as `RunWarning`s (plain text to everything that prints them) and the
manifest keeps each as a `WarningRecord`."""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field


class WarningCode(StrEnum):
    """What a warning is about, for readers that act on it."""

    FOREIGN_COMPUTE_PROCESS = "foreign_compute_process"
    """A compute process that is not the run's own was on a GPU (on one of the run's devices:
    the run was refused as device_busy)."""
    CALIBRATION_FAILED = "calibration_failed"
    """A calibration before or after a phase could not run (no row for it; the run goes on)."""
    SERVER_METRICS_GAP = "server_metrics_gap"
    """Scrapes of a service's metrics endpoint failed in a row (a gap in `server_samples`; its
    `up` rows are 0); the run goes on."""
    STAGE_WARNING = "stage_warning"
    """A stage met something on some visits that it could not do or check (http.openai: a
    payload's `input_tokens` counted for another API, so not checked against the server's
    `prompt_tokens`); the run goes on."""
    OTHER = "other"
    """Anything else: read the message."""


FOREIGN_COMPUTE_PROCESS_TEXT = "foreign compute process on the GPU"
"""How a foreign compute process warning's message starts (older manifests have only the text)."""


class RunWarning(str):
    """A warning as the launcher collects it: its message (so every `list[str]` of warnings and
    whatever prints them take it as is), with a `code` and `details`."""

    code: WarningCode
    details: dict[str, Any]

    def __new__(
        cls,
        message: str,
        code: WarningCode = WarningCode.OTHER,
        details: Mapping[str, Any] | None = None,
    ) -> RunWarning:
        warning = super().__new__(cls, message)
        warning.code = code
        warning.details = dict(details or {})
        return warning

    def __getnewargs__(self) -> tuple[str, WarningCode, dict[str, Any]]:  # type: ignore[override]
        return (str.__str__(self), self.code, self.details)


def foreign_compute_process(process: Mapping[str, Any]) -> RunWarning:
    """The warning naming a foreign compute process (`pid`, `name`, `gpu`, `used_memory_mib`)."""
    name = process.get("name") or "name unknown"
    message = (
        f"{FOREIGN_COMPUTE_PROCESS_TEXT}: pid {process['pid']} ({name}) on GPU {process['gpu']}, "
        f"{process.get('used_memory_mib')} MiB"
    )
    details = {key: process.get(key) for key in ("pid", "name", "gpu", "used_memory_mib")}
    return RunWarning(message, WarningCode.FOREIGN_COMPUTE_PROCESS, details)


def stage_warning(pipeline: str, trial: int, phase: str, record: Mapping[str, Any]) -> RunWarning:
    """The warning of what a stage warned about in one load window (`stage`, `message`,
    `visits`: how many of its visits raised it)."""
    message = (
        f"{pipeline} (trial {trial}, {phase}): stage '{record['stage']}': {record['message']} "
        f"({record['visits']} visits)"
    )
    details = {"pipeline": pipeline, "trial": trial, "phase": phase}
    details |= {key: record.get(key) for key in ("stage", "message", "visits")}
    return RunWarning(message, WarningCode.STAGE_WARNING, details)


class WarningRecord(BaseModel):
    """One warning in the manifest (`warning_records`)."""

    model_config = ConfigDict(extra="forbid", json_schema_serialization_defaults_required=True)

    code: WarningCode = Field(description="What it is about: " + ", ".join(WarningCode))
    message: str = Field(description="One line for people (also in the manifest's `warnings`).")
    details: dict[str, Any] = Field(
        default_factory=dict,
        description="The figures behind it (foreign_compute_process: pid, "
        "name, gpu, used_memory_mib; calibration_failed: trial, phase, position, pipelines, "
        "workload; server_metrics_gap: service, trial, phase, start_ns, end_ns, "
        "failed_scrapes, error; stage_warning: pipeline, trial, phase, stage, message, "
        "visits).",
    )

    @classmethod
    def of(cls, warning: str) -> WarningRecord:
        """The record of a warning the launcher collected (a plain string: code `other`)."""
        if isinstance(warning, RunWarning):
            return cls(code=warning.code, message=str.__str__(warning), details=warning.details)
        return cls(code=WarningCode.OTHER, message=warning)

    @classmethod
    def from_text(cls, text: str) -> WarningRecord:
        """The record of a plain-text warning from a manifest written before the records: the
        code its text implies."""
        if text.startswith(FOREIGN_COMPUTE_PROCESS_TEXT):
            return cls(code=WarningCode.FOREIGN_COMPUTE_PROCESS, message=text)
        return cls(code=WarningCode.OTHER, message=text)

"""The machine-readable progress stream between a `collobench` command and the Dagster Pipes
child around it: with `$COLLOBENCH_PROGRESS=jsonl` in its environment, `collobench run` and
`collobench capacity` write one `ProgressRecord` per line on stdout and nothing else there (their
tables are not printed; errors stay one line each on stderr), so the child relays typed records
instead of reading terminal output."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field, ValidationError

PROGRESS_ENV = "COLLOBENCH_PROGRESS"
JSONL = "jsonl"


class ProgressRecord(BaseModel):
    """One progress event: what happened, one line for people, and its figures."""

    event: str = Field(
        description="phase_start | pipeline_end | warning | run_end | mlflow_run | "
        "search_start | probe (capacity searches)"
    )
    message: str = Field(description="One line for people (the event log shows it).")
    level: Literal["info", "warning"] = "info"
    data: dict[str, Any] = Field(default_factory=dict)

    def to_line(self) -> str:
        return self.model_dump_json() + "\n"

    @classmethod
    def from_line(cls, line: str) -> ProgressRecord | None:
        """The record on `line`; None for a line that is not one (an error line on stderr)."""
        if not line.lstrip().startswith("{"):
            return None
        try:
            return cls.model_validate_json(line)
        except ValidationError:
            return None

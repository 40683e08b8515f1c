"""An A/B session's files: `session.json` (what the session is and how it stands) and
`segments.jsonl` (one line per measured segment, appended and flushed as each ends, so Ctrl-C
or a crash loses no finished block and `--resume` continues from them), beside the segments'
run directories under `runs/`. The names and records are the leaf contract
stages.contracts.ab_files, which the warehouse's reader (analysis.ab) shares."""

from __future__ import annotations

import json
import os
from pathlib import Path

from stages.contracts.ab_files import (
    RUNS_FOLDER,
    SEGMENTS_FILE,
    SESSION_FILE,
    ArmLabel,
    ArmRecord,
    SegmentRecord,
    SessionRecord,
    SessionStatus,
)
from stages.contracts.errors import InvalidInputError

__all__ = [
    "RUNS_FOLDER",
    "SEGMENTS_FILE",
    "SESSION_FILE",
    "ArmLabel",
    "ArmRecord",
    "SegmentRecord",
    "SessionFileError",
    "SessionFiles",
    "SessionRecord",
    "SessionStatus",
]


class SessionFileError(InvalidInputError):
    """A session folder that cannot be resumed (missing or unreadable files)."""


class SessionFiles:
    """The files of one session folder."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.runs = folder / RUNS_FOLDER

    def create(self, record: SessionRecord) -> None:
        self.runs.mkdir(parents=True, exist_ok=False)
        self.write(record)

    def write(self, record: SessionRecord) -> None:
        """Replace session.json atomically (a crash leaves the old one or the new one)."""
        temporary = self.folder / (SESSION_FILE + ".tmp")
        temporary.write_text(record.model_dump_json(indent=1))
        os.replace(temporary, self.folder / SESSION_FILE)

    def read(self) -> SessionRecord:
        path = self.folder / SESSION_FILE
        try:
            return SessionRecord.model_validate_json(path.read_text())
        except (OSError, ValueError) as error:
            raise SessionFileError(f"{path}: not a session ({error})") from None

    def append(self, segment: SegmentRecord) -> None:
        """Add one finished segment, on disk before this returns."""
        with (self.folder / SEGMENTS_FILE).open("a") as handle:
            handle.write(segment.model_dump_json() + "\n")
            handle.flush()
            os.fsync(handle.fileno())

    def segments(self) -> list[SegmentRecord]:
        """Every recorded segment; a torn last line (a crash mid-write) is skipped."""
        path = self.folder / SEGMENTS_FILE
        if not path.exists():
            return []
        records = []
        lines = path.read_text().splitlines()
        for number, line in enumerate(lines, start=1):
            try:
                records.append(SegmentRecord.model_validate(json.loads(line)))
            except ValueError as error:
                if number == len(lines):
                    break
                raise SessionFileError(f"{path}:{number}: {error}") from None
        return records

"""A session folder read through the leaf contract stages.contracts.ab_files (analysis may not
import stages.ab), and the warehouse rows made of it: one `ab_sessions` row per session, one
`ab_blocks` row per segment, each the parameters of its insert file under analysis/sql/ab/."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from stages.contracts.ab_files import (
    RUNS_FOLDER,
    SEGMENTS_FILE,
    SESSION_FILE,
    SegmentRecord,
    SessionRecord,
)
from stages.contracts.errors import InvalidInputError


class AbSessionFileError(InvalidInputError):
    """A session folder the warehouse cannot read (one line: `<path>: <reason>`)."""


@dataclass(frozen=True)
class SessionFolder:
    """One session folder's records: session.json and every line of segments.jsonl."""

    folder: Path
    record: SessionRecord
    segments: list[SegmentRecord]

    def dropped(self) -> dict[int, str]:
        """Block -> why the session's last judgement dropped it."""
        return dict(self.record.dropped_blocks)

    def blocks_done(self) -> int:
        """Blocks with both arms' segments recorded."""
        arms: dict[int, set[str]] = {}
        for segment in self.segments:
            arms.setdefault(segment.block, set()).add(segment.arm)
        return sum(1 for labels in arms.values() if labels == {"A", "B"})

    def segment_run_dirs(self) -> list[Path]:
        """The segments' run directories that exist (each holds a manifest.json): the recorded
        run_dir, else the folder of that name under the session's runs/ (the session moved).
        Warm-up segments are not among them: they are discarded."""
        found = []
        for segment in self.segments:
            recorded = Path(segment.run_dir)
            for candidate in (recorded, self.folder / RUNS_FOLDER / recorded.name):
                if (candidate / "manifest.json").exists():
                    found.append(candidate)
                    break
        return found


def is_session_folder(folder: Path) -> bool:
    """Whether `folder` is an A/B session's (it holds session.json)."""
    return (folder / SESSION_FILE).is_file()


def _parse(path: Path, text: str, model: type[BaseModel]) -> Any:
    try:
        return model.model_validate_json(text)
    except ValidationError as error:
        first = error.errors()[0]
        where = ".".join(str(part) for part in first["loc"]) or "the document"
        raise AbSessionFileError(f"{path}: {where}: {first['msg']}") from None


def _segments(path: Path) -> list[SegmentRecord]:
    """segments.jsonl's records; a torn last line (a crash mid-write) is skipped, as the
    session runner's reader skips it."""
    if not path.exists():
        return []
    lines = path.read_text(encoding="utf-8").splitlines()
    records = []
    for number, line in enumerate(lines, start=1):
        try:
            records.append(_parse(path, line, SegmentRecord))
        except AbSessionFileError as error:
            if number == len(lines):
                break
            raise AbSessionFileError(f"{path}:{number}: {str(error).split(': ', 1)[1]}") from None
    return records


def read_session(folder: Path | str) -> SessionFolder:
    """Read a session folder; AbSessionFileError for one without a readable session.json or
    with an unreadable line of segments.jsonl before its last."""
    where = Path(folder)
    path = where / SESSION_FILE
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as error:
        raise AbSessionFileError(f"{path}: not an A/B session ({error.strerror})") from None
    record = _parse(path, text, SessionRecord)
    return SessionFolder(where, record, _segments(where / SEGMENTS_FILE))


def _finite(values: dict[str, float]) -> dict[str, float | None]:
    """The figures with a non-finite one as None (JSON null: DuckDB's JSON has no Infinity)."""
    return {key: value if math.isfinite(value) else None for key, value in values.items()}


def _arm(record: SessionRecord, label: str) -> str | None:
    """An arm's description (its spec file when it has none)."""
    arm = next((arm for arm in record.arms if arm.label == label), None)
    return None if arm is None else arm.description or arm.spec


def session_row(session: SessionFolder) -> dict[str, Any]:
    """The ab_sessions row of a session (insert_session.sql's parameters)."""
    record = session.record
    return {
        "session_id": record.session_id,
        "created_at": record.created_at,
        "mode": record.mode,
        "aa": record.aa,
        "spec_hash": record.spec_hash,
        "machine_class": record.machine_class,
        "seed": record.seed,
        "margin_pct": record.margin_pct,
        "budget_min": record.budget_min,
        "boundary": record.boundary,
        "looks_blocks": list(record.looks_blocks),
        "status": record.status,
        "block_s": record.block_s,
        "arm_a": _arm(record, "A"),
        "arm_b": _arm(record, "B"),
        "repo_dirty": record.repo_dirty,
        "blocks_done": session.blocks_done(),
        # session.json's JSON as written: a non-finite number is already null
        "verdicts": json.dumps(record.verdicts),
        "dropped_blocks": json.dumps([list(pair) for pair in record.dropped_blocks]),
        "session_dir": str(session.folder.resolve()),
    }


def block_rows(session: SessionFolder) -> list[dict[str, Any]]:
    """The ab_blocks rows of a session's segments (insert_block.sql's parameters)."""
    dropped = session.dropped()
    return [
        {
            "session_id": session.record.session_id,
            "block": segment.block,
            "block_order": segment.order,
            "arm": segment.arm,
            "position": segment.position,
            "seed": segment.seed,
            "run_id": segment.run_id,
            "run_dir": segment.run_dir,
            "status": segment.status,
            "error": segment.error,
            "wall_s": segment.wall_s,
            "calibration_score": segment.calibration_score,
            "foreign_cpu_cores": segment.foreign_cpu_cores,
            "dropped": segment.block in dropped,
            "dropped_reason": dropped.get(segment.block),
            "values": json.dumps(_finite(segment.values), sort_keys=True),
            "higher_is_worse": json.dumps(segment.higher_is_worse, sort_keys=True),
        }
        for segment in session.segments
    ]

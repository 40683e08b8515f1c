"""The per-block spread sd(d) each figure showed in earlier sessions, per spec hash, machine
class and figure: what a session's plan says it will cost before block 1. Every session's own
blocks refresh it (pooled with what was stored), an `--aa` session's as any other: a real
change moves d's mean, not its spread."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError

SPREAD_FILE = "spread.json"


class StoredSpread(BaseModel):
    """One figure's pooled per-block spread."""

    model_config = ConfigDict(extra="forbid")

    sd_log: float = Field(description="Pooled sd of d = ln B - ln A over the blocks.")
    blocks: int = Field(description="Blocks behind it.")
    sessions: int = Field(description="Sessions behind it.")


def _key(spec_hash: str, machine_class: str, figure: str) -> str:
    return f"{spec_hash} | {machine_class} | {figure}"


class SpreadStore:
    """`spread.json` in the A/B folder; an unreadable file reads as empty (it is a cache of
    what the sessions' own files hold)."""

    def __init__(self, folder: Path) -> None:
        self.path = folder / SPREAD_FILE

    def _read(self) -> dict[str, StoredSpread]:
        try:
            raw = json.loads(self.path.read_text())
            return {key: StoredSpread.model_validate(value) for key, value in raw.items()}
        except (OSError, ValueError, ValidationError, AttributeError):
            return {}

    def get(self, spec_hash: str, machine_class: str, figure: str) -> StoredSpread | None:
        return self._read().get(_key(spec_hash, machine_class, figure))

    def add(self, spec_hash: str, machine_class: str, figure: str, diffs: list[float]) -> None:
        """Pool one session's block differences of `figure` into the stored spread."""
        if len(diffs) < 2:
            return
        mean = sum(diffs) / len(diffs)
        squares = sum((d - mean) ** 2 for d in diffs)
        stored = self._read()
        key = _key(spec_hash, machine_class, figure)
        old = stored.get(key)
        blocks, sessions, total = len(diffs), 1, squares
        if old is not None:  # pooled: each session's squares about its own mean
            total += old.sd_log**2 * (old.blocks - old.sessions)
            blocks += old.blocks
            sessions += old.sessions
        stored[key] = StoredSpread(
            sd_log=math.sqrt(total / max(1, blocks - sessions)), blocks=blocks, sessions=sessions
        )
        self.path.parent.mkdir(parents=True, exist_ok=True)
        temporary = self.path.with_suffix(".tmp")
        temporary.write_text(json.dumps({k: v.model_dump() for k, v in stored.items()}, indent=1))
        os.replace(temporary, self.path)

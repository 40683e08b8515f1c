"""An A/B session's files, one contract for the writer (stages.ab.session_files) and the reader
(the warehouse, analysis.ab): the names in a session folder (`session.json`, `segments.jsonl`,
the segments' run directories under `runs/`) and the records written to them: the session
(`SessionRecord` with its two `ArmRecord`s) and one measured segment (`SegmentRecord`, a line of
`segments.jsonl`). The field names are the output contract (docs/contracts.md). A leaf: pydantic
and the standard library only."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

SESSION_FILE = "session.json"
SEGMENTS_FILE = "segments.jsonl"
RUNS_FOLDER = "runs"
"""A session folder's folder of segment run directories (warm-ups included)."""

BlockOrder = Literal["AB", "BA"]
"""Which arm ran first in a block."""
ArmLabel = Literal["A", "B"]
SessionStatus = Literal["running", "decided", "budget_spent", "all_looks", "interrupted", "failed"]


class ArmRecord(BaseModel):
    """One arm as the session ran it."""

    model_config = ConfigDict(extra="forbid")

    label: ArmLabel = Field(description="A (baseline) or B (candidate).")
    python: str = Field(description="The Python that ran the arm.")
    spec: str = Field(description="The arm's spec file.")
    overrides: list[str] = Field(default_factory=list, description="Its --set overrides.")
    description: str = Field("", description="What the arm is: a spec, a venv, a revision.")
    revision: str | None = Field(None, description="The commit it ran, for a revision arm.")
    extra_env: dict[str, str] = Field(
        default_factory=dict, description="Variables set for it (a revision's PYTHONPATH)."
    )
    cwd: str | None = Field(None, description="Where it ran (a revision arm: its worktree).")


class SessionRecord(BaseModel):
    """What an A/B session is, how it was planned and how it stands."""

    model_config = ConfigDict(extra="forbid")

    session_id: str = Field(description="The session's folder name.")
    created_at: str = Field(description="UTC ISO time the session started.")
    mode: Literal["interleaved", "duet"] = Field("interleaved", description="How blocks ran.")
    duet_cores: list[list[int]] = Field(
        default_factory=list,
        description="Duet: the two halves of the cores; an AB block puts A on the first.",
    )
    aa: bool = Field(False, description="Both arms the same (an A/A session: noise only).")
    arms: list[ArmRecord] = Field(description="Arm A, then arm B.")
    seed: int = Field(description="Seeds the block orders and each block's arrival seed.")
    margin_pct: float = Field(description="Equivalence margin, +- %.")
    budget_min: float = Field(description="Wall-clock budget of the blocks, minutes.")
    boundary: Literal["obrien-fleming", "pocock"] = Field(description="The looks' boundaries.")
    looks_blocks: list[int] = Field(description="Block counts at which the data is judged.")
    look_alpha: list[float] = Field(description="Each look's nominal family alpha.")
    orders: list[BlockOrder] = Field(description="Every planned block's order, AB or BA.")
    block_seeds: list[int] = Field(description="Every planned block's arrival seed.")
    allow_dirty: bool = Field(False, description="--allow-dirty was given.")
    repo_dirty: bool = Field(False, description="The revision arms' repository had changes.")
    figures: list[str] = Field(
        default_factory=list,
        description="Only these figures are judged ('pipeline/metric', '*' for any); [] all.",
    )
    spec_hash: str | None = Field(None, description="Arm A's spec hash (the spread's key).")
    machine_class: str | None = Field(None, description="Where it ran (run_history's class).")
    block_s: float | None = Field(None, description="Measured seconds per block (warm-up).")
    status: SessionStatus = Field("running", description="How the session stands or ended.")
    warmup_runs: list[str] = Field(default_factory=list, description="Discarded segments.")
    verdicts: list[dict[str, object]] = Field(
        default_factory=list,
        description="The last judgement, one entry per figure (a FigureVerdict's fields; a "
        "non-finite number is null).",
    )
    dropped_blocks: list[tuple[int, str]] = Field(
        default_factory=list,
        description="The last judgement's dropped blocks: (block, why), a spoiled block's "
        "partner of the other order included.",
    )
    warnings: list[str] = Field(default_factory=list, description="What the session warned.")


class SegmentRecord(BaseModel):
    """One measured segment of one block. A non-finite figure (a p99 with failures) is written
    as `Infinity` / `NaN`, so the line reads back as it was (JSON's null would not)."""

    model_config = ConfigDict(extra="forbid", ser_json_inf_nan="constants")

    session_id: str
    block: int = Field(description="Block index, from 0.")
    order: BlockOrder
    arm: ArmLabel
    position: int = Field(description="0: the block's first segment, 1: its second.")
    seed: int = Field(description="The block's arrival seed (both arms alike).")
    run_id: str
    run_dir: str
    status: str = Field(description="The segment run's status (ok, failed, interrupted).")
    error: str | None = None
    wall_s: float = Field(description="Wall time of the segment, start-up included.")
    values: dict[str, float] = Field(
        default_factory=dict, description="'pipeline/metric' -> the segment's figure."
    )
    higher_is_worse: dict[str, bool] = Field(
        default_factory=dict, description="metric -> whether higher is worse."
    )
    calibration_score: float | None = None
    foreign_cpu_cores: float | None = None

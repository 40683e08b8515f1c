"""One A/B session: warm both arms, plan, then run blocks of one segment per arm in the
session's balanced order, judging at each planned look and stopping at the first decided one,
at the last look or when the budget is spent. Each segment is recorded as it ends
(`session_files`); an interruption keeps every finished block and judges them."""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from stages.ab.arm_process import ArmProcess
from stages.ab.judgement import Judgement, figure_selected, is_decided_verdicts, judge
from stages.ab.session_files import SegmentRecord, SessionFiles, SessionRecord
from stages.ab.spread_store import SpreadStore
from stages.ab.stats.looks import blocks_needed, detectable_change_pct, min_blocks_for_alpha
from stages.contracts.ab_segment import SegmentFigures
from stages.contracts.errors import InvalidInputError

ReadSegment = Callable[[Path], SegmentFigures]
Say = Callable[[str], None]
WARMUP_SEGMENTS = 2
"""Per arm before block 1: the first pays the processes' start (imports, models, the
environment probe), the second measures a block's steady cost for the plan."""
GUESSED_SD_LOG = 0.08
"""The per-block spread a plan assumes with nothing stored: p50's A/A spread of 4-s blocks of a
CPU spec here was 0.026-0.077 (docs/design.md, "The A/B session runner")."""


class BudgetTooSmallError(InvalidInputError):
    """The budget cannot hold the first planned look."""


class MachineClassError(InvalidInputError):
    """The two arms ran on different machine classes: never compared."""


@dataclass
class SessionOutcome:
    """How a session ended, with its last judgement."""

    record: SessionRecord
    judgement: Judgement
    look_alpha: float
    planned_look: bool
    fingerprint_differences: list[str] = field(default_factory=list)


def is_decided(judgement: Judgement) -> bool:
    """Whether the look's judgement answers the session (`judgement.is_decided_verdicts`)."""
    return is_decided_verdicts([v.verdict for v in judgement.verdicts])


class SessionRunner:
    """Runs one session's blocks with two started arms."""

    def __init__(
        self,
        files: SessionFiles,
        record: SessionRecord,
        arms: dict[str, ArmProcess],
        read_segment: ReadSegment,
        spreads: SpreadStore,
        say: Say,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.files = files
        self.record = record
        self.arms = arms
        self.read_segment = read_segment
        self.spreads = spreads
        self.say = say
        self.clock = clock
        self.started = clock()
        self.fingerprints: dict[str, dict[str, object]] = {}
        self.pipelines: list[str] = []
        """The arms' pipelines (duet places each on its arm's cores)."""
        self.figure_names: list[str] = []
        """The figures arm A's last warm-up segment had: what the plan speaks of."""

    # ----------------------------------------------------------------- warm-up and plan

    def warm_up(self) -> None:
        """Run the warm-up segments (discarded), record the machine class and a block's cost;
        refuse arms on different machine classes."""
        record = self.record
        walls: dict[str, float] = {}
        attempt = len(self.record.warmup_runs) // (2 * WARMUP_SEGMENTS)  # a resumed session's
        for round_ in range(WARMUP_SEGMENTS):
            run_ids = {label: f"warmup-{attempt}-{round_}-{label}" for label in "AB"}
            answers = self._answers(run_ids, "AB", round_)
            for label, answer in zip("AB", answers, strict=True):
                self.record.warmup_runs.append(run_ids[label])
                walls[label] = float(str(answer["wall_s"]))
                figures = self.read_segment(Path(str(answer["run_dir"])))
                if figures.fingerprint:
                    self.fingerprints[label] = figures.fingerprint
                if label == "A":
                    names = sorted(f"{p}/{m}" for p, m in figures.values)
                    self.figure_names = [n for n in names if figure_selected(n, record.figures)]
        together = record.mode == "duet"  # both segments at once
        self.record.block_s = max(walls.values()) if together else walls["A"] + walls["B"]
        classes = {label: fp.get("machine_class") for label, fp in self.fingerprints.items()}
        if len(set(classes.values())) > 1:
            raise MachineClassError(
                f"arms ran on different machine classes ({classes['A']} vs {classes['B']}): "
                "they are never compared"
            )
        self.record.machine_class = str(classes.get("A")) if classes.get("A") else None
        self.files.write(self.record)

    def fingerprint_differences(self, expected: set[str]) -> list[str]:
        """One line per fingerprint field the arms differ in, marked unexpected unless the
        user's arms say they differ there (`expected`)."""
        first, second = self.fingerprints.get("A", {}), self.fingerprints.get("B", {})
        lines = []
        for name in sorted(set(first) | set(second)):
            if name in ("machine_class", "host") or first.get(name) == second.get(name):
                continue
            mark = "" if name in expected else " (UNEXPECTED: nobody asked for it)"
            lines.append(f"arms differ in {name}: {first.get(name)} vs {second.get(name)}{mark}")
        return lines

    def plan(self, target_pct: float, replan: bool = True) -> list[str]:
        """Trim the looks to the budget (refusing a budget below the first look) and say
        what the session can see: the plan's lines. `replan` false (a resumed session): the
        looks stay as planned, so the alpha already spent stays spent as planned."""
        record = self.record
        block_s = record.block_s or 1.0
        left_s = record.budget_min * 60.0 - (self.clock() - self.started)
        fitting = [n for n in record.looks_blocks if n * block_s <= left_s or not replan]
        if not fitting:
            first = record.looks_blocks[0]
            needed_min = (self.clock() - self.started) / 60 + first * block_s / 60
            raise BudgetTooSmallError(
                f"--budget-min {record.budget_min:g}: too small for the first planned look "
                f"({first} blocks of {block_s:.1f} s after {self.clock() - self.started:.0f} s "
                f"of warm-up); --budget-min {math.ceil(needed_min * 1.1)} would do"
            )
        if len(fitting) < len(record.looks_blocks):
            from stages.ab.stats.looks import plan_looks

            looks = plan_looks(fitting, 0.05, record.boundary)
            record.looks_blocks, record.look_alpha = list(fitting), list(looks.nominal_alpha)
        last_alpha = record.look_alpha[-1]
        lines = [
            f"plan: looks at {', '.join(map(str, record.looks_blocks))} blocks "
            f"({record.boundary}, 5% false alarms per session), a block takes "
            f"{block_s:.1f} s, budget {record.budget_min:g} min"
        ]
        lines += self._idle_looks()
        stored_any = False
        for figure in self.figure_names:
            stored = (
                self.spreads.get(record.spec_hash or "", record.machine_class or "", figure)
                if record.spec_hash
                else None
            )
            sd = stored.sd_log if stored else GUESSED_SD_LOG
            stored_any |= stored is not None
            alpha = last_alpha / max(1, len(self.figure_names))
            needed = blocks_needed(sd, target_pct, alpha)
            seen = detectable_change_pct(sd, record.looks_blocks[-1], alpha)
            source = f"stored sd {sd:.3f} over {stored.blocks} blocks" if stored else "guessed"
            if needed <= record.looks_blocks[-1]:
                lines.append(
                    f"  {figure}: about {needed} blocks, {needed * block_s / 60:.1f} min, to see "
                    f"{target_pct:g}% ({source})"
                )
            else:
                lines.append(
                    f"  {figure}: undecidable within the budget below {seen:.0f}% ({source})"
                )
        if not stored_any:
            lines.append(
                f"  no spread stored for this spec on this machine class: guessing sd "
                f"{GUESSED_SD_LOG} per block (an --aa session measures it)"
            )
        self.files.write(record)
        return lines

    def _idle_looks(self) -> list[str]:
        """A line per look with too few blocks to decide anything at its alpha (the exact
        signed-rank test's smallest p-value is 2 / 2^blocks; Holm's first step divides)."""
        record, figures = self.record, max(1, len(self.figure_names))
        lines = []
        for blocks, alpha in zip(record.looks_blocks, record.look_alpha, strict=True):
            fewest = min_blocks_for_alpha(alpha / figures)
            if blocks < fewest:
                lines.append(
                    f"  the look at {blocks} blocks cannot decide any figure (alpha "
                    f"{alpha:.4f} over {figures} figures needs {fewest} blocks of one sign)"
                )
        return lines

    # ----------------------------------------------------------------- blocks

    def run_blocks(self) -> SessionOutcome:
        """Blocks until a decided look, the last look or the budget; Ctrl-C: what is done."""
        record = self.record
        segments = self.files.segments()
        done = {s.block for s in segments}
        judgement: Judgement | None = None
        look_alpha, planned = record.look_alpha[-1], False
        last_look = record.looks_blocks[-1]
        try:
            for block in range(last_look):
                if block in done and self._complete(segments, block):
                    continue
                if self.clock() - self.started + (record.block_s or 0) > record.budget_min * 60:
                    record.status = "budget_spent"
                    break
                segments += self._run_block(block)
                if block + 1 in record.looks_blocks:
                    look = record.looks_blocks.index(block + 1)
                    look_alpha, planned = record.look_alpha[look], True
                    judgement = judge(
                        segments, record.orders, look_alpha, record.margin_pct, record.figures
                    )
                    self._say_look(block + 1, look_alpha, judgement)
                    if is_decided(judgement):
                        record.status = "decided"
                        break
                else:
                    planned = False
            else:
                record.status = "all_looks"
        except KeyboardInterrupt:
            for arm in self.arms.values():
                arm.interrupt()
            record.status = "interrupted"
            planned = False
            segments = self.files.segments()
        if judgement is None or not planned:
            judgement = judge(
                segments, record.orders, look_alpha, record.margin_pct, record.figures
            )
        record.verdicts = [v.model_dump(mode="json") for v in judgement.verdicts]
        record.dropped_blocks = list(judgement.dropped)  # the warehouse's ab_blocks.dropped
        record.warnings = judgement.warnings
        self._store_spreads(judgement)
        self.files.write(record)
        return SessionOutcome(record, judgement, look_alpha, planned)

    @staticmethod
    def _complete(segments: list[SegmentRecord], block: int) -> bool:
        return {s.arm for s in segments if s.block == block} == {"A", "B"}

    def _run_id(self, block: int, label: str) -> str:
        """The segment's run id, the session's id first: the warehouse keys runs by run_id
        across sessions (a block cut short and run again takes the next free suffix)."""
        stem = f"{self.record.session_id}-block-{block:03d}-{label}"
        run_id, retry = stem, 1
        while (self.files.runs / run_id).exists():
            run_id, retry = f"{stem}-{retry}", retry + 1
        return run_id

    def _answers(self, run_ids: dict[str, str], order: str, seed: int) -> list[dict[str, object]]:
        """Each arm's segment answer, in the block's order: one after the other (interleaved),
        or both at once on their own cores, which the order assigns (duet: AB puts A on the
        first half of the cores)."""
        if self.record.mode == "interleaved":
            return [
                self.arms[label].request("segment", run_id=run_ids[label], seed=seed)
                for label in order
            ]
        halves = self.record.duet_cores
        for label, cores in zip(order, halves, strict=True):
            overrides = [
                f"pipelines.{name}.placement.cpus={json.dumps(cores)}" for name in self.pipelines
            ]
            self.arms[label].send("segment", run_id=run_ids[label], seed=seed, overrides=overrides)
        return [self.arms[label].answer() for label in order]

    def _run_block(self, block: int) -> list[SegmentRecord]:
        record = self.record
        order = record.orders[block]
        seed = record.block_seeds[block]
        run_ids = {label: self._run_id(block, label) for label in "AB"}
        recorded = []
        for position, (label, answer) in enumerate(
            zip(order, self._answers(run_ids, order, seed), strict=True)
        ):
            figures = self.read_segment(Path(str(answer["run_dir"])))
            segment = SegmentRecord(
                session_id=record.session_id,
                block=block,
                order=order,
                arm=label,
                position=position,
                seed=seed,
                run_id=str(answer["run_id"]),
                run_dir=str(answer["run_dir"]),
                status=str(answer["status"]),
                error=answer.get("error"),
                wall_s=float(str(answer["wall_s"])),
                values={f"{p}/{m}": v for (p, m), v in figures.values.items()},
                higher_is_worse=figures.higher_is_worse,
                calibration_score=figures.calibration_score,
                foreign_cpu_cores=figures.foreign_cpu_cores,
            )
            self.files.append(segment)
            recorded.append(segment)
        self.say(f"block {block + 1} ({order}) done, {self.clock() - self.started:.0f} s in")
        return recorded

    def _say_look(self, blocks: int, alpha: float, judgement: Judgement) -> None:
        self.say(f"look at {blocks} blocks (alpha {alpha:.4f}, {len(judgement.kept)} kept):")
        for verdict in judgement.verdicts:
            low, high = verdict.change_ci95
            self.say(
                f"  {verdict.figure}: {verdict.change_pct:+.1f}% [{low:+.1f}, {high:+.1f}] "
                f"{verdict.verdict}"
            )

    def _store_spreads(self, judgement: Judgement) -> None:
        record = self.record
        if not (record.spec_hash and record.machine_class):
            return
        for figure, diffs in judgement.log_diffs.items():
            self.spreads.add(record.spec_hash, record.machine_class, figure, diffs)

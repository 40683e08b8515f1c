"""From a session's recorded segments to its verdicts: which blocks are complete, which are
spoiled (a failed segment, a figure missing or infinite, foreign CPU load or a calibration
score out of line with the session's others), the balanced set kept, and each figure's
paired differences judged at the look's alpha."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field

from stages.ab.session_files import SegmentRecord
from stages.ab.stats.block_orders import BlockOrder, drop_with_partner
from stages.ab.stats.paired_stats import FewBlocksError
from stages.ab.stats.verdict import (
    FigureDifferences,
    FigureVerdict,
    judge_session,
    order_effect_pct,
)

FOREIGN_CORES_FLOOR = 0.25
"""Foreign CPU load above the session's median by more than this (and than 4 robust sd) spoils a
block: host_load's own warning threshold, a quarter of a core held for the whole window."""
CALIBRATION_FLOOR_PCT = 25.0
"""A calibration score further than this (and than 4 robust sd) from the session's median
spoils a block: the machine ran at another speed during it (the 0.1-s score between segments
varied by up to 30% on a quiet spell here, so less says nothing)."""
MIN_SEGMENTS_FOR_OUTLIERS = 8
"""Fewer segments than this give no median to be out of line with."""
ROBUST_SDS = 4.0
MAD_TO_SD = 1.4826


@dataclass
class Judgement:
    """A session's verdicts at one look, and what they rest on."""

    blocks_done: int
    kept: list[int]
    dropped: list[tuple[int, str]]
    verdicts: list[FigureVerdict]
    higher_is_worse: dict[str, bool]
    log_diffs: dict[str, list[float]]
    warnings: list[str] = field(default_factory=list)


def is_decided_verdicts(verdicts: Sequence[str]) -> bool:
    """A look is decided when some figure moved (regressed or improved) or every figure is
    equivalent: the session's question is answered, more blocks would not change it."""
    if not verdicts:
        return False
    moved = any(v in ("regressed", "improved") for v in verdicts)
    return moved or all(v == "equivalent" for v in verdicts)


def complete_blocks(segments: Sequence[SegmentRecord]) -> dict[int, dict[str, SegmentRecord]]:
    """Block -> {arm -> its segment}, for the blocks with both segments recorded."""
    by_block: dict[int, dict[str, SegmentRecord]] = {}
    for segment in segments:
        by_block.setdefault(segment.block, {})[segment.arm] = segment
    return {block: arms for block, arms in sorted(by_block.items()) if len(arms) == 2}


def _outlier_above(values: dict[int, float], floor: float) -> dict[int, float]:
    if len(values) < MIN_SEGMENTS_FOR_OUTLIERS:
        return {}
    median = statistics.median(values.values())
    mad = statistics.median(abs(v - median) for v in values.values()) * MAD_TO_SD
    limit = median + max(floor, ROBUST_SDS * mad)
    return {key: value for key, value in values.items() if value > limit}


def spoiled_blocks(blocks: dict[int, dict[str, SegmentRecord]]) -> dict[int, str]:
    """Block -> why it is spoiled."""
    reasons: dict[int, str] = {}
    ok_sets = [set(s.values) for b in blocks.values() for s in b.values() if s.values]
    figures = set.union(*ok_sets) if ok_sets else set()
    for block, arms in blocks.items():
        for arm, segment in sorted(arms.items()):
            if segment.status != "ok" or not segment.values:
                reasons.setdefault(block, f"arm {arm}'s segment {segment.status}: {segment.error}")
            elif bad := [
                name
                for name, value in segment.values.items()
                if not (math.isfinite(value) and value > 0)
            ]:
                reasons.setdefault(
                    block, f"arm {arm}: {', '.join(sorted(bad))} not a positive number"
                )
            elif missing := figures - set(segment.values):
                reasons.setdefault(block, f"arm {arm}: no {', '.join(sorted(missing))}")
    foreign = {
        (block, arm): s.foreign_cpu_cores
        for block, arms in blocks.items()
        for arm, s in arms.items()
        if s.foreign_cpu_cores is not None
    }
    keyed = list(foreign.items())
    by_index = {index: cores for index, (_, cores) in enumerate(keyed)}
    for index, cores in _outlier_above(by_index, FOREIGN_CORES_FLOOR).items():
        block, arm = keyed[index][0]
        reasons.setdefault(block, f"arm {arm}: {cores:.2f} cores of foreign CPU load")
    scores = [
        ((block, arm), math.log(s.calibration_score))
        for block, arms in blocks.items()
        for arm, s in arms.items()
        if s.calibration_score is not None and s.calibration_score > 0
    ]
    floor = math.log1p(CALIBRATION_FLOOR_PCT / 100.0)
    low = _outlier_above({i: -v for i, (_, v) in enumerate(scores)}, floor)
    high = _outlier_above({i: v for i, (_, v) in enumerate(scores)}, floor)
    for index in sorted({**low, **high}):
        (block, arm), log_score = scores[index]
        median = statistics.median(v for _, v in scores)
        reasons.setdefault(
            block,
            f"arm {arm}: calibration {math.expm1(log_score - median) * 100:+.0f}% off the median",
        )
    return reasons


def judge(
    segments: Sequence[SegmentRecord],
    orders: Sequence[BlockOrder],
    family_alpha: float,
    margin_pct: float,
    only: Sequence[str] = (),
) -> Judgement:
    """The verdicts over the complete blocks so far (at most `len(orders)`); `only`: judge
    just the figures ('pipeline/metric') matching one of these patterns (fewer figures, less
    Holm correction), see `figure_selected`."""
    blocks = {b: arms for b, arms in complete_blocks(segments).items() if b < len(orders)}
    done = len(blocks)
    done_orders = [orders[b] for b in sorted(blocks)]
    index_of = dict(enumerate(sorted(blocks)))
    spoiled = spoiled_blocks(blocks)
    local_spoiled = {i: spoiled[b] for i, b in index_of.items() if b in spoiled}
    selection = drop_with_partner(done_orders, local_spoiled)
    kept = [index_of[i] for i in selection.kept]
    dropped = [(index_of[i], reason) for i, reason in selection.dropped]
    higher_is_worse: dict[str, bool] = {}
    for arms in blocks.values():
        for segment in arms.values():
            higher_is_worse.update(segment.higher_is_worse)
    names = sorted(
        set.intersection(*(set(blocks[b][arm].values) for b in kept for arm in "AB"))
        if kept
        else set(),
        key=_figure_order,
    )
    names = [name for name in names if figure_selected(name, only)]
    log_diffs = {
        name: [
            math.log(blocks[b]["B"].values[name]) - math.log(blocks[b]["A"].values[name])
            for b in kept
        ]
        for name in names
    }
    figures = [
        FigureDifferences(
            figure=name,
            higher_is_worse=higher_is_worse.get(name.rsplit("/", 1)[1], True),
            log_diffs=tuple(diffs),
        )
        for name, diffs in log_diffs.items()
    ]
    try:
        verdicts = judge_session(figures, family_alpha, margin_pct)
    except FewBlocksError:
        verdicts = []
    judgement = Judgement(done, kept, dropped, verdicts, higher_is_worse, log_diffs)
    judgement.warnings += _order_effects(judgement, [orders[b] for b in kept])
    return judgement


def figure_selected(figure: str, only: Sequence[str]) -> bool:
    """Whether 'pipeline/metric' matches one of `only` ('pipeline/metric', 'pipeline/*' or
    '*/metric'); everything when `only` is empty."""
    if not only:
        return True
    pipeline, _, metric = figure.rpartition("/")
    return any(pattern in (figure, f"{pipeline}/*", f"*/{metric}", "*/*") for pattern in only)


METRIC_ORDER = ("queries_per_s", "latency_p50_ms", "latency_p99_ms", "ttft_p50_ms")


def _figure_order(name: str) -> tuple[str, int, str]:
    pipeline, _, metric = name.rpartition("/")
    rank = METRIC_ORDER.index(metric) if metric in METRIC_ORDER else len(METRIC_ORDER)
    return (pipeline, rank, metric)


def _order_effects(judgement: Judgement, kept_orders: list[BlockOrder]) -> list[str]:
    """A warning per figure whose AB blocks and BA blocks differ by more than the half-width
    of its 95% interval: something carried over from a block's first segment to its second."""
    if {"AB", "BA"} - set(kept_orders):
        return []
    warnings = []
    for verdict in judgement.verdicts:
        low, high = verdict.change_ci95
        if not (math.isfinite(low) and math.isfinite(high)):
            continue
        effect = order_effect_pct(judgement.log_diffs[verdict.figure], kept_orders)
        if abs(effect) > (high - low) / 2.0:
            warnings.append(
                f"{verdict.figure}: AB and BA blocks differ by {effect:+.1f}% (more than the "
                f"interval's half-width, {(high - low) / 2:.1f}%): the arm that runs second "
                "may be favoured"
            )
    return warnings

"""From recorded segments to verdicts: complete blocks only, spoiled blocks dropped with a
partner of the other order, figures from the kept blocks, a moved figure decides a look; the
session's files survive a torn last line; the stored spread pools sessions."""

from __future__ import annotations

import math
import random
from pathlib import Path

import pytest

from stages.ab.judgement import complete_blocks, is_decided_verdicts, judge, spoiled_blocks
from stages.ab.session_files import SegmentRecord, SessionFileError, SessionFiles
from stages.ab.spread_store import SpreadStore
from stages.ab.stats.block_orders import balanced_orders

HIGHER_IS_WORSE = {"queries_per_s": False, "latency_p50_ms": True}


def _segment(block: int, arm: str, order: str, p50: float, **extra: object) -> SegmentRecord:
    fields: dict[str, object] = {
        "session_id": "s",
        "block": block,
        "order": order,
        "arm": arm,
        "position": order.index(arm),
        "seed": block,
        "run_id": f"b{block}{arm}",
        "run_dir": f"/runs/b{block}{arm}",
        "status": "ok",
        "wall_s": 2.0,
        "values": {"p/latency_p50_ms": p50, "p/queries_per_s": 100.0 / p50},
        "higher_is_worse": HIGHER_IS_WORSE,
        "calibration_score": 10.0,
        "foreign_cpu_cores": 0.0,
    }
    fields.update(extra)
    return SegmentRecord.model_validate(fields)


def _session(blocks: int, change: float, seed: int = 3) -> tuple[list[SegmentRecord], list[str]]:
    """`blocks` blocks whose B is `change` (a factor) slower than A, with 2% noise per segment."""
    orders = balanced_orders(blocks, seed)
    noise = random.Random(seed)
    segments = []
    for block, order in enumerate(orders):
        drift = math.exp(noise.gauss(0.0, 0.3))  # shared by both arms of the block: cancels
        for arm in order:
            factor = change if arm == "B" else 1.0
            p50 = drift * factor * math.exp(noise.gauss(0.0, 0.02))
            segments.append(_segment(block, arm, order, p50))
    return segments, list(orders)


def test_a_slower_candidate_is_regressed_despite_a_drift_shared_by_both_arms() -> None:
    segments, orders = _session(16, 1.10)
    judgement = judge(segments, orders, 0.05, 5.0)  # type: ignore[arg-type]
    verdicts = {v.figure: v for v in judgement.verdicts}
    assert verdicts["p/latency_p50_ms"].verdict == "regressed"
    assert verdicts["p/queries_per_s"].verdict == "regressed"  # lower throughput is worse
    low, high = verdicts["p/latency_p50_ms"].change_ci95
    assert low < 10.0 < high
    assert is_decided_verdicts([v.verdict for v in judgement.verdicts])


def test_identical_arms_are_equivalent_within_the_margin() -> None:
    segments, orders = _session(16, 1.0)
    judgement = judge(segments, orders, 0.05, 5.0)  # type: ignore[arg-type]
    assert {v.verdict for v in judgement.verdicts} == {"equivalent"}


def test_only_complete_blocks_count_and_a_failed_segment_drops_a_partner() -> None:
    segments, orders = _session(8, 1.10)
    segments.append(_segment(8, "A", "AB", 1.0))  # block 8's B never ran (Ctrl-C)
    assert sorted(complete_blocks(segments)) == list(range(8))
    failed = segments[5].model_copy(update={"status": "failed", "error": "boom", "values": {}})
    segments[5] = failed
    judgement = judge(segments, orders, 0.05, 5.0)  # type: ignore[arg-type]
    dropped = dict(judgement.dropped)
    assert failed.block in dropped and "failed" in dropped[failed.block]
    assert len(judgement.dropped) == 2  # its partner of the other order goes too
    kept_orders = [orders[b] for b in judgement.kept]
    assert kept_orders.count("AB") == kept_orders.count("BA") == 3


def test_foreign_load_and_calibration_out_of_line_spoil_their_block() -> None:
    segments, _ = _session(12, 1.0)
    segments[4] = segments[4].model_copy(update={"foreign_cpu_cores": 1.4})
    segments[9] = segments[9].model_copy(update={"calibration_score": 5.0})
    spoiled = spoiled_blocks(complete_blocks(segments))
    assert spoiled[segments[4].block].endswith("1.40 cores of foreign CPU load")
    assert "calibration -50%" in spoiled[segments[9].block]
    assert len(spoiled) == 2


def test_an_infinite_percentile_spoils_its_block() -> None:
    segments, _ = _session(8, 1.0)
    values = dict(segments[0].values, **{"p/latency_p50_ms": math.inf})
    segments[0] = segments[0].model_copy(update={"values": values})
    spoiled = spoiled_blocks(complete_blocks(segments))
    assert "latency_p50_ms not a positive number" in spoiled[0]


def test_segments_file_keeps_every_line_but_a_torn_last_one(tmp_path: Path) -> None:
    files = SessionFiles(tmp_path / "s")
    files.runs.mkdir(parents=True)
    segments, _ = _session(2, 1.0)
    for segment in segments:
        files.append(segment)
    with (files.folder / "segments.jsonl").open("a") as handle:
        handle.write('{"session_id": "s", "blo')  # a crash mid-write
    assert files.segments() == segments
    (files.folder / "segments.jsonl").write_text('{"bad": 1}\n' + segments[0].model_dump_json())
    with pytest.raises(SessionFileError, match=r"segments\.jsonl:1"):
        files.segments()


def test_the_stored_spread_pools_sessions_about_their_own_means(tmp_path: Path) -> None:
    store = SpreadStore(tmp_path)
    store.add("h", "m", "p/latency_p50_ms", [0.1, 0.3])  # mean 0.2, squares 0.02
    store.add("h", "m", "p/latency_p50_ms", [1.0, 1.2, 1.4])  # mean 1.2, squares 0.08
    stored = store.get("h", "m", "p/latency_p50_ms")
    assert stored is not None
    assert (stored.blocks, stored.sessions) == (5, 2)
    assert stored.sd_log == pytest.approx(math.sqrt(0.10 / 3))
    assert store.get("h", "other class", "p/latency_p50_ms") is None
    (tmp_path / "spread.json").write_text("not json")
    assert store.get("h", "m", "p/latency_p50_ms") is None  # a cache: unreadable reads empty

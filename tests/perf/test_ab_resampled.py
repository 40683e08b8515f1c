"""perf/ab.py's resampled sessions: drawn from a pool of real-shaped blocks, judged at the
planned looks with the runner's stopping rule, a change added to every latency difference and
taken from throughput's. With a 3% per-block spread, A/A sessions rarely alarm, a 10% change
is found in nearly every session at an early look, and the intervals cover it."""

from __future__ import annotations

import random

from perf.ab import _resampled


def _pool(blocks: int, sd: float, seed: int = 5) -> list[dict[str, float]]:
    chooser = random.Random(seed)
    pool = []
    for _ in range(blocks):
        latency = chooser.gauss(0.0, sd)
        pool.append(
            {"p/latency_p50_ms": latency, "p/queries_per_s": -latency + chooser.gauss(0, sd / 5)}
        )
    return pool


def test_resampled_aa_sessions_rarely_alarm_and_a_10pct_change_is_found() -> None:
    pool = _pool(200, 0.03)
    aa = _resampled(pool, 0.0, 10.0, 0.5, 15.0, 200, seed=1)
    assert aa["looks"] == [12, 24, 36]
    assert aa["flagged_share"] <= 0.08
    found = _resampled(pool, 10.0, 10.0, 0.5, 10.0, 200, seed=1)
    assert found["regressed_share"] >= 0.95
    assert found["coverage_share"] >= 0.85
    # Decided by the second look: 24 blocks of 10 s after half a minute of warm-up (blocks
    # drawn twice tie, so the first look's tiny alpha meets the normal approximation).
    assert found["minutes_to_decide_median"] <= round(0.5 + 24 * 10 / 60, 2)


def test_a_budget_that_holds_no_look_says_so() -> None:
    assert _resampled(_pool(20, 0.03), 5.0, 60.0, 5.0, 6.0, 10, seed=1) == {
        "sessions": 0,
        "note": "the budget holds no look",
    }

"""perf/ab.py's resampled sessions: drawn from a pool of real-shaped blocks, judged at the
planned looks with the runner's stopping rule, a change added to every latency difference and
taken from throughput's. With a 3% per-block spread, A/A sessions rarely alarm, a 10% change
is found in nearly every session at an early look, and the intervals cover it."""

from __future__ import annotations

import random

from perf.ab import _resampled, _targets, null_blocks


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


def _skewed_pool(blocks: int, seed: int = 3) -> list[dict[str, float]]:
    """A/A blocks whose d is skewed, as p99's are: mostly a little below 0, one in ten far
    above (a stall in one arm's window). Its mean is about 0 but its median is near -0.08."""
    chooser = random.Random(seed)
    pool = []
    for _ in range(blocks):
        spike = chooser.random() < 0.1
        latency = 0.72 if spike else chooser.gauss(-0.08, 0.04)
        pool.append(
            {
                "p/latency_p99_ms": latency,
                "p/latency_p50_ms": latency / 4,
                "p/queries_per_s": -latency / 4,
            }
        )
    return pool


def test_null_blocks_flip_every_figure_of_a_block_together() -> None:
    pool = _pool(50, 0.03)
    by_size = {round(abs(block["p/latency_p50_ms"]), 12): block for block in pool}
    signs = set()
    for block in null_blocks(pool, 400, random.Random(2)):
        source = by_size[round(abs(block["p/latency_p50_ms"]), 12)]
        sign = 1 if block["p/latency_p50_ms"] == source["p/latency_p50_ms"] else -1
        assert block == {name: sign * d for name, d in source.items()}
        signs.add(sign)
    assert signs == {-1, 1}


def test_a_skewed_aa_pool_is_not_replayed_as_a_change() -> None:
    # Centred on its mean this pool's median stays near -0.08: a session's signed-rank test
    # calls that `improved` in most sessions. Flipped signs make it symmetric about 0.
    aa = _resampled(_skewed_pool(300), 0.0, 10.0, 0.5, 15.0, 300, seed=4)
    assert aa["flagged_share"] <= 0.08


def test_the_targets_say_met_missed_or_not_measured() -> None:
    figures = {
        "real": {"aa_flagged_share": 0.0, "10pct": {"sessions": 10, "regressed_within_budget": 8}},
        "resampled": {
            "0pct": {"flagged_share": 0.03},
            "5pct": {"session_regressed_share": 0.93, "coverage_share": 0.95},
            "10pct": {"coverage_share": 0.89},
        },
    }
    assert _targets(figures) == {
        "aa_flagged_at_most_5pct": True,
        "10pct_regressed_9_of_10_within_10min": False,
        "5pct_resampled_regressed_90pct_within_15min": True,
        "coverage_90pct": False,
    }
    assert set(_targets({"real": {}}).values()) == {None}

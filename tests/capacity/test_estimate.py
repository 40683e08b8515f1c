"""The isotonic estimate: PAVA pooling, the crossing, and a reproducible interval."""

from __future__ import annotations

import numpy as np
import pytest

from stages.capacity.estimate import crossing, estimate_capacity, isotonic_blocks
from stages.contracts.capacity_files import ProbeRecord


def _probe(rate: float, queries: int, over_slo: int, seed: int = 0) -> ProbeRecord:
    per = queries // 10
    batches = [(per, over_slo // 10 + (1 if i < over_slo % 10 else 0)) for i in range(10)]
    return ProbeRecord(
        index=0,
        rate=rate,
        seed=seed,
        queries=per * 10,
        over_slo=over_slo,
        verdict="met",
        p99_ms=None,
        run_dir=None,
        batches=batches,
    )


def test_pava_pools_adjacent_violators_into_their_weighted_mean() -> None:
    blocks = isotonic_blocks(
        np.array([0.0, 1.0, 2.0, 3.0]),
        np.array([0.1, 0.3, 0.1, 0.5]),
        np.array([1.0, 1.0, 3.0, 1.0]),
    )
    assert [value for _, value, _ in blocks] == pytest.approx([0.1, 0.15, 0.5])
    assert blocks[1][0] == pytest.approx((1.0 + 2.0 * 3) / 4) and blocks[1][2] == 4.0


def test_crossing_interpolates_the_log_share_and_is_none_without_a_straddle() -> None:
    blocks = [(0.0, 0.001, 1.0), (1.0, 0.1, 1.0)]
    assert crossing(blocks, 0.01) == pytest.approx(0.5)
    assert crossing(blocks, 0.5) is None
    assert crossing([(0.0, 0.0, 1.0), (2.0, 0.02, 1.0)], 0.01) == pytest.approx(1.0)


def test_estimate_lies_between_the_straddling_probes_and_repeats_exactly() -> None:
    probes = [_probe(100, 5000, 5), _probe(150, 5000, 30), _probe(180, 5000, 200)]
    first = estimate_capacity(probes, 0.99)
    assert first.estimate_qps is not None and 150 < first.estimate_qps < 180
    assert first.ci95 is not None and first.ci95[0] <= first.estimate_qps <= first.ci95[1]
    assert estimate_capacity(probes, 0.99) == first
    assert estimate_capacity(probes[:1], 0.99).estimate_qps is None
    below = [_probe(100, 5000, 0), _probe(150, 5000, 10)]
    assert estimate_capacity(below, 0.99).estimate_qps is None

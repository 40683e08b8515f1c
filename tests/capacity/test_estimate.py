"""The isotonic estimate: PAVA pooling, the crossing, and a reproducible interval."""

from __future__ import annotations

import numpy as np
import pytest

from stages.capacity.estimate import (
    burst_degrees_of_freedom,
    censored_design_effect,
    crossing,
    estimate_capacity,
    isotonic_blocks,
)
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


def _bursty(rate: float, queries: int, over_slo: int, effect: float, stopped: bool) -> ProbeRecord:
    return _probe(rate, queries, over_slo).model_copy(
        update={"design_effect": effect, "abort_reason": "stopped" if stopped else None}
    )


def test_a_burst_cut_by_an_early_stop_does_not_count_as_whole() -> None:
    """Two bursts of 10 in the window: d = 10 either way; when the probe stopped inside the
    second, only one burst is whole, so the mean burst is 20 and d = 2 * 20 - 1."""
    whole = [_bursty(150, 5000, 20, 10.0, stopped=False)]
    cut = [_bursty(150, 5000, 20, 10.0, stopped=True)]
    assert censored_design_effect(whole, 0.01) == pytest.approx(19.0)
    assert censored_design_effect(cut, 0.01) == pytest.approx(39.0)
    assert censored_design_effect([_probe(150, 5000, 20)], 0.01) is None
    # 20% over the SLO: an overloaded queue's bursts are left out (with them: d = 20.8)
    overloaded = [*whole, _bursty(190, 500, 100, 10.0, stopped=True)]
    assert censored_design_effect(overloaded, 0.01) == pytest.approx(19.0)


def test_fewer_bursts_behind_the_crossing_give_a_wider_interval_within_the_probed_rates() -> None:
    def interval(effect: float) -> tuple[float, float]:
        probes = [
            _bursty(100, 5000, 5, effect, False),
            _bursty(150, 5000, 30, effect, False),
            _bursty(180, 5000, 200, effect, False),
        ]
        found = estimate_capacity(probes, 0.99)
        assert found.ci95 is not None and found.estimate_qps is not None
        assert 100 <= found.ci95[0] <= found.estimate_qps <= found.ci95[1] <= 180
        return found.ci95

    assert burst_degrees_of_freedom([_probe(150, 5000, 30), _probe(180, 5000, 200)], 5.1, 10) == 23
    narrow, wide = interval(2.0), interval(20.0)
    assert wide[1] / wide[0] > narrow[1] / narrow[0]

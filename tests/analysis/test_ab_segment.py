"""One A/B segment's figures (`analysis/reports/ab_segment.py`), read from a run directory
exactly as `collobench report` would see that run: the history's figures per pipeline, and
TTFT p50 for a pipeline with a generation stage, on hand-made rows whose figures are known."""

from __future__ import annotations

from pathlib import Path

import pytest

from analysis.reports.ab_segment import segment_figures
from tests.analysis.test_tokens import generation_run


def test_a_generation_pipeline_carries_its_ttft_p50_beside_the_history_figures(
    tmp_path: Path,
) -> None:
    figures = segment_figures(generation_run(tmp_path).write())
    metrics = sorted(metric for pipeline, metric in figures.values if pipeline == "g")
    assert metrics == ["latency_p50_ms", "latency_p99_ms", "queries_per_s", "ttft_p50_ms"]
    # TTFT from arrival is 2i + 3 ms for query i of 10: LoadGen's p50 is sorted[5] = 13 ms.
    assert figures.values[("g", "ttft_p50_ms")] == pytest.approx(13.0)
    assert figures.higher_is_worse["ttft_p50_ms"] is True
    assert figures.higher_is_worse["queries_per_s"] is False

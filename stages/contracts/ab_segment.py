"""What one A/B segment measured, as the A/B session runner (`stages.ab`) reads it and the
analysis layer (`analysis.reports.ab_segment`) computes it from the segment's run directory."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class SegmentFigures:
    """One segment's figures and what judges the segment.

    `values`: (pipeline, metric) -> value (queries_per_s, latency_p50_ms, latency_p99_ms,
    ttft_p50_ms); empty when the segment's run failed. `higher_is_worse`: metric -> whether a
    higher value is worse. `calibration_score`: the machine's measured speed during it (the
    lowest of its pipelines'). `foreign_cpu_cores`: the most CPU something outside the
    benchmark held in its load window. `fingerprint`: what it ran on (run_history's fields)."""

    values: dict[tuple[str, str], float]
    higher_is_worse: dict[str, bool]
    calibration_score: float | None
    foreign_cpu_cores: float | None
    fingerprint: dict[str, Any] = field(default_factory=dict)

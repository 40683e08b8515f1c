"""Why a figure moved between runs: the code, the environment or the machine changed, or nothing
recorded did (`unexplained`).

A change found in a history (analysis.history.change_points) is attributed by comparing what the run
before it and the first run after it ran on (the fingerprints of the `run_history` view), and
whether the machine's measured speed (the `calibration` score on the pipeline's cores) moved
beyond its own between-run band over the same runs.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from scipy import stats

UNEXPLAINED = "unexplained"
CALIBRATION_MIN_MOVE_PCT = 5.0
"""A calibration shift smaller than this is not called a machine change (the per-phase score
varied by about 5% between ten A/A demo runs here)."""
CALIBRATION_ALPHA = 0.05
"""Two-sided level of the test that the calibration moved: a likely cause, named beside a
change already decided, not a verdict of its own."""

# (fingerprint column, how a change of it reads); package columns name the package.
CODE_FIELDS = (("collobench_version", "collobench"), ("git_commit", "commit"))
ENVIRONMENT_FIELDS = (
    ("python_version", "python"),
    ("torch_version", "torch"),
    ("transformers_version", "transformers"),
    ("cuda_version", "CUDA"),
    ("driver_version", "driver"),
)


@dataclass(frozen=True)
class CalibrationShift:
    """How far the machine's measured speed moved across a change (percent, its interval)."""

    change_pct: float
    ci95: tuple[float, float]


def calibration_shift(
    before: Sequence[float | None], after: Sequence[float | None]
) -> CalibrationShift | None:
    """The calibration score after a change against before it, when it moved: a Welch t test on
    the logs at CALIBRATION_ALPHA and at least CALIBRATION_MIN_MOVE_PCT; None when it did not
    move or either side has no score (with one run a side, the move alone decides)."""
    a = [math.log(x) for x in before if x is not None and x > 0]
    b = [math.log(x) for x in after if x is not None and x > 0]
    if not a or not b:
        return None
    diff = sum(b) / len(b) - sum(a) / len(a)
    change_pct = 100 * math.expm1(diff)
    if abs(change_pct) < CALIBRATION_MIN_MOVE_PCT:
        return None
    if len(a) < 2 or len(b) < 2:
        return CalibrationShift(change_pct, (change_pct, change_pct))
    if statistics.pvariance(a) == 0 and statistics.pvariance(b) == 0:
        return CalibrationShift(change_pct, (change_pct, change_pct))  # no noise to doubt it
    result = stats.ttest_ind(b, a, equal_var=False)
    if not result.pvalue < CALIBRATION_ALPHA:
        return None
    interval = result.confidence_interval(0.95)
    return CalibrationShift(
        change_pct, (100 * math.expm1(interval.low), 100 * math.expm1(interval.high))
    )


def cause_of(
    before: Mapping[str, Any], after: Mapping[str, Any], calibration: CalibrationShift | None
) -> str:
    """The likely cause of a change between the run `before` it and the run `after` (rows of
    `run_history`): every recorded difference, code first, joined by '; '; UNEXPLAINED when
    none."""
    causes = [*_code(before, after), *_environment(before, after), *_machine(before, after)]
    if calibration is not None:
        low, high = calibration.ci95
        causes.append(
            f"machine: calibration score {calibration.change_pct:+.0f}% "
            f"[{low:+.0f}, {high:+.0f}] on the pipeline's cores"
        )
    return "; ".join(causes) or UNEXPLAINED


def _moved(before: Mapping[str, Any], after: Mapping[str, Any], field: str) -> bool:
    return (
        before.get(field) is not None
        and after.get(field) is not None
        and (before[field] != after[field])
    )


def _code(before: Mapping[str, Any], after: Mapping[str, Any]) -> list[str]:
    found = [
        f"code: {label} {_short(before[field])} -> {_short(after[field])}"
        for field, label in CODE_FIELDS
        if _moved(before, after, field)
    ]
    if not found and after.get("git_dirty") and not before.get("git_dirty"):
        found.append(f"code: uncommitted changes on {_short(after.get('git_commit'))}")
    return found


def _environment(before: Mapping[str, Any], after: Mapping[str, Any]) -> list[str]:
    found = [
        f"environment: {label} {before[field]} -> {after[field]}"
        for field, label in ENVIRONMENT_FIELDS
        if _moved(before, after, field)
    ]
    if not found and _moved(before, after, "packages_sha256"):
        found.append(
            "environment: the installed packages changed (package list sha256 "
            f"{str(before['packages_sha256'])[:8]} -> {str(after['packages_sha256'])[:8]})"
        )
    return found


def _machine(before: Mapping[str, Any], after: Mapping[str, Any]) -> list[str]:
    return (
        [f"machine: host {before['host']} -> {after['host']}"]
        if _moved(before, after, "host")
        else []
    )


def _short(value: object) -> str:
    """A commit as its first 12 characters, anything else as it is."""
    text = str(value)
    return text[:12] if len(text) == 40 else text

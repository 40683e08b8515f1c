"""Report tables of one run, read from the warehouse's views over a read-only connection.

`report()` returns one pandas DataFrame per view, filtered to one run (the latest when none is
named), ready for a terminal table, a Dagster asset's metadata or a notebook. Latency
confidence intervals are computed here rather than in SQL: a percentile bootstrap of the mean of
the per-trial percentiles, seeded so a report is reproducible.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from analysis.db import connect_read_only, is_read_only

# Views reported per run, in display order; each has a run_id column.
VIEWS: dict[str, list[str]] = {
    "throughput": ["trial", "phase", "pipeline"],
    "latency": ["trial", "phase", "pipeline"],
    "latency_by_run": ["phase", "pipeline"],
    "stage_breakdown": ["trial", "phase", "pipeline", "stage"],
    "energy": ["trial", "phase", "pipeline", "device"],
    "perf_per_watt": ["trial", "phase", "pipeline", "device"],
    "contention": ["trial", "pipeline"],
}
MIN_TRIALS_FOR_CI = 3  # with fewer, a bootstrap over trials has too few distinct resamples
BOOTSTRAP_RESAMPLES = 2000
CI_LEVEL = 0.95
BOOTSTRAP_SEED = 0


def latest_run_id(db_path: Path | str) -> str:
    """The run that started last (ties: loaded last); LookupError when nothing is loaded."""
    connection = connect_read_only(db_path)
    try:
        row = connection.execute(
            "SELECT run_id FROM runs ORDER BY started_at DESC NULLS LAST, loaded_at DESC LIMIT 1"
        ).fetchone()
    finally:
        connection.close()
    if row is None:
        raise LookupError(f"{db_path}: no runs loaded")
    return str(row[0])


def bootstrap_mean_ci(
    values: np.ndarray, level: float = CI_LEVEL, resamples: int = BOOTSTRAP_RESAMPLES
) -> tuple[float, float]:
    """Percentile-bootstrap confidence interval of the mean of `values` (one value per trial),
    seeded with BOOTSTRAP_SEED so the same data always gives the same interval."""
    rng = np.random.default_rng(BOOTSTRAP_SEED)
    picks = rng.integers(0, len(values), size=(resamples, len(values)))
    means = values[picks].mean(axis=1)
    tail = (1 - level) / 2 * 100
    low, high = np.percentile(means, [tail, 100 - tail])
    return float(low), float(high)


def latency_confidence(per_trial: pd.DataFrame) -> pd.DataFrame:
    """Bootstrap CIs of the trial-mean p50 and p99 per (phase, pipeline), from the per-trial
    `latency` rows; NaN where fewer than MIN_TRIALS_FOR_CI trials have a figure."""
    rows = []
    for (phase, pipeline), group in per_trial.groupby(["phase", "pipeline"], sort=True):
        row: dict[str, object] = {"phase": phase, "pipeline": pipeline}
        for column in ("latency_p50_ms", "latency_p99_ms"):
            values = group[column].dropna().to_numpy(dtype=float)
            name = column.removeprefix("latency_").removesuffix("_ms")
            low, high = (
                bootstrap_mean_ci(values) if len(values) >= MIN_TRIALS_FOR_CI else (np.nan, np.nan)
            )
            row[f"trial_mean_{name}_ci_low_ms"] = low
            row[f"trial_mean_{name}_ci_high_ms"] = high
        rows.append(row)
    columns = ["phase", "pipeline"] + [
        f"trial_mean_{p}_ci_{side}_ms" for p in ("p50", "p99") for side in ("low", "high")
    ]
    return pd.DataFrame(rows, columns=columns)


def report(db_path: Path | str, run_id: str | None = None) -> dict[str, pd.DataFrame]:
    """One DataFrame per view (keys of VIEWS) for `run_id`, or for the latest run when None.

    Raises LookupError for an unknown run_id or an empty warehouse, FileNotFoundError when the
    database does not exist."""
    chosen = run_id if run_id is not None else latest_run_id(db_path)
    connection = connect_read_only(db_path)
    try:
        assert is_read_only(connection)
        known = connection.execute("SELECT count(*) FROM runs WHERE run_id = ?", [chosen])
        if not (known.fetchone() or (0,))[0]:
            raise LookupError(f"{db_path}: no run {chosen!r} loaded")
        frames: dict[str, pd.DataFrame] = {}
        for view, order in VIEWS.items():
            # `view` and `order` come from the fixed VIEWS table, never from input.
            frames[view] = connection.execute(
                f"SELECT * FROM {view} WHERE run_id = ? ORDER BY {', '.join(order)}", [chosen]
            ).df()
    finally:
        connection.close()
    confidence = latency_confidence(frames["latency"])
    frames["latency_by_run"] = frames["latency_by_run"].merge(
        confidence, on=["phase", "pipeline"], how="left"
    )
    return frames

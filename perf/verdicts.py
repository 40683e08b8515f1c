"""Verdicts across runs on this machine: A/A through Dagster, then simulated histories with the
between-run spread measured there. Prints one JSON line.

    python -m perf.verdicts [--runs 10] [--partition demo] [--histories 1000] [--home DIR]

1. A/A (`--runs`, default 10): `python -m bench_defs.demo --partition demo` (what `make demo`
   runs) that many times in a row on one Dagster instance under a fresh COLLOBENCH_HOME, nothing
   changed between runs. Counts the runs whose `regression` or `reproducibility` check failed
   (target: at most 1 in 10), and measures from the warehouse's `run_history` the between-run
   spread (sd of the log figure, pooled over each metric's series) of throughput, p50 and p99,
   raw and divided by the run's calibration score (the machine's measured speed).
2. Simulated histories (`--histories`, default 1000, 20 runs each), drawn with those spreads and
   the spec's family of metrics: the A/A false-alarm rate per run; for steps of 10, 20 and 40%
   of p50 latency after 12 runs, and for a step at each history's own minimal detectable change
   (target: at least 90%), the share found within 3 runs and the runs it took; the minimal
   detectable change of p50 after 12 runs; a single 6-sd outlier taken for a change
   point, at the spec's family and at a one-pipeline spec's (3 metrics).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from analysis.history.change_points import IMPROVED, REGRESSED, judge_history
from perf.common import REPO_ROOT, code_version, log

SCRIPT = "verdicts"
STEPS_PCT = (10, 20, 40)
BASELINE_RUNS = 12
RUNS = 20
METRICS_ONE_PIPELINE = 3


def dagster_aa(runs: int, partition: str, home: Path) -> dict[str, Any]:
    """`runs` demo materialisations in a row; which checks failed on each."""
    env = {**os.environ, "COLLOBENCH_HOME": str(home), "COLLOBENCH_MLFLOW": "0"}
    env.pop("DAGSTER_HOME", None)
    flagged: list[dict[str, Any]] = []
    durations = []
    for index in range(runs):
        started = time.monotonic()
        completed = subprocess.run(
            [sys.executable, "-m", "bench_defs.demo", "--partition", partition],
            cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=900,
        )  # fmt: skip
        durations.append(time.monotonic() - started)
        if completed.returncode != 0:
            raise RuntimeError(f"demo run {index} failed: {completed.stderr[-2000:]}")
        failed = re.findall(r"^check (regression|reproducibility): (.*)$", completed.stdout, re.M)
        checks = re.search(r"^checks: (.*)$", completed.stdout, re.M)
        log(SCRIPT, f"A/A run {index + 1}/{runs}: {checks.group(1) if checks else '?'}")
        if failed:
            flagged.append({"run": index + 1, "failed": dict(failed)})
    median_s = round(float(np.median(durations)), 1) if durations else None
    return {"runs": runs, "flagged_runs": len(flagged), "flagged": flagged,
            "run_s_median": median_s}  # fmt: skip


def measured_spreads(db_path: Path) -> tuple[dict[str, dict[str, float | None]], int]:
    """Per metric: the pooled between-run sd of the log figure (percent), raw and calibrated;
    and the number of series a run has (the family the false-alarm rate covers)."""
    from analysis.warehouse.reader import connect_read_only

    connection = connect_read_only(db_path)
    try:
        rows = connection.execute(
            "SELECT trial, phase, pipeline, metric, run_id, value, calibration_score "
            "FROM run_history ORDER BY run_seq"
        ).df()
    finally:
        connection.close()
    family = int(rows.groupby("run_id").size().max())
    spreads: dict[str, dict[str, float | None]] = {}
    for metric, frame in rows.groupby("metric"):
        raw, calibrated = [], []
        for _, series in frame.groupby(["trial", "phase", "pipeline"]):
            ok = series[(series["value"] > 0) & np.isfinite(series["value"])]
            logs = np.log(ok["value"].to_numpy(dtype=float))
            raw.append(logs)
            speed = ok["calibration_score"].to_numpy(dtype=float)
            if np.all(speed > 0):
                # latency scales with 1 / speed, throughput with speed (when it is bounded by
                # the machine): a figure as it would read at the history's typical speed
                sign = 1.0 if str(metric) != "queries_per_s" else -1.0
                calibrated.append(logs + sign * (np.log(speed) - np.log(speed).mean()))
        spreads[str(metric)] = {"raw": _pooled_pct(raw), "calibrated": _pooled_pct(calibrated)}
    return spreads, family


def _pooled_pct(series: list[np.ndarray]) -> float | None:
    usable = [s for s in series if len(s) >= 2]
    df = sum(len(s) - 1 for s in usable)
    if df == 0:
        return None
    squares = sum(float(np.sum((s - s.mean()) ** 2)) for s in usable)
    return round(100 * math.sqrt(squares / df), 2)


def simulate(sd: dict[str, float], family: int, histories: int, seed: int = 0) -> dict[str, Any]:
    """The simulated figures: A/A flags, step detection, MDE, outliers (see the module doc)."""
    rng = np.random.default_rng(seed)
    metrics = list(sd)
    per_metric = max(1, family // len(metrics))
    flagged_runs = 0
    for _ in range(histories):
        flagged = np.zeros(RUNS, dtype=bool)
        for metric in metrics:
            for _ in range(per_metric):
                values = np.exp(rng.normal(0, sd[metric], RUNS))
                flagged |= [
                    j.verdict in (REGRESSED, IMPROVED)
                    for j in judge_history(values, metric == "queries_per_s", family)
                ]
        flagged_runs += int(flagged.sum())
    p50 = sd["latency_p50_ms"]
    return {
        "aa_runs_flagged": round(flagged_runs / (histories * RUNS), 4),
        "steps": {f"{step}%": _detect(rng, p50, step, family, histories) for step in STEPS_PCT},
        "step_at_the_mde": _detect(rng, p50, None, family, histories),
        "mde_pct_p50_after_12_runs": round(
            float(np.median([_mde(rng, p50, family) for _ in range(200)])), 1
        ),
        "outlier_taken_for_change": {
            f"{family}_metrics": _outliers(rng, p50, family, histories),
            f"{METRICS_ONE_PIPELINE}_metrics": _outliers(rng, p50, METRICS_ONE_PIPELINE, histories),
        },
    }


def _detect(
    rng: np.random.Generator, sd: float, step_pct: float | None, family: int, histories: int
) -> dict[str, float | None]:
    """Steps of `step_pct` (None: each history's own minimal detectable change) after
    BASELINE_RUNS runs: the share found within 3 runs, and after how many on average."""
    found, took = 0, []
    for _ in range(histories):
        logs = rng.normal(0, sd, BASELINE_RUNS + 3)
        step = step_pct if step_pct is not None else _mde_of(logs[:BASELINE_RUNS], family)
        logs[BASELINE_RUNS:] += math.log1p(step / 100)
        judged = judge_history(np.exp(logs), False, family)[BASELINE_RUNS:]
        hits = [i for i, j in enumerate(judged) if j.verdict == REGRESSED]
        if hits:
            found += 1
            took.append(hits[0] + 1)
    return {
        "found_within_3_runs": round(found / histories, 3),
        "runs_to_detect_mean": round(float(np.mean(took)), 2) if took else None,
    }


def _mde(rng: np.random.Generator, sd: float, family: int) -> float:
    return _mde_of(rng.normal(0, sd, BASELINE_RUNS), family)


def _mde_of(logs: np.ndarray, family: int) -> float:
    """The minimal detectable change the history `logs` reports at its last run."""
    return float(judge_history(np.exp(logs), False, family)[-1].mde_pct or math.nan)


def _outliers(rng: np.random.Generator, sd: float, family: int, histories: int) -> float:
    taken = 0
    for _ in range(histories):
        logs = rng.normal(0, sd, RUNS)
        logs[BASELINE_RUNS] += 6 * sd
        judged = judge_history(np.exp(logs), False, family)
        taken += any(j.change_point_index == BASELINE_RUNS for j in judged)
    return round(taken / histories, 3)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10, help="A/A demo runs through Dagster.")
    parser.add_argument("--partition", default="demo", help="The spec (file stem) to run.")
    parser.add_argument("--histories", type=int, default=1000, help="Simulated histories.")
    parser.add_argument("--home", type=Path, default=None, help="Keep the runs here.")
    args = parser.parse_args(argv)
    home = args.home or Path(tempfile.mkdtemp(prefix="collobench-verdicts-"))
    log(SCRIPT, f"A/A: {args.runs} x bench_defs.demo --partition {args.partition} in {home}")
    aa = dagster_aa(args.runs, args.partition, home)  # --runs 0 --home H: H's runs only
    spreads, family = measured_spreads(home / "results.duckdb")
    log(SCRIPT, f"between-run spread (sd %): {spreads}; {family} metrics a run")
    raw = {metric: (value["raw"] or 0.0) / 100 for metric, value in spreads.items()}
    simulated = simulate(raw, family, args.histories)
    result = {
        "benchmark": SCRIPT,
        "code": code_version(),
        "cpus": os.cpu_count(),
        "aa_dagster": aa,
        "between_run_sd_pct": spreads,
        "metrics_per_run": family,
        "simulated": simulated,
        "targets": {"aa_dagster_flagged_at_most": max(1, args.runs // 10), "aa_simulated": 0.1},
        "method": "median of the newest 3 runs against the regime's mean, Student t on logs "
        "with the between-run spread pooled over regimes, Bonferroni over a run's metrics "
        "(analysis/history/change_points.py)",
    }
    print(json.dumps(result), flush=True)
    met = (
        aa["flagged_runs"] <= max(1, args.runs // 10)
        and simulated["aa_runs_flagged"] <= 0.10
        and (simulated["step_at_the_mde"]["found_within_3_runs"] or 0) >= 0.90
    )
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())

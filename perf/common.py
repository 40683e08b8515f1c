"""Helpers shared by the benchmark scripts in `perf/` (stage_overhead, loadgen_accuracy, launch).

What it holds:
- `log`: progress on stderr, prefixed with the calling script's name (`[launch] ...`).
- `pct` / `pct_or_none`: a percentile of an array, NaN or None when the array is empty;
  `us`: nanoseconds in microseconds; `rounded`: to 2 decimals unless told.
- `BackgroundLoad`: the CPU other processes used over a `with` block (the machine is shared).
- `wait_for_quiet`: wait, up to a bound, for a quiet second before measuring.
- `code_version`: the commit measured and whether `stages/` had uncommitted changes.
- `report_header`: the first keys of every script's JSON line (benchmark, mode, machine, code).
- `PeriodicSampler`: a `with` block that reads a value every period in a background thread.
- `run_recorded_table`: run a pipeline in this process with Parquet recording on and read its
  query rows back.

`perf/` is a package: the scripts are run from the repository root as `python -m perf.<name>`
and import this module as `perf.common`.
"""

from __future__ import annotations

import gc
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Self

import numpy as np
import psutil
import pyarrow as pa

from stages.rundir.tables import read_table
from stages.runtime.driver import PhaseResult, run_pipeline
from stages.runtime.loadgen.timing import set_timer_slack_ns
from stages.spec.models import PipelineSpec

REPO_ROOT = Path(__file__).resolve().parent.parent


def log(script: str, message: str) -> None:
    """Progress line on stderr, prefixed `[script]`."""
    print(f"[{script}] {message}", file=sys.stderr, flush=True)


def pct(values: np.ndarray, q: float) -> float:
    """The `q`-th percentile of `values`; NaN when there are none."""
    return float(np.percentile(values, q)) if values.size else float("nan")


def spread(values: list[float], digits: int = 2) -> dict[str, float]:
    """Median and range of per-round figures: how every paired-rounds figure is reported."""
    ordered = sorted(values)
    middle = len(ordered) // 2
    median = ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2
    return {
        "median": round(median, digits),
        "min": round(ordered[0], digits),
        "max": round(ordered[-1], digits),
    }


def rounded(value: float, digits: int = 2) -> float:
    """`value` to `digits` decimals (2 unless told)."""
    return round(value, digits)


def us(value_ns: float | None, digits: int = 1) -> float | None:
    """Nanoseconds in microseconds, rounded; None stays None."""
    return None if value_ns is None else round(value_ns / 1e3, digits)


def pct_or_none(values: np.ndarray, q: float) -> float | None:
    """The `q`-th percentile of `values`; None when there are none."""
    return float(np.percentile(values, q)) if values.size else None


class BackgroundLoad:
    """CPU used by other processes (not this one nor its waited-for children) over a window, in
    percent of the whole machine. The machine is shared: a noisy neighbour shows here."""

    def __init__(self) -> None:
        self.pct = 0.0
        self._process = psutil.Process()

    def _snapshot(self) -> tuple[float, float, float]:
        machine = psutil.cpu_times()
        busy = sum(machine) - machine.idle - machine.iowait
        ours = self._process.cpu_times()
        own = ours.user + ours.system + ours.children_user + ours.children_system
        return time.monotonic(), busy, own

    def __enter__(self) -> BackgroundLoad:
        self._start = self._snapshot()
        return self

    def __exit__(self, *exc: object) -> None:
        wall1, busy1, own1 = self._snapshot()
        wall0, busy0, own0 = self._start
        capacity = max(1e-9, (wall1 - wall0) * (psutil.cpu_count() or 1))
        self.pct = round(max(0.0, (busy1 - busy0) - (own1 - own0)) / capacity * 100, 1)


def code_version() -> dict[str, Any]:
    """The commit measured, and whether `stages/` had uncommitted changes (read-only git)."""

    def git(*arguments: str) -> str:
        return subprocess.run(
            ["git", *arguments], cwd=REPO_ROOT, capture_output=True, text=True, timeout=10
        ).stdout.strip()

    try:
        return {
            "commit": git("rev-parse", "--short", "HEAD") or None,
            "stages_dirty": bool(git("status", "--porcelain", "--", "stages")),
        }
    except (OSError, subprocess.SubprocessError):
        return {"commit": None, "stages_dirty": None}


def report_header(
    benchmark: str, mode: str, waited_s: float, background: dict[str, float]
) -> dict[str, Any]:
    """The keys each script's JSON line starts with, in this order: what ran, in which mode, on
    how many CPUs, at which commit, and how busy the machine was."""
    return {
        "benchmark": benchmark,
        "mode": mode,
        "cpus": os.cpu_count(),
        "code": code_version(),
        "waited_for_quiet_s": waited_s,
        "background_cpu_pct": background,
    }


def wait_for_quiet(script: str, max_wait_s: float, threshold_pct: float = 10.0) -> float:
    """Wait (at most `max_wait_s`) for a 1 s window in which other processes use less than
    `threshold_pct` of the machine; returns the seconds waited. Logs as `script`."""
    started = time.monotonic()
    while time.monotonic() - started < max_wait_s:
        with BackgroundLoad() as load:
            time.sleep(1.0)
        if load.pct < threshold_pct:
            break
        log(script, f"machine busy ({load.pct}% used by other processes); waiting")
    return round(time.monotonic() - started, 1)


def run_recorded_table(
    script: str, spec: PipelineSpec, run_dir: Path, slack_ns: int
) -> tuple[PhaseResult, pa.Table]:
    """Run `spec` in this process with Parquet recording into `run_dir`, with the timer slack
    set to `slack_ns` first (the stage threads inherit it); return the result and the recorded
    `queries` table. A status other than ok is logged as `script`."""
    set_timer_slack_ns(slack_ns)
    gc.collect()
    keys = {"run_id": "perf", "trial": 0, "phase": "solo", "pipeline": spec.name}
    result, _recorder = run_pipeline(spec, run_dir=run_dir, keys=keys)
    if result.status != "ok":
        log(script, f"{spec.name}: status {result.status}: {result.error}")
    return result, read_table(run_dir, "queries")


class PeriodicSampler:
    """Inside a `with` block, appends `(time.monotonic_ns(), read())` to `samples` every
    `period_s` in a background daemon thread named `name` (first sample at once)."""

    def __init__(self, read: Callable[[], float], period_s: float, name: str) -> None:
        self.period_s = period_s
        self.samples: list[tuple[int, float]] = []
        self._read = read
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name=name, daemon=True)

    def _loop(self) -> None:
        while not self._stop.is_set():
            self.samples.append((time.monotonic_ns(), self._read()))
            self._stop.wait(self.period_s)

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

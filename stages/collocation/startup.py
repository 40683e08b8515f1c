"""The run's start-up breakdown, the manifest's `startup`: seconds from the process start (the
`collobench` command's exec; the launcher's own start when no process start is given, as in
Dagster and capacity probes) to each step before load flows: command ready (imports done),
spec loaded, launcher started, environment probed, then per phase the workers spawned, ready,
calibrated and started together, and the first measured (post-warm-up) query of the first
phase, read back from the `queries` table at the end of the run."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from stages.rundir.layout import merged_file

PROCESS_START = "process_start"
LAUNCHER_START = "launcher_start"
PRE_LAUNCH_MARKS = ("cli_ready", "spec_loaded")
"""What a caller measured before handing over (monotonic ns, RunOptions.startup)."""


def process_start_ns() -> int | None:
    """This process's start on the monotonic clock: its start time in /proc/self/stat (clock
    ticks since boot, so to 10 ms) against CLOCK_BOOTTIME; None off Linux."""
    try:
        after_name = Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()
        started_ticks = int(after_name[19])  # field 22 of proc(5): starttime
        age_ns = time.clock_gettime_ns(time.CLOCK_BOOTTIME) - started_ticks * (
            1_000_000_000 // os.sysconf("SC_CLK_TCK")
        )
    except (OSError, ValueError, IndexError, AttributeError):
        return None
    return time.monotonic_ns() - age_ns


class StartupClock:
    """The marks of one run's start-up (monotonic ns), as the launcher collects them."""

    def __init__(self, given: dict[str, int]) -> None:
        """`given`: `process_start` (the origin, when known) and PRE_LAUNCH_MARKS."""
        launcher_ns = time.monotonic_ns()
        process_ns = given.get(PROCESS_START)
        self.origin = PROCESS_START if process_ns is not None else LAUNCHER_START
        self.origin_ns = process_ns if process_ns is not None else launcher_ns
        self.marks: dict[str, int | None] = {name: given.get(name) for name in PRE_LAUNCH_MARKS}
        self.marks["launcher"] = launcher_ns
        self.marks["environment_probed"] = None
        self.marks["first_measured_query"] = None
        self.phases: list[dict[str, Any]] = []

    def phase(self, trial: int, phase: str, pipelines: list[str]) -> dict[str, Any]:
        """A new phase's entry: `spawned`, `ready`, `calibrated`, `started` are set in it."""
        entry: dict[str, Any] = {"trial": trial, "phase": phase, "pipelines": pipelines}
        self.phases.append(entry)
        return entry

    def seconds(self, at_ns: int | None) -> float | None:
        return None if at_ns is None else round((at_ns - self.origin_ns) / 1e9, 3)

    def record(self) -> dict[str, Any]:
        """The manifest's `startup` (stages.rundir.manifest.Startup)."""
        steps = ("spawned", "ready", "calibrated", "started")
        return {
            "origin": self.origin,
            "origin_ns": self.origin_ns,
            **{f"{name}_s": self.seconds(at_ns) for name, at_ns in self.marks.items()},
            "phases": [
                {
                    **{key: entry[key] for key in ("trial", "phase", "pipelines")},
                    **{f"{step}_s": self.seconds(entry.get(step)) for step in steps},
                }
                for entry in self.phases
            ],
        }

    def read_first_measured_query(self, run_dir: Path) -> None:
        """The first phase's earliest measured query (its scheduled time) from `queries`."""
        if not self.phases:
            return
        first = self.phases[0]
        self.marks["first_measured_query"] = first_measured_scheduled_ns(
            run_dir, first["trial"], first["phase"]
        )


def first_measured_scheduled_ns(run_dir: Path, trial: int, phase: str) -> int | None:
    """The earliest `scheduled_ns` of a measured (not warm-up) query of `phase` in `trial`;
    None without one (no queries file, every worker failed)."""
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    path = merged_file(run_dir, "queries")
    if not path.is_file():
        return None
    try:
        table = pq.read_table(
            path,
            columns=["scheduled_ns"],
            filters=[("trial", "=", trial), ("phase", "=", phase), ("warmup", "=", False)],
        )
    except (OSError, ValueError):  # an unreadable table: the loader says so, not this
        return None
    earliest = pc.min(table["scheduled_ns"]).as_py()
    return int(earliest) if earliest is not None else None

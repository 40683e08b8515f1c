"""The energy side of a run: the idle baseline (phase `idle`: the machine sampled with no
pipeline running, so the energy views can subtract idle power from each load window) and
the energy sources the samplers used, which the manifest notes."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from stages.rundir.tables import read_table
from stages.telemetry.sampler_group import SamplerGroup

SAMPLER_READY_TIMEOUT_S = 30.0  # for every sampler's first sample before a phase starts


def measure_idle_baseline(
    samplers: SamplerGroup, idle_s: float, warnings: list[str]
) -> dict[str, Any]:
    """Sample for `idle_s` with no pipeline running; returns the idle window's timeline entry.
    The samplers' warnings join `warnings` as they come (an interrupted run keeps them)."""
    samplers.start(0, "idle", {}, harness_pid=os.getpid())
    warnings += samplers.wait_first_samples(SAMPLER_READY_TIMEOUT_S)
    start_ns = time.monotonic_ns()
    time.sleep(idle_s)
    end_ns = time.monotonic_ns()
    warnings += samplers.stop()
    return {"what": "idle", "trial": 0, "phase": "idle", "start_ns": start_ns, "end_ns": end_ns}


def energy_sources(run_dir: Path) -> dict[str, str | None]:
    """The energy sources the host and GPU samples name, comma-joined (None when none)."""
    sources: dict[str, str | None] = {"gpu_source": None, "host_source": None}
    for table, key in (("host_samples", "host_source"), ("gpu_samples", "gpu_source")):
        try:
            column = read_table(run_dir, table).column("energy_source").to_pylist()
        except (OSError, KeyError, ValueError):
            continue
        sources[key] = ",".join(sorted({value for value in column if value})) or None
    return sources

"""Synthesise run directories at warehouse scale for `analysis_speed.py`, with numpy and pyarrow.

Each run has one trial, two pipelines, a solo phase per pipeline and a collocated phase, so its
queries split into four (phase, pipeline) windows; every query visits a chain of stages once.
Latencies are log-normal, a few queries fail or are dropped, the first 2% of each window are
warm-up, and host and GPU samplers tick every 100 ms over each phase, so every view has rows.
The files follow the run-directory contract (stages.rundir.tables.SCHEMAS), written merged
(`<table>.parquet`) as a finished run leaves them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from stages.rundir.tables import SCHEMAS

PIPELINES = ("vision", "text")
RATE_QPS = 1_000.0
SAMPLE_PERIOD_NS = 100_000_000
WARMUP_SHARE = 0.02
PHASE_GAP_NS = 2_000_000_000


def _table(name: str, count: int, columns: dict[str, object]) -> pa.Table:
    """A table of the contract's schema; columns not given are all NULL."""
    schema = SCHEMAS[name]
    data = {
        field.name: columns[field.name] if field.name in columns else pa.nulls(count, field.type)
        for field in schema
    }
    return pa.Table.from_pydict(data, schema)


def _constant(value: object, count: int) -> pa.Array:
    return pa.array(np.full(count, value)) if value is not None else pa.nulls(count)


def synthesise_run(
    root: Path, run_number: int, queries_per_run: int, stages_per_query: int, seed: int
) -> Path:
    """Write one run directory under `root`; returns it."""
    rng = np.random.default_rng(seed + run_number)
    run_id = f"20260101-{run_number:06d}-synthetic"
    run_dir = root / run_id
    run_dir.mkdir(parents=True, exist_ok=True)
    windows = [("solo", name) for name in PIPELINES] + [("collocated", n) for n in PIPELINES]
    per_window = queries_per_run // len(windows)
    parts: dict[str, list[pa.Table]] = {name: [] for name in TABLES}
    phase_start_ns = 10_000_000_000
    for phase, pipeline in windows:
        window = Window(run_id, phase, pipeline, phase_start_ns)
        queries, events, last_scheduled_ns = _window_queries(
            rng, window, per_window, stages_per_query
        )
        phase_end_ns = last_scheduled_ns + 50_000_000
        host, gpu = _window_samples(rng, window, phase_end_ns)
        for name, table in zip(TABLES, (queries, events, host, gpu), strict=True):
            parts[name].append(table)
        phase_start_ns = phase_end_ns + PHASE_GAP_NS
    for name, tables in parts.items():
        pq.write_table(pa.concat_tables(tables), run_dir / f"{name}.parquet")
    (run_dir / "manifest.json").write_text(json.dumps(_manifest(run_id, stages_per_query)))
    return run_dir


TABLES = ("queries", "stage_events", "host_samples", "gpu_samples")
"""The tables a synthesised run writes, in the order each window makes them."""


@dataclass(frozen=True)
class Window:
    """One (phase, pipeline) window of a synthesised run, from its phase's start."""

    run_id: str
    phase: str
    pipeline: str
    phase_start_ns: int


def _window_queries(
    rng: np.random.Generator, window: Window, count: int, stages_per_query: int
) -> tuple[pa.Table, pa.Table, int]:
    """A window's `queries` and `stage_events` rows, and its last scheduled time."""
    slowdown = 1.3 if window.phase == "collocated" else 1.0
    gaps_ns = rng.exponential(1e9 / RATE_QPS, count)
    scheduled = (window.phase_start_ns + np.cumsum(gaps_ns)).astype(np.int64)
    issue_delay = rng.integers(2_000, 60_000, count)
    service_ns = (rng.lognormal(np.log(0.8e6 * slowdown), 0.4, (count, stages_per_query))).astype(
        np.int64
    )
    queue_ns = rng.integers(1_000, 200_000, (count, stages_per_query))
    issued = scheduled + issue_delay
    status = np.where(rng.random(count) < 0.002, "error", "ok").astype("<U7")
    status[rng.random(count) < 0.001] = "dropped"
    steps = np.cumsum(queue_ns + service_ns, axis=1)
    completed = pa.array(issued + steps[:, -1], pa.int64(), mask=status == "dropped")
    common = {
        "run_id": _constant(window.run_id, count),
        "trial": _constant(0, count),
        "phase": _constant(window.phase, count),
        "pipeline": _constant(window.pipeline, count),
    }
    query_ids = np.arange(count, dtype=np.int64)
    queries = _table(
        "queries",
        count,
        {
            **common,
            "query_id": query_ids,
            "scheduled_ns": scheduled,
            "issued_ns": issued,
            "completed_ns": completed,
            "status": status,
            "samples": _constant(1, count),
            "warmup": np.arange(count) < int(count * WARMUP_SHARE),
        },
    )
    sent = status != "dropped"
    visits = int(sent.sum()) * stages_per_query
    started = issued[sent, None] + steps[sent] - service_ns[sent]
    enqueued = started - queue_ns[sent]
    finished = started + service_ns[sent]
    event_common = {key: _constant(value[0].as_py(), visits) for key, value in common.items()}
    stage_names = np.array([f"stage_{index}" for index in range(stages_per_query)])
    events = _table(
        "stage_events",
        visits,
        {
            **event_common,
            "query_id": np.repeat(query_ids[sent], stages_per_query),
            "stage": np.tile(stage_names, int(sent.sum())),
            "visit": _constant(0, visits),
            "enqueued_ns": enqueued.ravel(),
            "started_ns": started.ravel(),
            "finished_ns": finished.ravel(),
            "status": np.repeat(status[sent], stages_per_query),
        },
    )
    return queries, events, int(scheduled[-1])


def _window_samples(
    rng: np.random.Generator, window: Window, phase_end_ns: int
) -> tuple[pa.Table, pa.Table]:
    """A window's `host_samples` and `gpu_samples` rows, a tick every SAMPLE_PERIOD_NS."""
    ticks = np.arange(window.phase_start_ns, phase_end_ns, SAMPLE_PERIOD_NS, dtype=np.int64)
    tick_count = len(ticks)
    sampler_common = {
        "run_id": _constant(window.run_id, tick_count),
        "trial": _constant(0, tick_count),
        "phase": _constant(window.phase, tick_count),
        "pipeline": pa.nulls(tick_count, pa.string()),
        "ts_ns": ticks,
    }
    host = _table(
        "host_samples",
        tick_count,
        {
            **sampler_common,
            "scope": _constant("host", tick_count),
            "cpu_util": rng.uniform(40, 90, tick_count),
            "rss_mib": _constant(900.0, tick_count),
            "energy_j": np.cumsum(rng.uniform(4, 6, tick_count)),
            "energy_source": _constant("rapl", tick_count),
        },
    )
    gpu = _table(
        "gpu_samples",
        tick_count,
        {
            **sampler_common,
            "gpu": _constant(0, tick_count),
            "uuid": _constant("GPU-synthetic", tick_count),
            "power_w": rng.uniform(150, 250, tick_count),
            "energy_j": np.cumsum(rng.uniform(15, 25, tick_count)),
            "energy_source": _constant("nvml_counter", tick_count),
            "sm_util": rng.uniform(30, 95, tick_count),
        },
    )
    return host, gpu


def _manifest(run_id: str, stages_per_query: int) -> dict[str, object]:
    chain = [f"stage_{index}" for index in range(stages_per_query)]
    return {
        "format_version": 1,
        "run_id": run_id,
        "name": "synthetic",
        "spec": {
            "name": "synthetic",
            "pipelines": [
                {
                    "name": name,
                    "loadgen": {"type": "server", "rate": RATE_QPS},
                    "stages": [{"id": stage, "type": "noop"} for stage in chain],
                }
                for name in PIPELINES
            ],
        },
        "spec_hash": "0" * 64,
        "started_at": "2026-01-01T00:00:00+00:00",
        "ended_at": "2026-01-01T00:02:00+00:00",
        "status": "ok",
    }

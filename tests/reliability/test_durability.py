"""Durability: a worker SIGKILLed at a random moment keeps every event older than one flush
interval on disk, loadable into the warehouse (docs/design.md#durability-and-the-soak: rows
reach the writer at least once a second or every 64k rows, so a crash loses at most that).

Method: each pipeline issues at a constant rate into one noop stage, so query `i` is due at
`start_ns + i / rate` and ends microseconds later; the launcher's timeline gives `start_ns`.
A killer thread SIGKILLs the worker at a seeded random moment `T` (monotonic clock, shared with
the worker). After the run, the run directory is loaded into a real DuckDB file with the
loader, and every query due before `T - FLUSH_PERIOD_NS - FLUSH_SLACK_NS` must have both its
`queries` row and its `stage_events` row there. Several pipelines of one run are killed at
their own moments, so 20 kills cost four launches.
"""

from __future__ import annotations

import json
import os
import random
import signal
import statistics
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import duckdb
import pytest

from analysis.warehouse.loader import load_runs
from stages.collocation.launcher import ProgressEvent
from stages.runtime.recorder import FLUSH_PERIOD_NS
from tests.helpers import run
from tests.reliability import figures

# Every test launches real runs (the 20-kill one about 40 s): `pytest -m "not slow"` skips them.
pytestmark = pytest.mark.slow

RATE_PER_S = 200
DURATION_S = 3.2
# A row is handed to the writer at the first completion after its buffer's deadline (within
# 1 / RATE_PER_S here) and is on disk once the writer has converted it and written and renamed
# one zstd Parquet chunk (~10 ms alone; several times that when five workers and a sampler share
# two cores). 250 ms covers both with room for a loaded machine; an event held back by the
# recorder for a whole extra flush period would still be caught.
FLUSH_SLACK_NS = 250_000_000
KILL_WINDOW_S = (0.3, 2.9)  # after the first issue: spans about three flush periods
SEED = 12


@dataclass
class Kill:
    """One planned SIGKILL of one pipeline's worker."""

    pipeline: str
    offset_s: float  # after the pipeline's first issue
    killed_ns: int | None = None
    pid: int | None = None
    started: bool = False
    thread: threading.Thread | None = field(default=None, repr=False)


def durability_spec(kills: list[Kill]) -> dict[str, Any]:
    """One constant-rate noop pipeline per planned kill, no solo baselines."""
    return {
        "name": "durability",
        "collocation": {"solo_baselines": False},
        "telemetry": {"host": {"period_ms": 200}},
        "pipelines": [
            {
                "name": kill.pipeline,
                "loadgen": {
                    "type": "constant",
                    "rate": RATE_PER_S,
                    "duration_s": DURATION_S,
                    "warmup_queries": 0,
                    "timeout_s": 30,
                },
                "stages": [{"id": "work", "type": "noop"}],
            }
            for kill in kills
        ],
    }


def _kill_at(kill: Kill, pid: int, at_ns: int) -> None:
    """Sleep until `at_ns`, note the moment, SIGKILL the worker."""
    delay_ns = at_ns - time.monotonic_ns()
    if delay_ns > 0:
        time.sleep(delay_ns / 1e9)
    kill.killed_ns = time.monotonic_ns()
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:  # already ended: no kill happened
        kill.killed_ns = None


def run_with_kills(kills: list[Kill], tmp_path: Path, doc: dict[str, Any] | None = None) -> Any:
    """Launch `doc` (default: `durability_spec(kills)`) and SIGKILL each pipeline's worker at
    its planned moment."""
    by_name = {kill.pipeline: kill for kill in kills}

    def on_progress(event: ProgressEvent) -> None:
        kill = by_name.get(event.pipeline or "")
        pid, first_issue_ns = event.data.get("pid"), event.data.get("first_issue_ns")
        if event.kind != "progress" or kill is None or kill.started or not pid:
            return
        if not first_issue_ns:
            return
        kill.started = True
        kill.pid = pid
        at_ns = first_issue_ns + int(kill.offset_s * 1e9)
        kill.thread = threading.Thread(target=_kill_at, args=(kill, pid, at_ns), daemon=True)
        kill.thread.start()

    result = run(doc or durability_spec(kills), tmp_path, progress=on_progress)
    for kill in kills:
        if kill.thread is not None:
            kill.thread.join(10)
    return result


@dataclass(frozen=True)
class KillOutcome:
    """What one kill cost: events older than the flush interval lost (must be 0), events
    younger than it lost (expected: up to about one interval of them), the oldest loss's age."""

    label: str
    lost_old: int
    lost_young: int
    oldest_lost_age_ms: float | None


def check_kill(
    warehouse: duckdb.DuckDBPyConnection, run_id: str, start_ns: int, kill: Kill
) -> KillOutcome:
    """Compare the queries due before the kill with what the warehouse holds for them."""
    assert kill.killed_ns is not None
    label = f"{kill.pipeline} killed {kill.offset_s:.3f} s after its first issue"
    present: dict[str, set[int]] = {}
    for table, time_column in (("queries", "completed_ns"), ("stage_events", "finished_ns")):
        rows = warehouse.execute(
            f"SELECT query_id, {time_column} FROM {table} "
            "WHERE run_id = ? AND pipeline = ? AND status = 'ok'",
            [run_id, kill.pipeline],
        ).fetchall()
        # Nothing after the kill can have been written by the dead worker.
        assert all(ended_ns < kill.killed_ns for _, ended_ns in rows), (label, table)
        present[table] = {query_id for query_id, _ in rows}
    gap_ns = 1e9 / RATE_PER_S
    due_before_kill = int((kill.killed_ns - start_ns) / gap_ns) + 1
    cutoff_ns = kill.killed_ns - FLUSH_PERIOD_NS - FLUSH_SLACK_NS
    lost_old = lost_young = 0
    oldest_lost_ns: int | None = None
    for query_id in range(due_before_kill):
        due_ns = start_ns + int(query_id * gap_ns)
        missing = sum(query_id not in ids for ids in present.values())
        if not missing:
            continue
        oldest_lost_ns = due_ns if oldest_lost_ns is None else oldest_lost_ns
        if due_ns < cutoff_ns:
            lost_old += missing
        else:
            lost_young += missing
    age_ms = None if oldest_lost_ns is None else (kill.killed_ns - oldest_lost_ns) / 1e6
    return KillOutcome(label, lost_old, lost_young, age_ms)


def kill_rounds(rounds: int, per_round: int, seed: int, tmp_path: Path) -> list[KillOutcome]:
    """`rounds` launches of `per_round` pipelines, each worker killed at a seeded random moment;
    returns what each kill lost, after loading every run into one DuckDB warehouse."""
    rng = random.Random(seed)
    outcomes: list[KillOutcome] = []
    db = tmp_path / "warehouse.duckdb"
    for round_index in range(rounds):
        kills = [
            Kill(f"p{round_index}_{n}", round(rng.uniform(*KILL_WINDOW_S), 3))
            for n in range(per_round)
        ]
        result = run_with_kills(kills, tmp_path / f"round{round_index}")
        manifest = json.loads((result.run_dir / "manifest.json").read_text())
        (phase,) = [entry for entry in manifest["timeline"] if entry["what"] == "phase"]
        (loaded,) = load_runs([result.run_dir], db, notify=lambda message: None)
        assert loaded.run_id == result.run_id
        with duckdb.connect(str(db), read_only=True) as warehouse:
            for kill in kills:
                plan = f"{kill.pipeline} at +{kill.offset_s} s (seed {seed})"
                assert kill.killed_ns is not None, f"{plan}: the worker ended before its kill"
                outcome = next(o for o in result.results if o.pipeline == kill.pipeline)
                assert outcome.status == "failed", plan
                assert outcome.error == "worker killed by SIGKILL (possibly the OOM killer)"
                outcomes.append(check_kill(warehouse, result.run_id, phase["start_ns"], kill))
    return outcomes


def report(outcomes: list[KillOutcome], key: str) -> None:
    """Count the losses into the suite's figures."""
    young = [o.lost_young for o in outcomes]
    figures.count("events_lost_older_than_flush", key, sum(o.lost_old for o in outcomes))
    figures.count("faults_injected", f"{key}_durability", len(outcomes))
    figures.count("faults_survived", f"{key}_durability", sum(not o.lost_old for o in outcomes))
    figures.record(
        "durability",
        key,
        {
            "kills": len(outcomes),
            "flush_interval_ms": FLUSH_PERIOD_NS / 1e6,
            "slack_ms": FLUSH_SLACK_NS / 1e6,
            "events_lost_younger_than_flush": {
                "min": min(young),
                "median": statistics.median(young),
                "max": max(young),
            },
            "oldest_lost_event_age_ms_max": max(
                (o.oldest_lost_age_ms for o in outcomes if o.oldest_lost_age_ms is not None),
                default=None,
            ),
        },
    )


@pytest.mark.spawns
def test_twenty_random_worker_kills_lose_nothing_older_than_one_flush(tmp_path: Path) -> None:
    outcomes = kill_rounds(rounds=4, per_round=5, seed=SEED, tmp_path=tmp_path)
    report(outcomes, "worker_sigkill")
    assert len(outcomes) == 20
    lost = [o for o in outcomes if o.lost_old]
    assert not lost, lost
    # The kills really hit live, recording workers: most lose their unflushed tail.
    assert sum(o.lost_young > 0 for o in outcomes) >= 10, outcomes


@pytest.mark.soak
@pytest.mark.timeout(1200)  # 20 launches of five workers: ~4 min, more on a loaded machine
def test_a_hundred_random_worker_kills_lose_nothing_older_than_one_flush(
    tmp_path: Path,
) -> None:
    outcomes = kill_rounds(rounds=20, per_round=5, seed=SEED + 1, tmp_path=tmp_path)
    report(outcomes, "worker_sigkill_soak")
    lost = [o for o in outcomes if o.lost_old]
    assert not lost, lost


HANG_AT_QUERY = 100  # due 0.5 s after the first issue at 200 queries/s


@pytest.mark.spawns
def test_a_stage_stuck_in_a_long_call_does_not_hold_its_earlier_rows(tmp_path: Path) -> None:
    """A stage thread inside one long call cannot hand its rows over; the writer thread takes
    them itself once they are overdue. Here the stage serves queries 0-99 in microseconds, then
    hangs on query 100 (a 3 s generation would do the same), and the worker is SIGKILLed 2 s
    later, mid-call: all 100 earlier queries must be on disk in both tables."""
    kill = Kill("stuck", offset_s=2.5)
    doc = durability_spec([kill])
    doc["pipelines"][0]["stages"] = [
        {"id": "work", "type": "fail", "config": {"at_query": HANG_AT_QUERY, "mode": "hang"}}
    ]
    result = run_with_kills([kill], tmp_path, doc)
    assert kill.killed_ns is not None, "the worker ended before its kill"
    (outcome,) = result.results
    assert outcome.error == "worker killed by SIGKILL (possibly the OOM killer)"
    db = tmp_path / "warehouse.duckdb"
    load_runs([result.run_dir], db, notify=lambda message: None)
    with duckdb.connect(str(db), read_only=True) as warehouse:
        for table in ("queries", "stage_events"):
            ids = warehouse.execute(
                f"SELECT list(query_id ORDER BY query_id) FROM {table} WHERE status = 'ok'"
            ).fetchone()
            assert ids is not None
            assert ids[0] == list(range(HANG_AT_QUERY)), (table, ids[0])
    figures.count("faults_injected", "worker_sigkill_mid_call", 1)
    figures.count("faults_survived", "worker_sigkill_mid_call", 1)

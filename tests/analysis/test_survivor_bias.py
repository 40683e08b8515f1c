"""Finding 1 (survivor bias): queries that did not complete count against the verdict.

A real in-process run: Poisson at 400 q/s into a 5 ms `sleep` stage (capacity ~200 q/s) with
queue_depth 8, so about half the queries are dropped (solo: 100 q/s, a deep queue, none).
Judged by its survivors (the old views) the completed queries' p99 stays under the SLO and the
run read "SLO met"; counting every measured query, with the drops as over-latency, it misses,
and contention shows the drops."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from analysis.reports.early_stopping import early_stopping_percentile, slo_met
from analysis.reports.headline_figures import summarize_run
from analysis.warehouse.loader import load_runs
from analysis.warehouse.reader import run_query
from stages.rundir.tables import merge_parts, read_table
from stages.runtime.driver import run_pipeline
from stages.spec.models import PipelineSpec

# 12 s of real (sleeping) runs: `make check` leaves the module to `make test`.
pytestmark = pytest.mark.slow

# Far above what a completed query can take here (8 queued x 5 ms, plus issuer stalls that
# reached ~70 ms on a loaded CI machine), so only the drops can make the verdict miss.
SLO_MS = 500.0


def overloaded(rate: float, queue_depth: int = 8, duration_s: float = 8) -> dict[str, Any]:
    return {
        "name": "p",
        "loadgen": {
            "type": "server",
            "rate": rate,
            "duration_s": duration_s,
            "warmup_queries": 20,
            "queue_depth": queue_depth,
            "on_full": "drop",
            "timeout_s": 20,
            "slo_ms": SLO_MS,
        },
        "stages": [{"id": "s", "type": "sleep", "config": {"ms": 5}}],
    }


def run_phase(
    run_dir: Path, phase: str, rate: float, queue_depth: int = 8, duration_s: float = 8
) -> None:
    spec = PipelineSpec.model_validate(overloaded(rate, queue_depth, duration_s))
    keys = {"run_id": "survivors", "trial": 0, "phase": phase, "pipeline": "p"}
    run_pipeline(spec, seed=1, run_dir=run_dir, keys=keys)


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Solo at 100 q/s (within capacity), 'collocated' at 400 q/s (overloaded)."""
    folder = tmp_path_factory.mktemp("runs") / "survivors"
    folder.mkdir()
    # The solo phase is the within-capacity baseline: a queue of 8 at 100 q/s dropped queries
    # whenever the issuer or the stage thread stalled 80 ms on a loaded machine (CI saw it).
    # 200 places hold a 2 s stall, 4x the SLO's 500 ms, which a finite p99 must stay under anyway.
    run_phase(folder, "solo", 100, queue_depth=200, duration_s=4)
    # 8 s: the survivors' p99 bound needs 670 completed queries. 4 s gave ~800 at the stage's
    # 200/s, and 538 under a load of 9 on 2 cores (bound None); 8 s holds down to 84/s.
    run_phase(folder, "collocated", 400)
    merge_parts(folder)
    manifest = {"run_id": "survivors", "status": "ok", "spec": {"pipelines": [overloaded(400)]}}
    (folder / "manifest.json").write_text(json.dumps(manifest))
    return folder


def test_dropped_queries_make_the_slo_verdict_miss(run_dir: Path) -> None:
    summary = {row.phase: row for row in summarize_run(run_dir)}
    loaded = summary["collocated"]
    assert loaded.dropped > 0.3 * loaded.measured  # ~49% in the finding
    assert loaded.failed == loaded.measured - loaded.ok
    # The survivors' view of it (what was reported before): completed p99 well under the SLO,
    # and the old ok-only early-stopping bound under it too, so "SLO met".
    assert loaded.completed_p99_ms is not None and loaded.completed_p99_ms < SLO_MS
    queries = read_table(run_dir, "queries").to_pylist()
    completed = [
        (q["completed_ns"] - q["scheduled_ns"]) / 1e6
        for q in queries
        if q["phase"] == "collocated" and q["status"] == "ok" and not q["warmup"]
    ]
    assert len(completed) == loaded.ok
    assert slo_met(completed, SLO_MS)  # the survivors alone pass LoadGen's rule
    survivors_bound = early_stopping_percentile(completed, 0.99).latency
    print(
        f"dropped {loaded.dropped}/{loaded.measured}, completed p99 {loaded.completed_p99_ms:.1f}"
        f" ms, survivors' bound {survivors_bound} ms, verdict p99 {loaded.latency_p99_ms}"
    )
    assert survivors_bound is not None and survivors_bound < SLO_MS
    # Counting every measured query: the verdict p99 is infinite, no finite bound, SLO missed.
    assert loaded.latency_p99_ms == float("inf")
    assert loaded.latency_bound_ms == float("inf")
    assert loaded.slo_verdict == "missed"  # ~half the queries over the SLO: certainly missed
    solo = summary["solo"]
    assert solo.failed == 0
    assert solo.latency_p99_ms is not None and solo.latency_p99_ms < SLO_MS


def test_contention_shows_the_drops(run_dir: Path, tmp_path: Path) -> None:
    db = tmp_path / "w.duckdb"
    load_runs([run_dir], db)
    columns, rows = run_query(db, "SELECT * FROM contention")
    (row,) = [dict(zip(columns, values, strict=True)) for values in rows]
    assert row["solo_failed"] == 0
    assert row["collocated_failed"] > 0
    assert row["p99_slowdown"] == float("inf")  # solo finite, collocated infinite
    assert row["p99_verdict"] == "slower"

"""`accuracy` and `training` views: exact figures on a run built with known numbers (warm-up
and visits outside the measured queries left out), and end to end: digits_cnn under server
load reports its accuracy."""

from __future__ import annotations

import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from analysis.warehouse.loader import load_runs
from tests.analysis.rundirs import MS_NS, RunBuilder, one, rows_of
from tests.analysis.runs import BASE_NS
from tests.paths import REPO


def wilson(correct: int, graded: int, z: float = 1.96) -> tuple[float, float]:
    p = correct / graded
    centre = p + z * z / (2 * graded)
    half = z * math.sqrt(p * (1 - p) / graded + z * z / (4 * graded * graded))
    return (centre - half) / (1 + z * z / graded), (centre + half) / (1 + z * z / graded)


def query(run: RunBuilder, pipeline: str, query_id: int, warmup: bool, status: str = "ok") -> int:
    scheduled = BASE_NS + query_id * 10 * MS_NS
    run.add(
        "queries", 0, "solo", pipeline, query_id=query_id, scheduled_ns=scheduled,
        issued_ns=scheduled, completed_ns=scheduled + MS_NS, status=status, samples=1,
        warmup=warmup,
    )  # fmt: skip
    return scheduled


def event(
    run: RunBuilder, pipeline: str, stage: str, query_id: int, start_ns: int, **extra: object
) -> None:
    run.add(
        "stage_events", 0, "solo", pipeline, query_id=query_id, stage=stage, visit=0,
        enqueued_ns=start_ns, started_ns=start_ns, finished_ns=start_ns + MS_NS,
        status=extra.pop("status", "ok"), **extra,
    )  # fmt: skip


def graded_run(root: Path) -> RunBuilder:
    """Pipeline `c`: 10 warm-up queries (graded 4, 0 right: excluded), 100 measured ones graded
    4 each (3 right for the first 50, 4 after: 350 of 400), one failed visit, and one visit of a
    query id with no queries row (excluded). Pipeline `z`: 10 measured, none right.
    Pipeline `t`: 2 warm-up steps (loss 10), then 20 steps with loss 3.0, 2.9, ... 1.1, whose
    rows are written in reverse order (the view orders by start time)."""
    run = RunBuilder(
        root, "20260105-000000-accuracy", {"c": "server", "z": "server", "t": "closed_loop"}
    )
    for query_id in range(10):
        start = query(run, "c", query_id, warmup=True)
        event(run, "c", "model", query_id, start, graded=4, correct=0)
    for query_id in range(10, 110):
        start = query(run, "c", query_id, warmup=False)
        event(run, "c", "data", query_id, start)
        event(run, "c", "model", query_id, start, graded=4, correct=3 if query_id < 60 else 4)
    start = query(run, "c", 110, warmup=False, status="error")
    event(run, "c", "model", 110, start, status="error")
    event(run, "c", "model", 999, BASE_NS, graded=4, correct=0)  # no queries row
    for query_id in range(10):
        start = query(run, "z", query_id, warmup=False)
        event(run, "z", "model", query_id, start, graded=1, correct=0)
    steps = []
    for query_id in range(22):
        warmup = query_id < 2
        start = query(run, "t", query_id, warmup=warmup)
        loss = 10.0 if warmup else round(3.0 - 0.1 * (query_id - 2), 6)
        steps.append((query_id, start, loss))
    for query_id, start, loss in reversed(steps):
        event(run, "t", "step", query_id, start, loss=loss)
    return run


@pytest.fixture
def accuracy_db(tmp_path: Path, db_path: Path) -> Path:
    load_runs([graded_run(tmp_path / "runs").write()], db_path)
    return db_path


def test_accuracy_counts_graded_samples_of_measured_queries(accuracy_db: Path) -> None:
    row = one(accuracy_db, "SELECT * FROM accuracy WHERE pipeline = 'c'")
    assert (row["phase"], row["stage"]) == ("solo", "model")  # `data` graded nothing: no row
    assert (row["graded_visits"], row["graded"], row["correct"]) == (100, 400, 350)
    assert row["accuracy"] == pytest.approx(0.875)
    low, high = wilson(350, 400)
    assert row["accuracy_ci_low"] == pytest.approx(low)
    assert row["accuracy_ci_high"] == pytest.approx(high)
    assert row["accuracy_ci_low"] < 0.875 < row["accuracy_ci_high"]
    assert row["ci_method"] == "wilson_95"


def test_wilson_interval_at_zero_correct(accuracy_db: Path) -> None:
    """0 of 10: the interval is [0, z^2 / (n + z^2)] = [0, 0.2775], not a zero-width [0, 0]."""
    row = one(accuracy_db, "SELECT * FROM accuracy WHERE pipeline = 'z'")
    assert row["accuracy"] == 0.0
    assert row["accuracy_ci_low"] == pytest.approx(0.0, abs=1e-12)
    assert row["accuracy_ci_high"] == pytest.approx(1.96**2 / (10 + 1.96**2))


def test_training_progress_of_measured_steps(accuracy_db: Path) -> None:
    row = one(accuracy_db, "SELECT * FROM training")
    assert (row["pipeline"], row["stage"], row["steps"]) == ("t", "step", 20)
    assert row["first_loss"] == pytest.approx(3.0)  # the warm-up's 10.0 is left out
    assert row["last_loss"] == pytest.approx(1.1)
    assert row["min_loss"] == pytest.approx(1.1)
    assert row["tail_steps"] == 2  # 10% of 20
    assert row["tail_mean_loss"] == pytest.approx(1.15)
    assert rows_of(accuracy_db, "SELECT * FROM accuracy WHERE pipeline = 't'") == []


SPEC = """
name: digits-accuracy
seed: 3
collocation: {solo_baselines: false}
pipelines:
  - name: classify
    placement: {threads: 1}
    loadgen: {type: server, rate: 150, duration_s: 1.5, warmup_queries: 20, timeout_s: 30}
    stages:
      - {id: data, type: dataset.digits, config: {split: test, batch_size: 2}, outputs: [prep]}
      - id: prep
        type: torchvision.preprocess
        config: {mean: [0.0], std: [1.0]}
        outputs: [model]
      - {id: model, type: torchvision.classify, config: {model: digits_cnn}}
"""


@pytest.mark.spawns
@pytest.mark.slow
def test_digits_cnn_under_load_reports_its_accuracy(tmp_path: Path) -> None:
    spec = tmp_path / "digits.yaml"
    spec.write_text(SPEC)
    out = tmp_path / "runs"
    completed = subprocess.run(
        [sys.executable, "-m", "stages.cli", "run", str(spec), "--no-mlflow", "--out", str(out)],
        cwd=REPO,
        env={**os.environ, "COLLOBENCH_HOME": str(tmp_path / "home")},
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert completed.returncode == 0, completed.stdout[-2000:] + completed.stderr[-2000:]
    [run_dir] = [path.parent for path in out.glob("*/manifest.json")]
    db_path = tmp_path / "results.duckdb"
    load_runs([run_dir], db_path)
    row = one(db_path, "SELECT * FROM accuracy")
    measured = one(db_path, "SELECT count(*) AS n FROM queries WHERE NOT warmup AND status = 'ok'")[
        "n"
    ]
    assert row["stage"] == "model" and row["graded_visits"] == measured > 100
    assert row["graded"] == 2 * measured  # batch 2: every sample graded once
    assert row["accuracy"] >= 0.95
    assert row["accuracy_ci_low"] <= row["accuracy"] <= row["accuracy_ci_high"]

"""Each asset check passes on a good run and fails on a crafted bad one.

One real run of a tiny spec (`collobench run`, module fixture); the bad runs are copies of it
under another run id with one thing broken (manifest fields, or rows rewritten with DuckDB)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import dagster as dg
import duckdb
import pytest

from analysis.warehouse.loader import load_runs
from analysis.warehouse.reader import connect_read_only
from bench_defs.checks import history_checks, warehouse_checks
from tests.dagster.specs import tiny_spec, write_spec
from tests.helpers import REPO


@pytest.fixture(scope="module")
def good_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real run directory of the tiny spec."""
    root = tmp_path_factory.mktemp("checks")
    spec = write_spec(root / "specs", "tiny", tiny_spec())
    env = {**os.environ, "COLLOBENCH_HOME": str(root / "home"), "COLLOBENCH_MLFLOW": "0"}
    completed = subprocess.run(
        [
            *(sys.executable, "-m", "stages.cli", "run", str(spec), "--no-mlflow"),
            *("--out", str(root / "runs"), "--run-id", "good"),
        ],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert completed.returncode == 0, completed.stderr[-2000:]
    return root / "runs" / "good"


def clone(
    source: Path,
    run_id: str,
    manifest_edit: Callable[[dict[str, Any]], None] | None = None,
    select: dict[str, str] | None = None,
) -> Path:
    """A copy of a run under `run_id`; `select` rewrites a table with a SELECT over `t` (the
    original rows, run_id already replaced)."""
    target = source.parent / run_id
    shutil.rmtree(target, ignore_errors=True)
    target.mkdir()
    connection = duckdb.connect()
    for path in source.glob("*.parquet"):
        table = path.stem
        query = (select or {}).get(table, "SELECT * FROM t")
        connection.execute(
            f"CREATE OR REPLACE TEMP TABLE t AS SELECT * REPLACE ('{run_id}' AS run_id) "
            f"FROM read_parquet('{path}')"
        )
        connection.execute(f"COPY ({query}) TO '{target / path.name}' (FORMAT parquet)")
    connection.close()
    manifest = json.loads((source / "manifest.json").read_text())
    manifest["run_id"] = run_id
    if manifest_edit is not None:
        manifest_edit(manifest)
    (target / "manifest.json").write_text(json.dumps(manifest))
    return target


@contextmanager
def warehouse(tmp_path: Path, *run_dirs: Path) -> Iterator[duckdb.DuckDBPyConnection]:
    db = tmp_path / "results.duckdb"
    load_runs(list(run_dirs), db)
    connection = connect_read_only(db)
    try:
        yield connection
    finally:
        connection.close()


@pytest.mark.spawns
def test_validity_passes_on_a_good_run(good_run: Path, tmp_path: Path) -> None:
    with warehouse(tmp_path, good_run) as connection:
        result = warehouse_checks.validity_result(connection, "good")
    assert result.passed, result.metadata["problems"]


def _fail_pipeline(manifest: dict[str, Any]) -> None:
    manifest["status"] = "failed"
    manifest["results"][0].update(status="failed", error="worker died")


def _demand_more_queries(manifest: dict[str, Any]) -> None:
    manifest["spec"]["pipelines"][0]["loadgen"]["min_queries"] = 1_000_000


def _foreign_gpu_process(manifest: dict[str, Any]) -> None:
    manifest["warnings"].append("foreign compute process on the GPU: pid 4242 (python)")


def _probe_inside_the_window(manifest: dict[str, Any]) -> None:
    phase = next(entry for entry in manifest["timeline"] if entry["what"] == "phase")
    middle = (phase["start_ns"] + phase["end_ns"]) // 2
    manifest["timeline"].append(
        {"what": "environment_probe", "start_ns": middle, "end_ns": middle + 1_000_000}
    )


# host samples of the load window's middle 80% removed: a gap of several periods
_GAP = """
SELECT t.* FROM t, (
    SELECT min(scheduled_ns) AS s, max(completed_ns) AS e
    FROM read_parquet('{queries}') WHERE NOT warmup
) AS w
WHERE ts_ns NOT BETWEEN w.s + (w.e - w.s) * 0.1 AND w.e - (w.e - w.s) * 0.1
"""


@pytest.mark.spawns
@pytest.mark.parametrize(
    ("edit", "select", "expected"),
    [
        (_fail_pipeline, None, "worker died"),
        (_demand_more_queries, None, "fewer than the minimum 1000000"),
        (None, {"host_samples": _GAP}, "host telemetry gap of"),
        (_foreign_gpu_process, None, "foreign compute process"),
        (_probe_inside_the_window, None, "environment_probe ran inside the load window"),
    ],
    ids=["failed-pipeline", "min-queries", "telemetry-gap", "foreign-gpu", "start-up-work"],
)
def test_validity_fails_on_a_crafted_bad_run(
    good_run: Path,
    tmp_path: Path,
    edit: Callable[[dict[str, Any]], None] | None,
    select: dict[str, str] | None,
    expected: str,
) -> None:
    select = {
        table: query.format(queries=good_run / "queries.parquet")
        for table, query in (select or {}).items()
    }
    bad = clone(good_run, f"bad-{tmp_path.name}", edit, select)
    with warehouse(tmp_path, bad) as connection:
        result = warehouse_checks.validity_result(connection, bad.name)
    assert not result.passed
    assert expected in str(result.metadata["problems"].value)


# every other arrival moved by 1 ms: another schedule
_RESCHEDULED = """
SELECT * REPLACE (
    CASE WHEN query_id % 2 = 1 THEN scheduled_ns + 1000000 ELSE scheduled_ns END AS scheduled_ns
) FROM t
"""
# A quiet history's run-to-run wobble of latency (factors), then a step to three times as long.
_WOBBLE = (1.02, 0.97, 1.01, 1.035, 0.98, 1.0, 0.975, 1.015)
_SLOWER = 3.0


def _latency_times(factor: float) -> str:
    """Every latency `factor` times as long (completion moved away from the arrival)."""
    return (
        f"SELECT * REPLACE (scheduled_ns + CAST({factor} * (completed_ns - scheduled_ns) "
        "AS BIGINT) AS completed_ns) FROM t"
    )


def _history(
    good_run: Path, tmp_path: Path, factors: list[float], commits: list[str] | None = None
) -> list[Path]:
    """Copies of the good run, one per factor, an hour apart: its history on this machine;
    `commits`, one per run, the git commit each recorded (else the good run's)."""

    def at_hour(hour: int) -> Callable[[dict[str, Any]], None]:
        def edit(manifest: dict[str, Any]) -> None:
            manifest.update(started_at=f"2026-02-01T{hour:02d}:00:00+00:00")
            if commits is not None:
                manifest["environment"].setdefault("git", {})["commit"] = commits[hour]

        return edit

    return [
        clone(good_run, f"h{i:02d}-{tmp_path.name}", at_hour(i), {"queries": _latency_times(f)})
        for i, f in enumerate(factors)
    ]


@pytest.mark.spawns
def test_a_short_history_passes_as_undecided_and_a_rerun_reproduces(
    good_run: Path, tmp_path: Path
) -> None:
    first, twin = _history(good_run, tmp_path, [1.0, 1.0])
    with warehouse(tmp_path, first, twin) as connection:
        regression, reproduced = history_checks.history_results(connection, first.name, twin.name)
        (alone, _) = history_checks.history_results(connection, None, first.name)
    assert regression.passed
    assert regression.description == (
        "undecided: 2 run(s) in the history; a verdict needs 8 on one machine class"
    )
    assert reproduced.passed, reproduced.metadata["problems"]
    assert alone.passed and "1 run(s) in the history" in str(alone.description)


@pytest.mark.spawns
def test_regression_and_reproducibility_fail_on_a_persistent_slowdown(
    good_run: Path, tmp_path: Path
) -> None:
    runs = _history(good_run, tmp_path, [*_WOBBLE, _SLOWER, _SLOWER])
    with warehouse(tmp_path, *runs) as connection:
        quiet = history_checks.history_results(connection, runs[6].name, runs[7].name)
        one_slow = history_checks.history_results(connection, runs[7].name, runs[8].name)
        regression, reproduced = history_checks.history_results(
            connection, runs[8].name, runs[9].name
        )
    assert all(result.passed for result in quiet)
    assert "no regression against the history" in str(quiet[0].description)
    # One slow run is off its band but decides nothing yet; the second makes it a change.
    assert all(result.passed for result in one_slow)
    assert not regression.passed
    description = str(regression.description)
    assert "figure(s) regressed: trial 0 solo " in description, description
    table = str(regression.metadata["verdicts"].value)
    assert "| latency_p50_ms |" in table and "| regressed |" in table
    assert "cause: unexplained" in description
    # one commit throughout: nothing to bisect, an A/B session of the two setups is the hint
    assert "confirm with `collobench ab SPEC_BEFORE SPEC_AFTER`" in description
    assert "collobench bisect" not in description
    assert not reproduced.passed and "regressed" in str(reproduced.description)


@pytest.mark.spawns
def test_a_regression_between_two_commits_names_the_ab_and_bisect_commands(
    good_run: Path, tmp_path: Path
) -> None:
    before, after = "a" * 40, "b" * 40
    commits = [before] * len(_WOBBLE) + [after, after]
    runs = _history(good_run, tmp_path, [*_WOBBLE, _SLOWER, _SLOWER], commits)
    with warehouse(tmp_path, *runs) as connection:
        regression, _ = history_checks.history_results(connection, runs[8].name, runs[9].name)
    assert not regression.passed
    description = str(regression.description)
    assert f"cause: code: commit {before[:12]} -> {after[:12]}" in description, description
    assert description.endswith(
        f"confirm with `collobench ab SPEC --repo . --base {before} --candidate {after}`; "
        f"locate with `collobench bisect SPEC --repo . --good {before} --bad {after}`"
    )


@pytest.mark.spawns
def test_reproducibility_fails_on_another_schedule(good_run: Path, tmp_path: Path) -> None:
    moved = clone(good_run, f"moved-{tmp_path.name}", select={"queries": _RESCHEDULED})
    with warehouse(tmp_path, good_run, moved) as connection:
        _, result = history_checks.history_results(connection, "good", moved.name)
    assert not result.passed
    assert "scheduled arrivals differ" in str(result.metadata["problems"].value)


@pytest.mark.spawns
def test_runs_of_another_spec_are_not_one_history(good_run: Path, tmp_path: Path) -> None:
    other = clone(good_run, f"other-{tmp_path.name}", lambda m: m.update(spec_hash="0" * 64))
    with warehouse(tmp_path, good_run, other) as connection:
        regression, reproduced = history_checks.history_results(connection, "good", other.name)
    assert regression.passed and "1 run(s) in the history" in str(regression.description)
    assert reproduced.passed, reproduced.metadata["problems"]


def test_the_time_between_two_solo_baselines_is_not_a_telemetry_gap(tmp_path: Path) -> None:
    """Two solo baselines (phase 'solo' both) 10 s apart, the host sampled every 100 ms inside
    and around each window but not between them (the samplers restart): no gap. Then a 1 s
    hole inside the second window: one gap, named by its window."""
    from tests.analysis.rundirs import MS_NS, SECOND_NS, RunBuilder

    def build(run_id: str, hole: tuple[int, int] | None) -> Path:
        run = RunBuilder(tmp_path, run_id, {"a": "server", "b": "server"})
        for pipeline, start_ns in (("a", 100 * SECOND_NS), ("b", 120 * SECOND_NS)):
            run.uniform_queries(0, "solo", pipeline, 100, 10 * SECOND_NS, start_ns)
            for tick in range(-5, 106):
                ts_ns = start_ns + tick * 100 * MS_NS
                if hole and pipeline == "b" and hole[0] <= ts_ns - start_ns < hole[1]:
                    continue
                run.add("host_samples", 0, "solo", None, ts_ns=ts_ns, scope="host", cpu_util=1.0)
        return run.write()

    with warehouse(tmp_path, build("20260101-000000-apart", None)) as connection:
        problems = warehouse_checks.validity_problems(connection, "20260101-000000-apart")
    assert not [problem for problem in problems if "telemetry gap" in problem], problems
    with warehouse(
        tmp_path / "hole", build("20260101-000000-hole", (2 * SECOND_NS, 3 * SECOND_NS))
    ) as connection:
        problems = warehouse_checks.validity_problems(connection, "20260101-000000-hole")
    gaps = [problem for problem in problems if "telemetry gap" in problem]
    assert gaps == [
        "trial 0 solo b: host telemetry gap of 1100 ms in the load window "
        "(period 100 ms, allowed 3 periods)"
    ], problems


# every query six times over under new ids: enough measured queries for LoadGen's rule (459)
_SIX_TIMES = """
SELECT t.* REPLACE (t.query_id + r.copy * 1000000 AS query_id) FROM t, range(6) AS r(copy)
"""


def _slo_run(good_run: Path, run_id: str, slo_ms: float, select: dict[str, str] | None) -> Path:
    """A clone of the good run whose spec sets `slo_ms`, its results' figures and verdicts
    recomputed as the launcher does at each phase end (the CLI's summariser)."""
    from stages.cli.wiring import summarize_phase

    def set_slo(manifest: dict[str, Any]) -> None:
        manifest["spec"]["pipelines"][0]["loadgen"]["slo_ms"] = slo_ms

    run_dir = clone(good_run, run_id, set_slo, select)
    manifest = json.loads((run_dir / "manifest.json").read_text())
    for result in manifest["results"]:
        figures, _ = summarize_phase(run_dir, result["trial"], result["phase"])
        mine = figures[result["pipeline"]]
        result.update(summary=mine.metrics, slo_verdict=mine.slo_verdict)
    (run_dir / "manifest.json").write_text(json.dumps(manifest))
    return run_dir


@pytest.mark.spawns
@pytest.mark.parametrize(
    ("slo_ms", "select", "verdict", "passed", "expected"),
    [
        (1e-6, None, "missed", False, "1 SLO(s) missed: trial 0 solo p: missed"),
        (1e6, None, "undecided", True, "none missed; 1 undecided"),
        (1e6, {"queries": _SIX_TIMES}, "met", True, "every SLO met"),
    ],
    ids=["missed", "undecided", "met"],
)
def test_slo_check_warns_on_a_missed_slo_and_lists_undecided_ones(
    good_run: Path,
    tmp_path: Path,
    slo_ms: float,
    select: dict[str, str] | None,
    verdict: str,
    passed: bool,
    expected: str,
) -> None:
    """Every query over a 1 ns SLO: missed (a warning). None over a 1000 s SLO in ~100
    queries: too few to prove it, undecided (listed, passes). Six times the queries: met."""
    run_dir = _slo_run(good_run, f"slo-{tmp_path.name}", slo_ms, select)
    with warehouse(tmp_path, run_dir) as connection:
        result = warehouse_checks.slo_result(connection, run_dir.name)
    assert (result.passed, result.severity) == (passed, dg.AssetCheckSeverity.WARN)
    assert str(result.description).startswith(expected), result.description
    assert result.metadata[verdict].value == 1
    assert f"trial 0 solo p: {verdict} (" in str(result.metadata["verdicts"].value)


@pytest.mark.spawns
def test_slo_check_passes_a_run_without_an_slo(good_run: Path, tmp_path: Path) -> None:
    with warehouse(tmp_path, good_run) as connection:
        result = warehouse_checks.slo_result(connection, "good")
    assert result.passed and result.description == "no pipeline of this run has an SLO"

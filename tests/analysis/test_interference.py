"""The interference matrix over subset phases (`collocation.subsets`): `contention` keyed by
phase, `interference` with one row per (pipeline, co-runner set), load windows for every phase,
and `energy_comparison` still solo vs the full collocated phase; hand-computed answers."""

from __future__ import annotations

from pathlib import Path

import pytest

from analysis.warehouse.loader import load_runs
from tests.analysis.rundirs import one, rows_of
from tests.analysis.runs import three_pipeline_run


def test_interference_has_every_pipeline_with_every_co_runner_set(
    tmp_path: Path, db_path: Path
) -> None:
    load_runs([three_pipeline_run(tmp_path)], db_path)
    rows = rows_of(db_path, "SELECT * FROM interference ORDER BY pipeline, co_runner_set")
    got = {
        (r["pipeline"], r["co_runner_set"]): (
            r["phase"],
            r["pipelines_in_phase"],
            round(r["throughput_ratio"], 9),
            round(r["throughput_ratio_ci_low"], 9),
            round(r["throughput_ratio_ci_high"], 9),
            r["throughput_verdict"],
            round(r["p50_slowdown"], 9),
            r["p50_verdict"],
            round(r["p99_slowdown"], 9),
        )
        for r in rows
    }
    slower, same = "slower", "no measurable effect"
    assert got == {
        ("a", "b"): ("collocated:a+b", 2, 0.8, 0.8, 0.8, slower, 1.25, slower, 1.25),
        ("a", "b+c"): ("collocated", 3, 0.4, 0.4, 0.4, slower, 2.5, slower, 2.5),
        ("a", "c"): ("collocated:a+c", 2, 0.5, 0.5, 0.5, slower, 2.0, slower, 2.0),
        ("b", "a"): ("collocated:a+b", 2, 1.0, 1.0, 1.0, same, 1.0, same, 1.0),
        ("b", "a+c"): ("collocated", 3, 0.5, 0.5, 0.5, slower, 2.0, slower, 2.0),
        ("b", "c"): ("collocated:b+c", 2, 0.8, 0.8, 0.8, slower, 1.25, slower, 1.25),
        ("c", "a"): ("collocated:a+c", 2, 1.0, 1.0, 1.0, same, 1.0, same, 1.0),
        ("c", "a+b"): ("collocated", 3, 0.4, 0.4, 0.4, slower, 2.5, slower, 2.5),
        ("c", "b"): ("collocated:b+c", 2, 0.5, 0.5, 0.5, slower, 2.0, slower, 2.0),
    }
    assert {r["ci_method"] for r in rows} == {"batch_means_delta"}


@pytest.mark.slow
def test_contention_is_keyed_by_phase_and_energy_stays_with_the_full_set(
    tmp_path: Path, db_path: Path
) -> None:
    load_runs([three_pipeline_run(tmp_path)], db_path)
    contention = rows_of(db_path, "SELECT * FROM contention ORDER BY phase, pipeline")
    assert [(r["phase"], r["pipeline"]) for r in contention] == [
        ("collocated", "a"),
        ("collocated", "b"),
        ("collocated", "c"),
        ("collocated:a+b", "a"),
        ("collocated:a+b", "b"),
        ("collocated:a+c", "a"),
        ("collocated:a+c", "c"),
        ("collocated:b+c", "b"),
        ("collocated:b+c", "c"),
    ]
    # Every phase is paired with the same solo baseline.
    assert {r["pipeline"]: r["solo_queries_per_s"] for r in contention} == pytest.approx(
        {"a": 200.0, "b": 100.0, "c": 50.0}
    )
    # Energy per query: solo 20 + 10 + 5 = 35 J over 3500 ok queries (0.01 J/query); the full
    # collocated phase 30 J over 1500 (0.02 J/query): ratio 2.0. Subset phases (1000 J each)
    # stay out, and their contention rows carry no energy ratio.
    comparison = one(db_path, "SELECT * FROM energy_comparison")
    assert comparison["solo_energy_j"] == pytest.approx(35.0)
    assert comparison["collocated_energy_j"] == pytest.approx(30.0)
    assert comparison["collocated_ok_queries"] == 1500
    assert comparison["energy_per_query_ratio"] == pytest.approx(2.0)
    ratios = {(r["phase"], r["pipeline"]): r["energy_per_query_ratio"] for r in contention}
    assert ratios[("collocated", "a")] == pytest.approx(2.0)
    assert ratios[("collocated:a+b", "a")] is None
    # contention_by_run: one row per (phase, pipeline), over the one trial.
    by_run = rows_of(db_path, "SELECT phase, pipeline, trials FROM contention_by_run")
    assert len(by_run) == 9 and {r["trials"] for r in by_run} == {1}


def test_every_phase_has_a_load_window_and_its_energy(tmp_path: Path, db_path: Path) -> None:
    load_runs([three_pipeline_run(tmp_path)], db_path)
    windows = rows_of(
        db_path,
        "SELECT w.phase, w.pipeline, w.window_s, e.energy_j FROM load_windows AS w "
        "JOIN energy AS e USING (run_id, trial, phase) "
        "WHERE w.pipeline IS NOT DISTINCT FROM e.pipeline ORDER BY w.phase, w.pipeline",
    )
    assert [(w["phase"], w["pipeline"]) for w in windows] == [
        ("collocated", None),
        ("collocated:a+b", None),
        ("collocated:a+c", None),
        ("collocated:b+c", None),
        ("solo", "a"),
        ("solo", "b"),
        ("solo", "c"),
    ]
    assert all(w["window_s"] == pytest.approx(10.0) for w in windows)
    assert [w["energy_j"] for w in windows] == pytest.approx(
        [30.0, 1000.0, 1000.0, 1000.0, 20.0, 10.0, 5.0]
    )
